"""``devtools.s3_server`` without a JVM: setup errors, its configuration files, the detached record."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from devtools import local_service, processes, s3_server
from devtools.s3_server import S3AlreadyRunningError, S3Endpoint, S3JarsMissingError, S3ServerError
from lakestream.errors import exit_status


@pytest.fixture
def no_java_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3_server, "require_java", lambda: "java")


@pytest.mark.usefixtures("no_java_check")
def test_missing_jars_name_the_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(s3_server, "S3PROXY_LIB_DIR", tmp_path / "lib" / "s3proxy")
    with pytest.raises(S3JarsMissingError, match=r"no S3Proxy jars in .*: run `make jvm`") as caught:
        s3_server.LocalS3.start(data_dir=tmp_path / "s3")
    assert exit_status(caught.value, "s3") == (2, f"lakestream: {caught.value}")


@pytest.mark.usefixtures("no_java_check")
@pytest.mark.parametrize("key", ["", "has space", "line\nbreak", "x" * 129])
def test_a_given_key_must_fit_a_properties_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: str
) -> None:
    monkeypatch.setattr(s3_server, "_s3proxy_classpath", lambda: "lib/*")
    with pytest.raises(S3ServerError, match="secret_key must be 3-128 printable ASCII"):
        s3_server.LocalS3.start(data_dir=tmp_path / "s3", secret_key=key or "ab")


def test_the_configuration_holds_the_key_pair_owner_only_and_logs_to_a_file(tmp_path: Path) -> None:
    layout = s3_server._Layout(tmp_path / "s3 & co")
    layout.root.mkdir()
    endpoint = S3Endpoint("http://127.0.0.1:4567", "AK", "se/cr+et\\x")
    s3_server._write_config(layout, endpoint)

    assert stat.S_IMODE(layout.properties.stat().st_mode) == 0o600
    settings = dict(
        line.split("=", 1) for line in layout.properties.read_text().splitlines() if not line.startswith("#")
    )
    assert settings == {
        "s3proxy.endpoint": "http://127.0.0.1:4567",
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": "AK",
        "s3proxy.credential": "se/cr+et\\\\x",  # Properties reads "\\\\" back as one backslash
        "jclouds.provider": "filesystem",
        "jclouds.filesystem.basedir": str(layout.buckets_dir),
    }
    logback = ElementTree.parse(layout.logback_xml).getroot()
    assert logback.findtext("appender/file") == str(layout.log_file)
    assert logback.find("root").get("level") == "INFO"


def _record(tmp_path: Path, pid: int) -> dict[str, object]:
    return {
        "pid": pid,
        "url": "http://127.0.0.1:4567",
        "access_key": "AK",
        "secret_key": "SK",
        "data_dir": str(tmp_path / "s3"),
    }


def test_a_stale_record_is_not_running_and_stopping_it_only_forgets_it(tmp_path: Path) -> None:
    state = tmp_path / "s3.json"
    assert not s3_server.status_detached(state_file=state).running
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    local_service.write_state(state, _record(tmp_path, gone.pid))

    status = s3_server.status_detached(state_file=state)
    assert not status.running and status.endpoint is not None and status.describe() == "s3: not running"
    assert not s3_server.stop_detached(state_file=state).running
    assert not state.exists()
    with pytest.raises(S3ServerError, match="lakestream s3 start"):
        s3_server.S3Status(running=False).storage_options()


def test_a_recorded_server_with_other_settings_is_refused_and_stop_signals_only_it(tmp_path: Path) -> None:
    """A stand-in process with the server's command line, so nothing needs a JVM."""
    state = tmp_path / "s3.json"
    layout = s3_server._Layout((tmp_path / "s3").resolve())
    stand_in = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "org.gaul.s3proxy.Main", str(layout.properties)]
    )
    try:
        deadline = time.monotonic() + 30
        while b"org.gaul.s3proxy.Main" not in Path(f"/proc/{stand_in.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        local_service.write_state(state, {**_record(tmp_path, stand_in.pid), "data_dir": str(layout.root)})
        status = s3_server.status_detached(state_file=state, probe=False)
        assert status.running and status.pid == stand_in.pid and status.responding is None
        assert "SK" not in status.describe() and "SK" not in repr(status)

        for other in ({"port": 4568}, {"data_dir": tmp_path / "other"}, {"access_key": "BK"}):
            with pytest.raises(S3AlreadyRunningError, match="stop it first with `lakestream s3 stop`"):
                s3_server.start_detached(state_file=state, **{"data_dir": layout.root, **other})

        before = s3_server.stop_detached(state_file=state, timeout=10)
        assert before.pid == stand_in.pid
        stand_in.wait(timeout=10)  # stop_detached has reaped it already (it is this test's child)
        assert not state.exists()
    finally:
        stand_in.kill()
        stand_in.wait()
    assert not processes.alive(stand_in.pid, stand_in)


def test_the_state_file_records_what_status_reads_back(tmp_path: Path) -> None:
    state = tmp_path / "s3.json"
    local_service.write_state(state, {**_record(tmp_path, 1), "region": "eu-west-1"})
    record = json.loads(state.read_text())
    assert record["secret_key"] == "SK"
    # pid 1 is never our server: its record is stale, but still says where it was.
    status = s3_server.status_detached(state_file=state)
    assert not status.running
    assert status.endpoint == S3Endpoint("http://127.0.0.1:4567", "AK", "SK", "eu-west-1")


def test_a_bad_bucket_name_fails_before_a_server_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def launch(**kwargs: object) -> None:
        raise AssertionError("no server should start")

    monkeypatch.setattr(s3_server, "_launch", launch)
    with pytest.raises(s3_server.BucketNameError, match="'Bad_Name' is not a valid S3 bucket name"):
        s3_server.LocalS3.start(data_dir=tmp_path / "s3", buckets=["good-name", "Bad_Name"])
    with pytest.raises(s3_server.BucketNameError):
        s3_server.start_detached(state_file=tmp_path / "s3.json", buckets=["x"])
