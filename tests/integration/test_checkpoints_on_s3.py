"""A job's checkpoint folder on the S3 server (``flink.checkpoint_dir = "s3://..."``): its lineages and
their newest completed checkpoints read through obstore, what a run supersedes removed, and a store that
cannot be used stopping a run before anything starts, with the fix. Flink itself writing and restoring
checkpoints there: ``test_ingest_state.py``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from devtools.s3_server import LocalS3
from flink_jobs.resume import Lineage, StoreJobFolder, StorePath
from lakestream.config import StorageConfig
from storage.object_store import delta_options
from storage.table_files import TableFiles, table_files

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def storage(s3: LocalS3) -> StorageConfig:
    return StorageConfig(endpoint=s3.url, region="us-east-1", path_style=True, allow_http=True)


@pytest.fixture
def bucket(s3: LocalS3, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket, and the server's key pair in the AWS variables (where credentials come from)."""
    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(name)
    options = s3.storage_options()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", options["AWS_ACCESS_KEY_ID"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", options["AWS_SECRET_ACCESS_KEY"])
    return name


def job_folder(s3: LocalS3, bucket: str) -> tuple[StoreJobFolder, TableFiles]:
    """The job folder ``s3://BUCKET/checkpoints/ingest`` and the files of ``s3://BUCKET/checkpoints``."""
    options = delta_options(storage(s3))
    root = StorePath(f"s3://{bucket}/checkpoints")
    return StoreJobFolder(root / "ingest", options), table_files(root, options)


def lineage(folder: StoreJobFolder, run_id: str, created: int) -> Lineage:
    return Lineage(folder.root / run_id, run_id=run_id, bounded=False, parallelism=2, created_ms=created)


def checkpoint(files: TableFiles, lin: Lineage, job: str, n: int, *, done: bool = True) -> StorePath:
    """Flink's objects of checkpoint ``n`` of Flink job ``job`` in ``lin``; ``_metadata`` (written last)
    only when ``done``."""
    chk = StorePath(f"{lin.folder}/{job}/chk-{n}")
    key = chk.removeprefix(files.uri + "/")
    files.write_atomic(f"{lin.folder.removeprefix(files.uri + '/')}/{job}/shared/sst-{n}", b"state")
    files.write_atomic(f"{key}/state-0", b"operator state")
    if done:
        files.write_atomic(f"{key}/_metadata", b"metadata")
    return chk


def names(files: TableFiles) -> list[str]:
    return [f.path for f in files.list("ingest")]


def test_lineages_and_their_newest_completed_checkpoint(s3: LocalS3, bucket: str) -> None:
    folder, files = job_folder(s3, bucket)
    folder.probe()
    assert folder.lineages() == [] and folder.newest() is None and folder.legacy_checkpoint() is None
    a, b = lineage(folder, "aaa", 5), lineage(folder, "bbb", 7)
    b = replace(b, start={"offsets": {"t#0": 4}}, end={"t#0": 9}, widest=4)
    folder.begin(b)
    folder.begin(a)
    assert folder.lineages() == [a, b] and folder.newest() == b
    assert folder.checkpoint(b) is None

    checkpoint(files, b, "job1", 1)
    second = checkpoint(files, b, "job1", 2)
    checkpoint(files, b, "job1", 3, done=False)  # in progress when the run stopped: no _metadata
    assert folder.checkpoint(b) == second == f"s3://{bucket}/checkpoints/ingest/bbb/job1/chk-2"
    assert isinstance(folder.checkpoint(b), StorePath)

    # A lineage continued from a checkpoint elsewhere restores that one until it has its own.
    c = Lineage(
        folder=folder.root / "ccc",
        run_id=None,
        bounded=False,
        parallelism=1,
        restored_from=str(second),
        created_ms=9,
    )
    folder.begin(c)
    assert folder.checkpoint(c) == second
    own = checkpoint(files, c, "job2", 6)
    assert folder.checkpoint(c) == own


def test_prune_and_finish_remove_what_a_run_supersedes(s3: LocalS3, bucket: str) -> None:
    folder, files = job_folder(s3, bucket)
    old, keep = lineage(folder, "old", 1), lineage(folder, "keep", 2)
    for lin in (old, keep):
        folder.begin(lin)
    checkpoint(files, old, "job0", 4)
    stale = checkpoint(files, keep, "job-a", 2)
    restored = checkpoint(files, keep, "job-b", 8)
    folder.prune(keep, keep_checkpoint=restored)
    left = names(files)
    assert not [n for n in left if n.startswith(("ingest/old/", "ingest/keep/job-a/"))], left
    assert "ingest/keep/lineage.json" in left and "ingest/keep/job-b/chk-8/_metadata" in left
    assert folder.lineages() == [keep] and folder.checkpoint(keep) == restored != stale
    folder.finish(keep)
    assert names(files) == [] and folder.newest() is None

    # A removal a crash interrupted (marked, lineage.json still there) is no lineage, and goes next time.
    half = lineage(folder, "half", 3)
    folder.begin(half)
    checkpoint(files, half, "job3", 1)
    files.write_atomic("ingest/half/.removing", b"")
    assert folder.newest() is None and names(files) == []


def run_land(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``lakestream land`` with checkpoints on S3, a broker that is never reached (nothing gets so far)."""
    return subprocess.run(
        [sys.executable, "-m", "cli", "land", "--topic", "t", "--table", "raw/t"],
        cwd=ROOT,
        env={
            **os.environ,
            "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:9",
            "LAKESTREAM__LAKEHOUSE__ROOT": str(tmp_path / "lakehouse"),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_store_that_cannot_be_used_stops_the_run_with_the_fix(
    s3: LocalS3, bucket: str, tmp_path: Path
) -> None:
    options = s3.storage_options()
    secret = options["AWS_SECRET_ACCESS_KEY"]
    base = {
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": json.dumps(f"s3://{bucket}/checkpoints"),
        "LAKESTREAM__STORAGE__ENDPOINT": json.dumps(s3.url),
        "LAKESTREAM__STORAGE__PATH_STYLE": "true",
        "LAKESTREAM__STORAGE__ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": options["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": secret,
    }
    cases = {
        "the bucket": (
            {"LAKESTREAM__FLINK__CHECKPOINT_DIR": json.dumps("s3://no-such-bucket/checkpoints")},
            ["bucket of s3://no-such-bucket/checkpoints/land-raw-t does not exist", "Fix: create the bucket"],
        ),
        "the lakehouse's bucket": (
            {"LAKESTREAM__LAKEHOUSE__ROOT": json.dumps("s3://no-such-lake/lakehouse")},
            ["bucket of s3://no-such-lake/lakehouse does not exist", "Fix: create the bucket"],
        ),
        "the credentials": (
            {"AWS_SECRET_ACCESS_KEY": "not-the-secret"},
            ["refused the credentials", "Fix: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"],
        ),
        "the endpoint": (
            {"LAKESTREAM__STORAGE__ENDPOINT": json.dumps(f"http://127.0.0.1:{closed_port()}")},
            ["cannot be reached", "Fix: start the store, or correct storage.endpoint"],
        ),
    }
    for case, (changed, expected) in cases.items():
        out = run_land({**base, **changed}, tmp_path)
        assert out.returncode == 2, (case, out.stdout, out.stderr)
        for text in expected:
            assert text in out.stderr, (case, out.stderr)
        assert secret not in out.stdout + out.stderr
    assert names(job_folder(s3, bucket)[1]) == []  # nothing was written
