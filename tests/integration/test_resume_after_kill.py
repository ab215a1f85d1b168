"""A killed unbounded job, started again, resumes from its retained checkpoint: no loss, no duplicate."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from kafka import KafkaProducer

from devtools.kafka_broker import create_topic
from devtools.processes import kill_group
from tests.support.ingest_job import wait_for_checkpoints

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def produce(bootstrap: str, topic: str, start: int, n: int) -> dict[tuple[int, int], bytes]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    sent = {}
    for i in range(start, start + n):
        meta = producer.send(topic, value=f"r{i}".encode()).get(timeout=30)
        sent[(meta.partition, meta.offset)] = f"r{i}".encode()
    producer.close()
    return sent


def rows(uri: str) -> int:
    try:
        return int(DeltaTable(uri).to_pyarrow_dataset().count_rows())
    except TableNotFoundError:
        return 0


def start_job(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the MiniCluster JVM dies with it
    )


def wait_rows(uri: str, at_least: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = rows(uri)
        if n >= at_least:
            return n
        assert proc.poll() is None, f"job exited early:\n{log.read_text()[-4000:]}"
        time.sleep(0.5)
    raise AssertionError(f"table has {rows(uri)} rows, expected >= {at_least}\n{log.read_text()[-4000:]}")


def test_kill_and_restart_resumes_exactly(kafka: str, lakehouse: Path, tmp_path: Path) -> None:
    topic = "resume.events"
    create_topic(kafka, topic, partitions=2)
    sent = produce(kafka, topic, 0, 2000)
    env = {
        "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": kafka,
        "LAKESTREAM__LAKEHOUSE__ROOT": str(lakehouse),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": '"1s"',
    }
    args = ["land", "--topic", topic, "--table", "raw/resume", "--starting-offsets", "earliest"]
    uri = str(lakehouse / "raw" / "resume")
    log = tmp_path / "job.log"

    first = start_job(args, env, log)
    try:
        wait_rows(uri, 1, first, log)
        sent |= produce(kafka, topic, 2000, 500)  # more input while it runs
    finally:
        kill_group(first)  # no clean shutdown: staged files and uncommitted checkpoints are left behind
    assert rows(uri) < len(sent), "everything produced was committed before the kill: not mid-stream"

    sent |= produce(kafka, topic, 2500, 500)
    second = start_job(args, env, log)
    try:
        wait_rows(uri, len(sent), second, log)
        # Two more completed checkpoints (each commits whatever it holds): nothing may be added twice.
        wait_for_checkpoints(tmp_path / "ckpt", 2, second, log)
    finally:
        kill_group(second)
    assert "resuming from checkpoint" in log.read_text()

    got = DeltaTable(uri).to_pyarrow_table()
    keys = list(zip(got["partition"].to_pylist(), got["offset"].to_pylist(), strict=True))
    assert len(keys) == len(set(keys)), "duplicates after the restart"
    assert dict(zip(keys, got["value"].to_pylist(), strict=True)) == sent
