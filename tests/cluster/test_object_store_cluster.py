"""``ingest`` at parallelism 2 on a standalone cluster whose TaskManagers share nothing but Kafka and the
object store: each runs in a working folder of its own, tables and checkpoints are on the S3 server, one
TaskManager is killed with SIGKILL while input is in flight, the job restores its checkpoint from the
store on the spare TaskManager, and every table is exact (the expectations of
``tests/integration/test_ingest_end_to_end.py``)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.flink_cluster import ObjectStoreAccess, StandaloneCluster
from devtools.s3_server import LocalS3
from lakestream.config import StorageConfig
from tests.integration.test_ingest_end_to_end import assert_tables, build_stream, expected_counts, produce
from tests.support.delta_tables import StoredTable
from tests.support.ingest_job import setup_topics, table_rows
from tests.support.silver_oracle import expected_silver

pytestmark = pytest.mark.cluster

ENTRY = Path(__file__).resolve().parents[2] / "cli" / "__main__.py"
BRONZE = "bronze/order_events"
CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def storage(s3: LocalS3) -> StorageConfig:
    """``[storage]`` of the S3 server: where it is, never who we are."""
    return StorageConfig(endpoint=s3.url, path_style=True, allow_http=True)


@pytest.fixture
def cluster(tmp_path: Path, s3: LocalS3) -> Iterator[StandaloneCluster]:
    """Three TaskManagers of one slot, each in its own folder: the job's two, and a spare to fail over to."""
    options = s3.storage_options()
    access = ObjectStoreAccess(storage(s3), credentials={k: options[k] for k in CREDENTIALS})
    conf = {"heartbeat.interval": "1000", "heartbeat.timeout": "8000"}
    with StandaloneCluster(
        tmp_path / "flink",
        taskmanagers=3,
        slots_per_taskmanager=1,
        extra_conf=conf,
        separate_taskmanagers=True,
        object_store=access,
    ) as c:
        yield c
    # The killed TaskManager's Python workers outlive it; stopping the cluster must not leave them behind.
    assert c.leftover_processes() == []


def wait_until(
    what: str, ready: Callable[[], Any], cluster: StandaloneCluster, job: str, timeout: float = 120
) -> Any:
    """``ready()``'s first true answer, polled while the job is alive; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        answer = ready()
        if answer:
            return answer
        state = cluster.rest(f"/jobs/{job}")["state"]
        assert state not in ("FAILED", "CANCELED", "FINISHED"), f"job {state} waiting for {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f}s; logs under {cluster.work_dir}"
        time.sleep(0.3)


def aws_variables(pid: int) -> set[str]:
    """The names of the AWS variables in the environment of process ``pid``."""
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return {e.split(b"=", 1)[0].decode() for e in entries if e.startswith(b"AWS_")}


def running_on(cluster: StandaloneCluster, job: str, without: str | None = None) -> set[str] | None:
    """The two TaskManagers that run the job's subtasks, once there are two and neither is ``without``."""
    hosts = cluster.job_taskmanagers(job)
    return hosts if len(hosts) == 2 and without not in hosts else None


def test_ingest_survives_a_killed_taskmanager_with_tables_and_checkpoints_on_s3(
    cluster: StandaloneCluster, kafka: str, s3: LocalS3, tmp_path: Path
) -> None:
    started = time.monotonic()
    bucket = f"cluster-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(bucket)
    lakehouse = StoredTable.at(
        s3.buckets_dir / bucket / "lakehouse", uri=f"s3://{bucket}/lakehouse", options=s3.storage_options()
    )
    topics, env = setup_topics(kafka, tmp_path, lakehouse)
    # The client gets the store's location from [storage] and its credentials from the cluster's
    # environment, as every JobManager and TaskManager does: no AWS variable is set for the job.
    env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
    env |= {
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": json.dumps(f"s3://{bucket}/checkpoints"),
        "LAKESTREAM__STORAGE__ENDPOINT": json.dumps(s3.url),
        "LAKESTREAM__STORAGE__PATH_STYLE": "true",
        "LAKESTREAM__STORAGE__ALLOW_HTTP": "true",
    }
    records, half = build_stream()
    produce(kafka, topics, records[:half])

    # The store's credentials are all the cluster's processes know of it, besides their config.yaml.
    assert [aws_variables(pid) for pid in cluster.taskmanager_pids()] == [set(CREDENTIALS)] * 3

    submitted = cluster.run_python(ENTRY, ["ingest"], detached=True, env=env, timeout=300)
    assert submitted.returncode == 0, f"{submitted.stdout[-3000:]}\n{submitted.stderr[-5000:]}"
    [job] = [j["jid"] for j in cluster.jobs()]
    try:
        # Mid-stream: the first rows are committed, the job's two subtasks run on two TaskManagers, and
        # the second half of the stream is still being produced when one of them is killed.
        wait_until("first commit to bronze", lambda: table_rows(lakehouse, BRONZE), cluster, job)
        hosts = wait_until(
            "two TaskManagers running subtasks", lambda: running_on(cluster, job), cluster, job
        )
        rest = records[half:]
        before_kill = records[:half] + rest[: len(rest) // 4]
        produce(kafka, topics, rest[: len(rest) // 4])
        committed = table_rows(lakehouse, BRONZE)
        restores = cluster.rest(f"/jobs/{job}/checkpoints")["counts"]["restored"]
        victim = sorted(hosts)[0]
        killed = cluster.kill_taskmanager(victim)
        in_flight = expected_counts(before_kill)[BRONZE] - committed
        assert in_flight > 0, "everything produced was committed before the kill"
        produce(kafka, topics, rest[len(rest) // 4 :])

        # Recovery: the job restored its latest checkpoint from the store and runs without the victim.
        def restored() -> dict[str, Any] | None:
            stats = cluster.rest(f"/jobs/{job}/checkpoints")
            if stats["counts"]["restored"] <= restores:
                return None
            return stats["latest"]["restored"]  # type: ignore[no-any-return]

        restore = wait_until("restore from a checkpoint", restored, cluster, job)
        assert str(restore["external_path"]).startswith(f"s3://{bucket}/checkpoints/"), restore
        # The REST view of the subtasks may lag the restore by a refresh interval, and a first restart may
        # still be aimed at the victim's slot before its heartbeat times out: wait for the new placement.
        after = wait_until(
            f"the job running on two TaskManagers other than {victim}",
            lambda: running_on(cluster, job, without=victim),
            cluster,
            job,
        )

        counts = expected_counts(records)
        counts["silver/orders"] = len(expected_silver([r.ev for r in records if r.kind == "valid"]))
        wait_until(
            "every row committed",
            lambda: all(table_rows(lakehouse, t) >= n for t, n in counts.items()),
            cluster,
            job,
            timeout=150,
        )
        # Two more completed checkpoints (each commits whatever it holds): nothing may be added twice.
        done = cluster.rest(f"/jobs/{job}/checkpoints")["counts"]["completed"]
        wait_until(
            "two more checkpoints",
            lambda: cluster.rest(f"/jobs/{job}/checkpoints")["counts"]["completed"] >= done + 2,
            cluster,
            job,
        )
        assert_tables(lakehouse, records)
        # Each TaskManager that ran a subtask kept RocksDB's working copies in its own folder.
        for resource_id in hosts | after:
            assert any(cluster.taskmanager_folders[resource_id].rocksdb.iterdir()), resource_id
    finally:
        if cluster.rest(f"/jobs/{job}")["state"] not in ("FAILED", "CANCELED", "FINISHED"):
            cluster.rest(f"/jobs/{job}?mode=cancel", method="PATCH")
    assert cluster.wait_for_job(job, states=("CANCELED",), timeout=60) == "CANCELED"

    # No secret in any configuration or log of the cluster's processes, nor in the client's output.
    secret = s3.storage_options()["AWS_SECRET_ACCESS_KEY"]
    assert secret not in submitted.stdout + submitted.stderr
    for folder in [cluster.folder, *cluster.taskmanager_folders.values()]:
        for path in [*folder.conf.iterdir(), *folder.log.iterdir()]:
            assert secret not in path.read_text(encoding="utf-8", errors="replace"), path
    print(
        f"killed {victim} (pid {killed}) with {in_flight} bronze rows in flight; restored "
        f"{restore['external_path']}; {time.monotonic() - started:.0f}s"
    )
