"""``devtools.local_service``: state files, waiting for readiness, port retries, process identity, log
tails, against real files and real child processes (no JVM)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools import local_service
from devtools.local_service import LocalServiceError, ServiceStartError


def test_a_state_file_is_written_whole_and_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "state" / "service.json"
    leftover = path.with_name("service.json.tmp")
    leftover.parent.mkdir()
    leftover.write_text("half")
    leftover.chmod(0o644)
    old_umask = os.umask(0)
    try:
        local_service.write_state(path, {"pid": 1, "secret": "s"})
    finally:
        os.umask(old_umask)
    assert json.loads(path.read_text()) == {"pid": 1, "secret": "s"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not leftover.exists()
    local_service.write_state(path, {"pid": 2})
    assert local_service.read_state(path, ("pid",), what="test") == {"pid": 2}


def test_an_unusable_state_file_reads_as_none(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "service.json"
    assert local_service.read_state(path, ("pid",), what="test") is None
    path.write_text("{not json")
    assert local_service.read_state(path, ("pid",), what="test") is None
    path.write_text(json.dumps({"url": "x"}))
    assert local_service.read_state(path, ("pid", "url"), what="test") is None
    assert "ignoring unreadable test state file" in caplog.text
    assert "without pid/url" in caplog.text


def _python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def test_wait_ready_returns_on_evidence_and_fails_on_exit_or_timeout(tmp_path: Path) -> None:
    def fail(message: str) -> LocalServiceError:
        return LocalServiceError(message)

    sleeper = subprocess.Popen(_python("import time; time.sleep(30)"))
    try:
        probes: list[float] = []
        local_service.wait_ready(
            sleeper,
            lambda left: probes.append(left) or len(probes) == 3,
            timeout=30,
            name="the service",
            address="here",
            where="port 1",
            fail=fail,
        )
        assert len(probes) == 3 and all(0 < left <= 30 for left in probes)
        with pytest.raises(
            LocalServiceError, match=r"the service did not answer at here within 0s; raise timeout"
        ):
            local_service.wait_ready(
                sleeper,
                lambda _: False,
                timeout=0.3,
                name="the service",
                address="here",
                where="x",
                fail=fail,
            )
    finally:
        sleeper.kill()
        sleeper.wait()
    quitter = subprocess.Popen(_python("import sys; sys.exit(3)"))
    quitter.wait()
    with pytest.raises(LocalServiceError, match=r"the service exited with code 3 while starting \(port 1\)"):
        local_service.wait_ready(
            quitter,
            lambda _: False,
            timeout=30,
            name="the service",
            address="here",
            where="port 1",
            fail=fail,
        )


def _start_error(tail: str) -> ServiceStartError:
    return ServiceStartError("did not start", log_file=Path("x.log"), log_tail=tail)


def test_start_on_port_retries_a_chosen_port_that_was_taken_meanwhile() -> None:
    tried: list[int] = []

    def raced_twice(port: int) -> int:
        tried.append(port)
        if len(tried) < 3:
            raise _start_error("java.net.BindException: Address already in use")
        return port

    assert local_service.start_on_port(None, raced_twice) == tried[-1]
    assert len(tried) == 3

    raced: list[int] = []

    def always_raced(port: int) -> int:
        raced.append(port)
        raise _start_error("Address already in use")

    with pytest.raises(ServiceStartError):
        local_service.start_on_port(None, always_raced)
    assert len(raced) == 3, "three attempts, then the error"

    calls: list[int] = []

    def other_failure(port: int) -> int:
        calls.append(port)
        raise _start_error("OutOfMemoryError")

    with pytest.raises(ServiceStartError):
        local_service.start_on_port(None, other_failure)
    assert len(calls) == 1, "only a port race is retried"
    raced.clear()
    with pytest.raises(ServiceStartError):
        local_service.start_on_port(4242, always_raced)
    assert raced == [4242], "a requested port is never swapped for another"


def test_a_service_is_known_by_its_command_line_and_only_while_it_runs(tmp_path: Path) -> None:
    marker = str(tmp_path / "service.properties")
    output = tmp_path / "service.out"
    child = local_service.spawn_jvm(
        _python("import sys, time; print('up', flush=True); time.sleep(30)", "Main", marker),
        cwd=tmp_path,
        output=output,
        detached=True,
    )
    try:
        assert os.getsid(child.pid) == child.pid, "its own session: a Ctrl-C of the CLI does not reach it"
        local_service.remember_detached(child)
        assert local_service.detached_child(child.pid) is child
        deadline = time.monotonic() + 30
        while "\nup\n" not in output.read_text():  # the child's own line, not the header quoting it
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert local_service.is_our_jvm(child.pid, ("Main", marker))
        assert not local_service.is_our_jvm(child.pid, ("Main", str(tmp_path / "other.properties")))
        code = local_service.stop_process(
            child.pid,
            timeout=10,
            popen=local_service.forget_detached(child.pid),
            name="t",
            error=LocalServiceError,
        )
        assert code == -15
    finally:
        child.kill()
        child.wait()
    assert not local_service.is_our_jvm(child.pid, ("Main", marker))
    assert local_service.detached_child(child.pid) is None
    assert output.read_text().startswith("\n=== ") and f"starting: {sys.executable} -c" in output.read_text()


def test_log_tail_names_each_file_and_keeps_the_last_lines(tmp_path: Path) -> None:
    log, out, missing = tmp_path / "a.log", tmp_path / "a.out", tmp_path / "none.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    out.write_text("")
    assert local_service.log_tail([missing, out], empty="(nothing)") == "(nothing)"
    tail = local_service.log_tail([log, out, missing])
    assert tail.startswith("[a.log]\nline 60\n") and tail.endswith("line 99")
    assert local_service.tail_text("a\nb\nc\n", lines=2) == "b\nc"
