"""Upgrade across the package layout: a checkpoint of the ingest job as it was before its modules and
Java classes moved restores into the moved code, with every table exact.

The old version (the last commit before the move, with its own Java operators built from it) runs
unbounded on the first half of a scenario and is killed with kill -9 while the second half is still
being produced; the current version starts on the same checkpoint folder and tables, must resume from
that checkpoint, and ends with bronze holding every event once and gold equal to the gold oracle for
every window (the de-dup, event-time and gold state restored, so no window is counted twice or short).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from devtools.processes import kill_group
from tests.integration.test_gold_speed_layer import (
    classify,
    gold_env,
    gold_rows,
    metrics_of,
    produce,
    scenario,
)
from tests.support.gold_oracle import expected_gold
from tests.support.ingest_job import old_tree, start_unbounded, table_rows

pytestmark = pytest.mark.integration

#: The last commit before the packages and the Java classes moved.
BEFORE_LAYOUT = "d5180eb"
BRONZE = "bronze/order_events"


def completed_checkpoints(folder: Path) -> int:
    """The newest completed checkpoint's id among the job's lineages under ``folder`` (0: none yet);
    a restored run numbers its checkpoints on from the one it restored."""
    return max(
        (int(m.parent.name.removeprefix("chk-")) for m in folder.glob("*/*/chk-*/_metadata")), default=0
    )


def wait_until(check: Callable[[], object], job: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    """Until ``check()`` holds, the job still running."""
    deadline = time.monotonic() + timeout
    while not check():
        assert job.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, log.read_text()[-4000:]
        time.sleep(0.2)


def test_a_checkpoint_from_before_the_layout_restores_into_the_moved_code(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    old = old_tree(BEFORE_LAYOUT, tmp_path / "old")
    topics, env = gold_env(kafka, tmp_path, lakehouse)
    events = scenario(seed=31, minutes=40, late_ratio=0.0)
    half = len(events) // 2
    first, second = events[:half], events[half:]
    checkpoints = tmp_path / "checkpoints" / "ingest"
    produce(kafka, topics, first)

    log = tmp_path / "ingest-old.log"
    job = start_unbounded({**env, "PYTHONPATH": str(old)}, log, cwd=old)

    def produce_paced() -> None:
        for i in range(0, len(second), 5):
            produce(kafka, topics, second[i : i + 5])
            time.sleep(0.25)

    producing = threading.Thread(target=produce_paced)
    try:
        wait_until(
            lambda: table_rows(lakehouse, BRONZE) >= len(first) and gold_rows(lakehouse), job, log, 240
        )
        seen = completed_checkpoints(checkpoints)
        producing.start()
        # Evidence that the old job took the second half's first records into a completed checkpoint.
        wait_until(
            lambda: (
                completed_checkpoints(checkpoints) >= seen + 2 and table_rows(lakehouse, BRONZE) > len(first)
            ),
            job,
            log,
            120,
        )
        in_flight = producing.is_alive()
    finally:
        kill_group(job)
    producing.join()
    assert in_flight, "the kill came after the second half was produced: not mid-stream"
    killed_at = table_rows(lakehouse, BRONZE)
    assert len(first) < killed_at < len(events)

    new_log = tmp_path / "ingest-new.log"
    # In the silver layout the old tree wrote: its kill left copy-on-write work staged, which a
    # merge-on-read start refuses (switching is test_silver_layout_upgrade's).
    job = start_unbounded({**env, "LAKESTREAM__TABLES__SILVER_LAYOUT": "copy_on_write"}, new_log)
    counted, beyond = classify(events)
    assert not beyond
    expected = metrics_of(expected_gold(e.delivery() for e in counted))
    try:
        wait_until(
            lambda: (
                table_rows(lakehouse, BRONZE) >= len(events)
                and metrics_of(list(gold_rows(lakehouse).values())) == expected
            ),
            job,
            new_log,
            300,
        )
        done = completed_checkpoints(checkpoints)
        # Two more completed checkpoints: nothing may arrive twice after the tables matched.
        wait_until(lambda: completed_checkpoints(checkpoints) >= done + 2, job, new_log, 60)
    finally:
        kill_group(job)
    said = new_log.read_text()
    assert "resuming from checkpoint" in said, said[-4000:]
    assert table_rows(lakehouse, BRONZE) == len(events)
    assert metrics_of(list(gold_rows(lakehouse).values())) == expected
    orders = {e.order_id for e in events if e.order_id is not None}
    silver = DeltaTable(str(lakehouse / "silver/orders")).to_pyarrow_table(columns=["order_id"])
    assert sorted(silver.column("order_id").to_pylist()) == sorted(orders)
