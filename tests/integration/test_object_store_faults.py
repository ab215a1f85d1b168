"""The object store going away under a running job: the S3 server stopped for 30 s mid-stream.

The test runs an S3 server of its own (the session's is shared by other tests) holding the lakehouse
and the checkpoints. With part of the input committed and more in flight, the server is killed and
started again 30 s later on the same port, with the same folder and key pair. Meanwhile the job can
neither stage nor commit to Delta, write a checkpoint or restore state. Where the outage meets it
decides what happens: a task whose request fails fails the job, and Flink restarts it from the newest
completed checkpoint, waiting longer each time (``flink.restart_*``, whose default budget outlasts the
outage); a checkpoint whose writes are retried by the S3 clients waits until the store is back. Either
way no checkpoint completes while the store is down, the job catches up by itself once it is back, in
the same process, and every table ends exact: nothing lost, nothing twice.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from devtools.processes import kill_group
from devtools.s3_server import LocalS3
from lakestream.config import FlinkConfig
from runtime.flink_env import restart_budget
from tests.integration.test_ingest_end_to_end import assert_tables, build_stream, expected_counts, produce
from tests.support.delta_tables import StoredTable, assert_no_orphans
from tests.support.ingest_job import setup_topics, start_unbounded, table_rows, wait_for
from tests.support.silver_oracle import expected_silver

pytestmark = pytest.mark.integration

BUCKET = "faults"
OUTAGE_S = 30.0
RESTARTING = "switched from state RUNNING to RESTARTING"
RESTORED = re.compile(r"Restoring job \w+ from Checkpoint (\d+) ")
JOB_FAILED = re.compile(r"Job \S+ \(\w+\) switched from state \w+ to FAILED")


def completed_checkpoints(folder: Path) -> int:
    """The highest completed checkpoint (``chk-N/_metadata``) under ``folder``, the server's own files."""
    return max((int(m.parent.name.split("-")[1]) for m in folder.rglob("chk-*/_metadata")), default=0)


def wait_for_checkpoint(
    folder: Path, above: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60
) -> None:
    """Until a checkpoint numbered above ``above`` has completed on the store."""
    deadline = time.monotonic() + timeout
    while completed_checkpoints(folder) <= above:
        assert proc.poll() is None, f"job exited early:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no checkpoint above {above}\n{log.read_text()[-4000:]}"
        time.sleep(0.5)


def flink_log(folder: Path) -> str:
    """The local JVM's Flink log (``FLINK_LOG_DIR``), where its restarts and checkpoints are logged."""
    return "".join(p.read_text(errors="replace") for p in sorted(folder.glob("*.log")))


def test_the_store_stopped_for_30s_mid_stream_the_job_fails_over_and_tables_stay_exact(
    kafka: str, tmp_path: Path
) -> None:
    # The default restart budget is what lets the job outlast the outage without a new run.
    assert restart_budget(FlinkConfig()) > 2 * OUTAGE_S
    data = tmp_path / "s3"
    server = LocalS3.start(data_dir=data, buckets=[BUCKET])
    port, keys = server.port, server.endpoint
    try:
        lakehouse = StoredTable.at(
            server.buckets_dir / BUCKET / "lakehouse",
            uri=f"s3://{BUCKET}/lakehouse",
            options=server.storage_options(),
        )
        checkpoints = server.buckets_dir / BUCKET / "checkpoints"
        flink_logs = tmp_path / "flink-log"
        topics, env = setup_topics(kafka, tmp_path, lakehouse)
        env |= {
            "LAKESTREAM__FLINK__CHECKPOINT_DIR": json.dumps(f"s3://{BUCKET}/checkpoints"),
            "LAKESTREAM__STORAGE__ENDPOINT": json.dumps(server.url),
            "LAKESTREAM__STORAGE__PATH_STYLE": "true",
            "LAKESTREAM__STORAGE__ALLOW_HTTP": "true",
            "FLINK_LOG_DIR": str(flink_logs),
        }
        records, half = build_stream()
        three_quarters = half + (len(records) - half) // 2
        log = tmp_path / "ingest.log"
        produce(kafka, topics, records[:half])
        started = time.monotonic()
        proc = start_unbounded(env, log)
        try:
            counts = expected_counts(records[:half])
            counts["silver/orders"] = len(
                expected_silver([r.ev for r in records[:half] if r.kind == "valid"])
            )
            wait_for(lakehouse, counts, proc, log)
            produce(kafka, topics, records[half:three_quarters])

            before = flink_log(flink_logs)
            os.kill(server.pid, signal.SIGKILL)  # the store goes away at once, requests in flight included
            server.stop(timeout=10)
            down = time.monotonic()
            last_before = completed_checkpoints(checkpoints)
            in_flight = expected_counts(records[:three_quarters])["bronze/order_events"]
            assert table_rows(lakehouse, "bronze/order_events") < in_flight, "nothing was in flight"
            while time.monotonic() - down < OUTAGE_S:
                assert proc.poll() is None, f"job exited during the outage:\n{log.read_text()[-4000:]}"
                time.sleep(1)

            assert completed_checkpoints(checkpoints) == last_before, "a checkpoint completed, store down"
            server = LocalS3.start(
                data_dir=data, port=port, access_key=keys.access_key, secret_key=keys.secret_key
            )
            up = time.monotonic()
            produce(kafka, topics, records[three_quarters:])
            wait_for(lakehouse, expected_counts(records), proc, log, timeout=300)
            caught_up = time.monotonic()
            # Two more checkpoints complete after everything landed: a late replay would show now.
            wait_for_checkpoint(checkpoints, completed_checkpoints(checkpoints) + 1, proc, log)
        finally:
            kill_group(proc)
        assert_tables(lakehouse, records)
        for table in (*expected_counts(records), "silver/orders", "gold/order_metrics_5m"):
            assert_no_orphans(lakehouse / table)  # what the failed attempts staged was removed

        # The same job kept going; a failover restored only what was completed before the outage.
        during = flink_log(flink_logs).removeprefix(before)
        restarts = during.count(RESTARTING)
        restored = [int(n) for n in RESTORED.findall(during)]
        assert last_before < completed_checkpoints(checkpoints)
        if restarts:
            assert restored and max(restored) <= last_before, during[-4000:]
            assert "Connection refused" in during
        assert "ExponentialDelayRestartBackoffTimeStrategy" in before
        assert not JOB_FAILED.search(during), during[-4000:]
        assert "resuming from checkpoint" not in log.read_text()  # one run: no new process was needed
        print(
            f"store down {down - started:.0f}s after the start, for {up - down:.0f}s; {restarts} restarts "
            f"(restored checkpoints {sorted(set(restored))}), "
            f"{during.count('Failed to trigger or complete')} checkpoints failed; "
            f"caught up {caught_up - up:.0f}s after the store was back; "
            f"{time.monotonic() - started:.0f}s in all"
        )
    finally:
        server.stop(timeout=10)
