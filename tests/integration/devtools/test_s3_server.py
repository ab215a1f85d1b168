"""The local S3 server against a real JVM: Delta tables on it, safe concurrent commits, clear errors,
detached control through the CLI."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import botocore.session
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import ClientError
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from devtools.processes import alive, free_port, port_in_use
from devtools.s3_server import (
    LocalS3,
    PortInUseError,
    S3Endpoint,
    S3RequestError,
    create_bucket,
    list_buckets,
)
from tests.support.cli import ROOT

pytestmark = pytest.mark.integration


@pytest.fixture
def bucket(s3: LocalS3) -> str:
    """A fresh bucket of the session's server, for one test."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    assert s3.create_bucket(name)
    return name


@pytest.fixture(scope="module")
def s3fs(s3: LocalS3) -> pafs.S3FileSystem:
    """pyarrow's S3 client (the AWS C++ SDK) on the server: a second, independent client to look with."""
    return s3.endpoint.filesystem()


def botocore_client(endpoint: S3Endpoint) -> BaseClient:
    """botocore's S3 client on the server, for raw requests (a test-only dependency).

    Path-style addressing, as the server serves it; checksums only where S3 requires them, so a PUT is
    the plain request delta-rs sends, not botocore's default extra CRC headers.
    """
    return botocore.session.get_session().create_client(
        "s3",
        endpoint_url=endpoint.url,
        region_name=endpoint.region,
        aws_access_key_id=endpoint.access_key,
        aws_secret_access_key=endpoint.secret_key,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


@pytest.fixture(scope="module")
def client(s3: LocalS3) -> BaseClient:
    return botocore_client(s3.endpoint)


def put_if_absent(client: BaseClient, bucket: str, key: str, body: bytes) -> tuple[int, str | None]:
    """PutObject with ``If-None-Match: *``: the HTTP status and S3 error code of the answer."""
    try:
        answer = client.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
    except ClientError as exc:
        return exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response["Error"].get("Code")
    return answer["ResponseMetadata"]["HTTPStatusCode"], None


def get_object(client: BaseClient, bucket: str, key: str) -> bytes:
    body: bytes = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    return body


def ids(table: DeltaTable) -> list[int]:
    return sorted(table.to_pyarrow_table()["id"].to_pylist())


def rows(*values: int) -> pa.Table:
    return pa.table({"id": pa.array(values, pa.int64())})


def commit(s3fs: pafs.S3FileSystem, bucket: str, table: str, version: int) -> dict[str, list[Any]]:
    """The actions of one commit file, read through pyarrow's client: action name -> its entries."""
    with s3fs.open_input_stream(f"{bucket}/{table}/_delta_log/{version:020d}.json") as stream:
        lines = stream.read().decode().splitlines()
    actions: dict[str, list[Any]] = {}
    for line in lines:
        [(name, body)] = json.loads(line).items()
        actions.setdefault(name, []).append(body)
    return actions


def commit_files(s3fs: pafs.S3FileSystem, bucket: str, table: str) -> list[str]:
    infos = s3fs.get_file_info(pafs.FileSelector(f"{bucket}/{table}/_delta_log"))
    return sorted(Path(i.path).name for i in infos if i.path.endswith(".json"))


def added_ids(s3fs: pafs.S3FileSystem, bucket: str, table: str, version: int) -> list[int]:
    """The ids in the data files that commit ``version`` adds."""
    found: list[int] = []
    for add in commit(s3fs, bucket, table, version)["add"]:
        found += pq.read_table(f"{bucket}/{table}/{add['path']}", filesystem=s3fs)["id"].to_pylist()
    return sorted(found)


def test_delta_rs_writes_reads_and_time_travels_on_the_server(
    s3: LocalS3, bucket: str, s3fs: pafs.S3FileSystem
) -> None:
    uri, options = f"s3://{bucket}/t", s3.storage_options()
    write_deltalake(uri, rows(1, 2), storage_options=options)
    write_deltalake(uri, rows(3), storage_options=options, mode="append")
    write_deltalake(uri, rows(9), storage_options=options, mode="overwrite")

    table = DeltaTable(uri, storage_options=options)
    assert (table.version(), ids(table)) == (2, [9])
    assert ids(DeltaTable(uri, storage_options=options, version=0)) == [1, 2]
    table.load_as_version(1)
    assert ids(table) == [1, 2, 3]
    assert [h["operation"] for h in DeltaTable(uri, storage_options=options).history()] == ["WRITE"] * 3

    # The table lives on the server: its log through another S3 client, and in the server's own store.
    assert commit_files(s3fs, bucket, "t") == [f"{v:020d}.json" for v in range(3)]
    assert (s3.buckets_dir / bucket / "t" / "_delta_log" / f"{2:020d}.json").is_file()


def test_two_writers_from_one_stale_snapshot_both_commit_and_nothing_is_overwritten(
    s3: LocalS3, bucket: str, s3fs: pafs.S3FileSystem
) -> None:
    uri, options = f"s3://{bucket}/t", s3.storage_options()
    write_deltalake(uri, rows(0), storage_options=options)
    first = DeltaTable(uri, storage_options=options)
    second = DeltaTable(uri, storage_options=options)
    assert first.version() == second.version() == 0

    write_deltalake(first, rows(1), mode="append")  # commits version 1
    # Planned on version 0 too: delta-rs finds version 1 taken before it writes, checks it for a
    # conflict (two appends have none) and commits at version 2. One after the other, that lookup alone
    # keeps version 1 intact; when writers race between lookup and write, only the server's refusal to
    # create an existing key does (the next two tests).
    write_deltalake(second, rows(2), mode="append")

    latest = DeltaTable(uri, storage_options=options)
    assert (latest.version(), ids(latest)) == (2, [0, 1, 2])
    # Every commit file is intact and holds its own writer's data: nothing was overwritten.
    assert commit_files(s3fs, bucket, "t") == [f"{v:020d}.json" for v in range(3)]
    for version in range(3):
        assert len(commit(s3fs, bucket, "t", version)["commitInfo"]) == 1
        assert added_ids(s3fs, bucket, "t", version) == [version]

    # A stale append after an overwrite is a real conflict: it fails, and the table keeps the overwrite.
    third = DeltaTable(uri, storage_options=options)
    write_deltalake(DeltaTable(uri, storage_options=options), rows(5), mode="overwrite")  # version 3
    with pytest.raises(CommitFailedError, match="concurrent transaction deleted data"):
        write_deltalake(third, rows(6), mode="append")
    latest = DeltaTable(uri, storage_options=options)
    assert (latest.version(), ids(latest)) == (3, [5])
    assert added_ids(s3fs, bucket, "t", 3) == [5]


def test_racing_writers_lose_no_commit(s3: LocalS3, bucket: str, s3fs: pafs.S3FileSystem) -> None:
    # On a store that ignores If-None-Match (S3Proxy 2.6) every writer here "commits" and the table ends
    # at version 1: the others overwrote one another's commit file.
    uri, options = f"s3://{bucket}/t", s3.storage_options()
    write_deltalake(uri, rows(0), storage_options=options)
    writers = 4
    tables = [DeltaTable(uri, storage_options=options) for _ in range(writers)]
    start = threading.Barrier(writers)
    outcome: dict[int, str] = {}

    def append(n: int) -> None:
        start.wait()
        try:
            write_deltalake(tables[n], rows(n + 1), mode="append")
            outcome[n] = "committed"
        except CommitFailedError as exc:  # allowed: a conflict the retries did not resolve
            outcome[n] = f"failed: {exc}"

    threads = [threading.Thread(target=append, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    committed = sorted(n + 1 for n, result in outcome.items() if result == "committed")
    assert len(outcome) == writers and committed, outcome

    latest = DeltaTable(uri, storage_options=options)
    assert latest.version() == len(committed)
    assert ids(latest) == [0, *committed]
    assert commit_files(s3fs, bucket, "t") == [f"{v:020d}.json" for v in range(len(committed) + 1)]
    assert (
        sorted(i for v in range(1, len(committed) + 1) for i in added_ids(s3fs, bucket, "t", v)) == committed
    )


def test_the_conditional_put_is_what_protects_a_commit(
    s3: LocalS3, bucket: str, s3fs: pafs.S3FileSystem, client: BaseClient
) -> None:
    uri, options = f"s3://{bucket}/t", s3.storage_options()
    write_deltalake(uri, rows(1), storage_options=options)
    key = f"t/_delta_log/{0:020d}.json"
    with s3fs.open_input_stream(f"{bucket}/{key}") as stream:
        before = stream.read()

    # The request delta-rs makes to commit a version, over an existing one: refused, the commit intact.
    assert put_if_absent(client, bucket, key, b'{"commitInfo":{}}\n') == (412, "PreconditionFailed")
    with s3fs.open_input_stream(f"{bucket}/{key}") as stream:
        assert stream.read() == before
    assert put_if_absent(client, bucket, "t/fresh.json", b"{}") == (200, None)
    assert get_object(client, bucket, "t/fresh.json") == b"{}"

    # And delta-rs commits by nothing else: with conditional puts off it refuses to commit at all.
    with pytest.raises(OSError, match="PutMode::Create` when conditional put is disabled"):
        write_deltalake(
            uri, rows(2), storage_options={**options, "AWS_CONDITIONAL_PUT": "disabled"}, mode="append"
        )
    assert ids(DeltaTable(uri, storage_options=options)) == [1]


def test_of_racing_creators_of_one_key_exactly_one_wins(client: BaseClient, bucket: str) -> None:
    racers = 8
    start = threading.Barrier(racers)
    status: dict[int, int] = {}

    def create(n: int) -> None:
        start.wait()
        status[n], _ = put_if_absent(client, bucket, "race/00000000000000000001.json", f"writer {n}".encode())

    threads = [threading.Thread(target=create, args=(n,)) for n in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(status.values()) == [200] + [412] * (racers - 1), status
    [winner] = [n for n, code in status.items() if code == 200]
    assert get_object(client, bucket, "race/00000000000000000001.json") == f"writer {winner}".encode()


def test_wrong_credentials_and_a_missing_bucket_are_clear_errors(s3: LocalS3, bucket: str) -> None:
    uri, options = f"s3://{bucket}/t", s3.storage_options()
    write_deltalake(uri, rows(1), storage_options=options)

    # What delta-rs says: the HTTP status and the server's S3 error code.
    wrong_secret = {**options, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    with pytest.raises(OSError, match=r"(?s)403 Forbidden.*SignatureDoesNotMatch"):
        DeltaTable(uri, storage_options=wrong_secret)
    wrong_key = {**options, "AWS_ACCESS_KEY_ID": "NOT-A-KEY"}
    with pytest.raises(OSError, match=r"(?s)403 Forbidden.*InvalidAccessKeyId"):
        write_deltalake(uri, rows(2), storage_options=wrong_key, mode="append")
    with pytest.raises(OSError, match=r"(?s)404 Not Found.*NoSuchBucket"):
        DeltaTable("s3://no-such-bucket/t", storage_options=options)
    with pytest.raises(OSError, match=r"(?s)404 Not Found.*NoSuchBucket"):
        write_deltalake("s3://no-such-bucket/t", rows(2), storage_options=options)
    without_http = {k: v for k, v in options.items() if k != "AWS_ALLOW_HTTP"}
    with pytest.raises(OSError, match="URL scheme is not allowed"):
        DeltaTable(uri, storage_options=without_http)
    assert ids(DeltaTable(uri, storage_options=options)) == [1]

    # What our own requests say: the refusal and the fix.
    endpoint = s3.endpoint
    wrong_secret_endpoint = endpoint.with_keys(endpoint.access_key, "not-the-secret")
    with pytest.raises(
        S3RequestError, match=r"SIGNATURE_DOES_NOT_MATCH.*: use the secret key it was started"
    ):
        list_buckets(wrong_secret_endpoint)
    with pytest.raises(
        S3RequestError, match=r"creating bucket 'never-made'.*: use the key pair it was started"
    ):
        create_bucket(wrong_secret_endpoint, "never-made")
    with pytest.raises(S3RequestError, match=r"INVALID_ACCESS_KEY_ID.*: use the access key it was started"):
        list_buckets(endpoint.with_keys("NOT-A-KEY", endpoint.secret_key))
    assert "never-made" not in list_buckets(endpoint)
    assert not create_bucket(endpoint, bucket)
    with pytest.raises(S3RequestError, match=f"bucket '{bucket}' already exists"):
        create_bucket(endpoint, bucket, exist_ok=False)
    nobody = S3Endpoint(f"http://127.0.0.1:{free_port()}", endpoint.access_key, endpoint.secret_key)
    with pytest.raises(S3RequestError, match=r"NETWORK_CONNECTION.*: start one \(`lakestream s3 start`\)"):
        list_buckets(nobody, attempts=1)


def test_a_server_keeps_its_objects_across_restarts_and_stops_cleanly(tmp_path: Path) -> None:
    data_dir = tmp_path / "s3"
    keys = {"access_key": "test-access", "secret_key": "se/cret+key\\with-backslash"}
    with LocalS3.start(data_dir=data_dir, buckets=["kept"], **keys) as server:
        assert server.url == f"http://127.0.0.1:{server.port}"
        status = server.status()
        assert status.running and status.responding and status.buckets == ("kept",)
        botocore_client(server.endpoint).put_object(Bucket="kept", Key="a/b.txt", Body=b"kept")
        assert stat.S_IMODE((data_dir / "s3proxy.properties").stat().st_mode) == 0o600
        pid, port = server.pid, server.port
        assert server.stop() is not None
    assert not alive(pid)
    assert not port_in_use(port)
    assert not server.status().running
    assert "Started" in server.log_file.read_text()

    with LocalS3.start(data_dir=data_dir, **keys) as again:
        assert get_object(botocore_client(again.endpoint), "kept", "a/b.txt") == b"kept"
    assert not alive(again.pid)


@pytest.fixture
def occupied_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def test_requested_port_in_use_is_a_clear_error(tmp_path: Path, occupied_port: int) -> None:
    with pytest.raises(PortInUseError, match=f"port {occupied_port} .*already in use") as caught:
        LocalS3.start(data_dir=tmp_path / "s3", port=occupied_port, timeout=10)
    assert caught.value.port == occupied_port


def lakestream(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m cli ARGS`` in a fresh process, whatever its exit code."""
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_detached_start_status_stop_through_the_cli(
    tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    state_dir = tmp_path / "state"
    env = {"LAKESTREAM_STATE_DIR": str(state_dir)}
    state_file = state_dir / "s3.json"
    assert lakestream("s3", "status", env=env).returncode == 1

    started = cli("s3", "start", "--bucket", "cli-bucket", env=env)
    try:
        record = json.loads(state_file.read_text())
        secret = record["secret_key"]
        assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
        assert stat.S_IMODE((state_dir / "s3" / "s3proxy.properties").stat().st_mode) == 0o600
        assert secret not in started.stdout + started.stderr
        for shown in (record["url"], record["access_key"], "s3://cli-bucket/", str(state_file)):
            assert shown in started.stdout

        status = cli("s3", "status", env=env)
        assert f"(pid {record['pid']})" in status.stdout and "answering" in status.stdout
        assert secret not in status.stdout + status.stderr

        # The recorded key pair is the server's: delta-rs writes with it.
        endpoint = S3Endpoint(record["url"], record["access_key"], secret)
        write_deltalake("s3://cli-bucket/t", rows(1, 2), storage_options=endpoint.storage_options())
        assert ids(DeltaTable("s3://cli-bucket/t", storage_options=endpoint.storage_options())) == [1, 2]

        # `eval "$(lakestream s3 env)"` gives a shell the AWS variables; the secret is read, not printed.
        exported = cli("s3", "env", env=env).stdout
        assert secret not in exported and exported.startswith("export AWS_")
        shell = subprocess.run(
            ["bash", "-c", f'{exported}\necho "$AWS_SECRET_ACCESS_KEY|$AWS_ENDPOINT_URL"'],
            capture_output=True,
            text=True,
            check=True,
        )
        assert shell.stdout.strip() == f"{secret}|{record['url']}"

        # Starting again with the same settings is a no-op that may add buckets; other settings are refused.
        again = cli("s3", "start", "--bucket", "second-bucket", env=env)
        assert f"(pid {record['pid']})" in again.stdout and "s3://second-bucket/" in again.stdout
        refused = lakestream("s3", "start", "--port", str(free_port()), env=env)
        assert refused.returncode == 2 and "lakestream s3 stop" in refused.stderr
    finally:
        stopped = cli("s3", "stop", env=env)

    assert stopped.stdout.strip() == "s3: stopped"
    assert not alive(record["pid"])
    assert not state_file.exists()
    after = lakestream("s3", "status", env=env)
    assert (after.returncode, after.stdout.strip()) == (1, "s3: not running")
    assert cli("s3", "stop", env=env).stdout.strip() == "s3: was not running"
    assert lakestream("s3", "env", env=env).returncode == 1
