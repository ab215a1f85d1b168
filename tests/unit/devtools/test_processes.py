"""``devtools.processes``: ports and process liveness against real sockets and real child processes."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from devtools import processes


def test_free_port_is_bindable_and_skips_excluded_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    port = processes.free_port()
    assert not processes.port_in_use(port)
    offered = iter([5000, 5000, 5001])
    monkeypatch.setattr(processes, "_ephemeral_port", lambda: next(offered))
    assert processes.free_port(exclude={5000}) == 5001


def test_free_port_gives_up_when_every_offer_is_excluded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "_ephemeral_port", lambda: 5000)
    with pytest.raises(OSError, match="could not find a free TCP port"):
        processes.free_port(exclude={5000})


def test_port_in_use_sees_listeners_and_sockets_that_only_bound() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        port = listening.getsockname()[1]
        assert processes.port_in_use(port)
        assert processes.accepts_connections(port)
    assert not processes.port_in_use(port)
    assert not processes.accepts_connections(port)
    with socket.socket() as bound:  # bound, not listening yet: a connect would not notice it
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        assert processes.port_in_use(port)
        assert not processes.accepts_connections(port)


def test_alive_for_running_exited_and_reaped_processes() -> None:
    assert processes.alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert processes.alive(child.pid) and processes.alive(child.pid, child)
    finally:
        child.kill()
    child.wait()
    assert not processes.alive(child.pid, child)
    assert not processes.alive(child.pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_unreaped_child_is_gone_once_exited_even_with_a_space_in_its_name(tmp_path: Path) -> None:
    # The state letter follows the command name in /proc/<pid>/stat; a name with ") R " in it must
    # not be read as a running process. Without the Popen, alive() reaps the zombie itself.
    exe = tmp_path / "x) R y"
    shutil.copy(shutil.which("true") or "/bin/true", exe)
    child = subprocess.Popen([str(exe)])
    deadline = time.monotonic() + 10
    while processes._proc_state(child.pid) != "Z":
        assert time.monotonic() < deadline, "the child did not exit"
        time.sleep(0.05)
    assert processes._proc_state(child.pid) == "Z"
    assert not processes.alive(child.pid)
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)  # alive() reaped it
    child.returncode = 0  # so Popen does not wait for it again


def test_terminate_sigterms_then_sigkills_what_ignores_it() -> None:
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    assert processes.terminate(polite.pid, timeout=10, popen=polite) == -15
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
    )
    assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
    started = time.monotonic()
    assert processes.terminate(stubborn.pid, timeout=0.5, popen=stubborn) == -9
    assert time.monotonic() - started < 10
    assert processes.terminate(stubborn.pid, timeout=1, popen=stubborn) == -9, "already gone: no-op"


def _group_with_a_grandchild(script: str) -> tuple[subprocess.Popen[bytes], int]:
    leader = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, start_new_session=True)
    assert leader.stdout is not None
    grandchild = int(leader.stdout.readline())
    return leader, grandchild


def test_kill_group_ends_the_whole_group_and_reaps_the_leader() -> None:
    leader, grandchild = _group_with_a_grandchild("sleep 60 & echo $!; wait")
    assert processes.alive(grandchild)
    assert processes.kill_group(leader) == -9
    assert processes.wait_gone(grandchild, None, 5), "the grandchild outlived SIGKILL of its group"


def test_kill_group_with_grace_lets_the_group_end_on_sigterm() -> None:
    leader, grandchild = _group_with_a_grandchild("sleep 60 & echo $!; wait")
    assert processes.kill_group(leader, grace=10) == -15
    assert processes.wait_gone(grandchild, None, 5), "the grandchild outlived SIGTERM of its group"


def test_kill_until_gone_kills_again_until_none_is_listed() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    assert processes.kill_until_gone(lambda: [child.pid] if child.poll() is None else [], timeout=10) == []
    assert child.returncode == -9
    assert processes.kill_until_gone(lambda: [os.getpid()], timeout=0) == [os.getpid()], "timeout: listed"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_pids_with_env_finds_processes_by_an_environment_entry() -> None:
    mark = f"lakestream-test-{uuid.uuid4()}"
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], env={**os.environ, "LAKESTREAM_MARK": mark}
    )
    try:
        assert processes.pids_with_env("LAKESTREAM_MARK", mark) == [child.pid]
        assert processes.pids_with_env("LAKESTREAM_MARK", mark + "-other") == []
    finally:
        child.kill()
        child.wait()
    assert processes.pids_with_env("LAKESTREAM_MARK", mark) == []
