"""Upgrade: an ingest checkpoint of the version before the speed layer restores into the new graph.

The old version (the commit before the speed layer, from this repository's history, with its own Java
operators built from it) runs unbounded and is killed mid-stream; the new version is started on the
same checkpoint folder and tables. It must resume from that checkpoint (the de-dup state, watermarks and
sinks' run id restored, the speed layer's operators starting empty) and write gold for the events it
reads: windows that only the new version saw equal the reference; windows the old version had begun
can only hold fewer events (DESIGN.md section 11.6: backfill them).
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from devtools.processes import kill_group
from lakestream.gold import reference_aggregate
from tests.integration.test_gold_speed_layer import (
    SETTINGS,
    START,
    classify,
    gold_env,
    gold_rows,
    metrics_of,
    produce,
    scenario,
)
from tests.support.ingest_job import old_tree, start_unbounded, table_rows, wait_for

pytestmark = pytest.mark.integration

#: The last commit before the speed layer changed the ingest graph.
BEFORE_SPEED_LAYER = "592855b"


def test_a_checkpoint_from_before_the_speed_layer_restores_into_the_new_graph(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    old = old_tree(BEFORE_SPEED_LAYER, tmp_path / "old")
    topics, env = gold_env(kafka, tmp_path, lakehouse)
    before = scenario(seed=5, minutes=15, late_ratio=0.0)
    after = scenario(seed=6, minutes=15, late_ratio=0.0, start=START + timedelta(minutes=30))
    log = tmp_path / "ingest.log"
    produce(kafka, topics, before)

    # The old tree first on the path of the client and of the Python workers the JVM starts (which
    # would otherwise import this tree's packages through the editable install).
    # It has no [gold] section.
    old_env = {k: v for k, v in env.items() if "__GOLD__" not in k}
    first = start_unbounded({**old_env, "PYTHONPATH": str(old)}, log, cwd=old)
    try:
        wait_for(lakehouse, {"bronze/order_events": len(before)}, first, log, timeout=240)
        time.sleep(2.5)  # a few more checkpoints
    finally:
        kill_group(first)
    assert not (lakehouse / "gold").exists()  # the old version has no speed layer
    produce(kafka, topics, after)

    log2 = tmp_path / "ingest-new.log"
    second = start_unbounded(env, log2)
    counted, _ = classify(before + after)
    after_ids = {e.event_id for e in after}
    expected_after = metrics_of(
        reference_aggregate([e.gold_input() for e in counted if e.event_id in after_ids], SETTINGS)
    )
    try:
        wait_for(lakehouse, {"bronze/order_events": len(before) + len(after)}, second, log2, timeout=240)
        deadline = time.monotonic() + 120
        while True:
            got = metrics_of(list(gold_rows(lakehouse).values()))
            if all(got.get(w) == m for w, m in expected_after.items()):
                break
            assert second.poll() is None, log2.read_text()[-4000:]
            assert time.monotonic() < deadline, f"gold {got}\nexpected {expected_after}"
            time.sleep(1)
    finally:
        kill_group(second)
    assert "resuming from checkpoint" in log2.read_text()
    assert table_rows(lakehouse, "bronze/order_events") == len(before) + len(after)  # nothing twice
    # Windows the old version had begun hold at most their events (only the replayed tail is in).
    expected_before = metrics_of(
        reference_aggregate([e.gold_input() for e in counted if e.event_id not in after_ids], SETTINGS)
    )
    for w, row in got.items():
        if w in expected_before:
            assert row["events"] <= expected_before[w]["events"], w
