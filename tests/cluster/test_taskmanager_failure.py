"""Kill a TaskManager of a real standalone cluster mid-job: the job recovers and the table is exact."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from kafka import KafkaProducer

from devtools.flink_cluster import StandaloneCluster
from devtools.kafka_broker import create_topic

pytestmark = pytest.mark.cluster

JOB = Path(__file__).resolve().parents[1] / "integration" / "jobs" / "failing_land.py"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    conf = {"heartbeat.interval": "1000", "heartbeat.timeout": "8000"}
    with StandaloneCluster(tmp_path / "flink", taskmanagers=2, slots_per_taskmanager=1, extra_conf=conf) as c:
        yield c
    # The killed TaskManager's Python workers outlive it; stopping the cluster must not leave them behind.
    assert c.leftover_processes() == []


def committed_rows(uri: str) -> int:
    try:
        return int(DeltaTable(uri).to_pyarrow_dataset().count_rows())
    except TableNotFoundError:
        return 0


def test_killed_taskmanager_is_replaced_and_nothing_is_lost_or_repeated(
    cluster: StandaloneCluster, kafka: str, tmp_path: Path
) -> None:
    topic = "cluster.tmkill"
    create_topic(kafka, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    # 6,000 records per subtask at >= 2 ms each: >= 12 s of input, so the kill below lands while both
    # subtasks still read. With 2,000 a subtask had once finished its input and was waiting for its
    # final checkpoint when its TaskManager died, and the job never failed over (README, Limitations).
    values = [f"v{i}".encode() for i in range(12_000)]
    futures = [producer.send(topic, value=v) for v in values]
    producer.flush()
    sent = {}
    for value, future in zip(values, futures, strict=True):
        meta = future.get(timeout=30)
        sent[(meta.partition, meta.offset)] = value
    producer.close()

    uri = str(tmp_path / "table")
    # FAIL_AFTER 0: the job injects no failure of its own; it only runs slowly enough to be killed.
    args = [kafka, topic, uri, str(tmp_path / "ckpt"), "0", str(tmp_path / "unused.marker")]
    result = cluster.run_python(JOB, args, detached=True, timeout=300)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    [job] = cluster.jobs()

    deadline = time.monotonic() + 180
    while committed_rows(uri) == 0:
        assert time.monotonic() < deadline, "no commit before the kill"
        assert cluster.rest(f"/jobs/{job['jid']}")["state"] in ("CREATED", "RUNNING", "INITIALIZING")
        time.sleep(0.3)
    assert committed_rows(uri) < len(sent) // 2, "the job was too far along to kill it mid-stream"
    killed = cluster.kill_taskmanager()
    cluster.add_taskmanager()  # the job needs both slots back

    state = cluster.wait_for_job(job["jid"], timeout=300)
    assert state == "FINISHED", f"job ended {state}; logs in {cluster.log_dir}"
    exceptions = cluster.rest(f"/jobs/{job['jid']}/exceptions")
    assert exceptions.get("exceptionHistory", {}).get("entries"), (
        f"no failover recorded after killing {killed}"
    )

    got = DeltaTable(uri).to_pyarrow_table()
    keys = list(zip(got["partition"].to_pylist(), got["offset"].to_pylist(), strict=True))
    assert len(keys) == len(set(keys)), "duplicates after the TaskManager failure"
    assert dict(zip(keys, got["value"].to_pylist(), strict=True)) == sent
    print(f"killed TaskManager pid {killed}; python {sys.executable}")
