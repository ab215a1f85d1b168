"""Upgrade: ingest checkpoints of earlier graphs restore into the current one; one whose gold state
has no place in it is refused with the way on.

The old version (a commit from this repository's history, with its own Java operators built from it)
runs unbounded and is killed mid-stream; the new version is started on the same checkpoint folder and
tables and must resume from that checkpoint (DESIGN.md section 11.6, "Graph change"):

- From before the speed layer: the de-dup state, watermarks and sinks' run id restored, the speed
  layer's operators starting empty. Windows that only the new version saw equal the gold oracle; windows
  the old version had begun can only hold fewer events (backfill them).
- From the speed layer in Flink SQL: refused before writing anything; one bounded run and a backfill
  of the windows the old run had begun give exact gold rows.
- From another ``gold.window``: the same.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable

from devtools.processes import kill_group
from tests.integration.test_gold_speed_layer import (
    START,
    Event,
    classify,
    gold_env,
    gold_rows,
    metrics_of,
    produce,
    scenario,
)
from tests.support.cli import run_cli
from tests.support.gold_oracle import expected_gold
from tests.support.ingest_job import (
    ROOT,
    old_tree,
    start_ingest,
    start_unbounded,
    table_rows,
    wait_for,
    wait_for_checkpoints,
)

pytestmark = pytest.mark.integration

#: The last commit before the speed layer changed the ingest graph.
BEFORE_SPEED_LAYER = "592855b"
#: The last commit with the speed layer's aggregate in Flink SQL.
BEFORE_GOLD_AGGREGATE = "b8f5e2d"
GOLD_10M = "gold/order_metrics_10m"


def run_old_then_kill(
    old: Path, env: dict[str, str], lakehouse: Path, log: Path, *, bronze_rows: int, gold: bool = False
) -> None:
    """Run the old tree unbounded until bronze holds ``bronze_rows`` (and, with ``gold``, gold has
    rows), a few checkpoints more, then kill it mid-stream. The old tree goes first on the path of the
    client and of the Python workers the JVM starts (which would otherwise import this tree's packages
    through the editable install)."""
    first = start_unbounded({**env, "PYTHONPATH": str(old)}, log, cwd=old)
    try:
        wait_for(lakehouse, {"bronze/order_events": bronze_rows}, first, log, timeout=240)
        deadline = time.monotonic() + 120
        while gold and not gold_rows(lakehouse):
            assert first.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.5)
        wait_for_checkpoints(Path(env["LAKESTREAM__FLINK__CHECKPOINT_DIR"]), 2, first, log)
    finally:
        kill_group(first)


def refused_without_writing(
    env: dict[str, str], log: Path, lakehouse: Path, versions: dict[str, int], *flags: str
) -> str:
    """Run ``lakestream ingest FLAGS``, which must stop with exit 2 having written nothing (the tables
    at ``versions``, no gold table of the 10-minute window); what it said."""
    refused = start_ingest(env, log, *flags)
    try:
        assert refused.wait(timeout=240) == 2, log.read_text()[-4000:]
    finally:
        kill_group(refused)
    assert {t: DeltaTable(str(lakehouse / t)).version() for t in versions} == versions
    assert not (lakehouse / GOLD_10M).exists()
    return log.read_text()


def killed_between_halves(
    tree: Path, kafka: str, lakehouse: Path, tmp_path: Path, *, seed: int
) -> tuple[dict[str, str], list[Event], list[Event]]:
    """Two 15-minute halves of a scenario: the first produced and ingested by ``tree`` unbounded, which
    is killed once it committed gold rows (its tables and txns are in play); then the second
    produced. The job's environment and both halves."""
    topics, env = gold_env(kafka, tmp_path, lakehouse)
    before = scenario(seed=seed, minutes=15, late_ratio=0.0)
    after = scenario(seed=seed + 1, minutes=15, late_ratio=0.0, start=START + timedelta(minutes=15))
    produce(kafka, topics, before)
    run_old_then_kill(tree, env, lakehouse, tmp_path / "ingest.log", bronze_rows=len(before), gold=True)
    produce(kafka, topics, after)
    return env, before, after


def refused_then_drained_and_backfilled(env: dict[str, str], log: Path, lakehouse: Path) -> None:
    """A restore of the killed run's checkpoint under ``env`` stops with exit 2 having written nothing,
    naming the way on; follow it: one bounded run, then a backfill of the windows the killed run had
    begun (its events reach 15 minutes and some jitter past ``START``; the bounded run saw every event
    of the later ones)."""
    versions = {t: DeltaTable(str(lakehouse / t)).version() for t in ("bronze/order_events", "silver/orders")}
    said = refused_without_writing(env, log, lakehouse, versions)
    assert "holds state of operator" in said and "command once with --bounded" in said, said[-4000:]
    assert "lakestream backfill" in said

    drained = run_cli("ingest", "--bounded", env=env, timeout=300)
    assert "settling the previous run at checkpoint" in drained.stdout
    begun = (START - timedelta(minutes=10), START + timedelta(minutes=20))
    run_cli("backfill", "--from", begun[0].isoformat(), "--to", begun[1].isoformat(), env=env)


def test_a_checkpoint_from_before_the_speed_layer_restores_into_the_new_graph(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    old = old_tree(BEFORE_SPEED_LAYER, tmp_path / "old")
    topics, env = gold_env(kafka, tmp_path, lakehouse)
    before = scenario(seed=5, minutes=15, late_ratio=0.0)
    after = scenario(seed=6, minutes=15, late_ratio=0.0, start=START + timedelta(minutes=30))
    log = tmp_path / "ingest.log"
    produce(kafka, topics, before)

    # The old tree has no [gold] section.
    old_env = {k: v for k, v in env.items() if "__GOLD__" not in k}
    run_old_then_kill(old, old_env, lakehouse, log, bronze_rows=len(before))
    assert not (lakehouse / "gold").exists()  # the old version has no speed layer
    produce(kafka, topics, after)

    log2 = tmp_path / "ingest-new.log"
    second = start_unbounded(env, log2)
    counted, _ = classify(before + after)
    after_ids = {e.event_id for e in after}
    expected_after = metrics_of(expected_gold(e.delivery() for e in counted if e.event_id in after_ids))
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
    expected_before = metrics_of(expected_gold(e.delivery() for e in counted if e.event_id not in after_ids))
    for w, row in got.items():
        if w in expected_before:
            assert row["events"] <= expected_before[w]["events"], w


def test_a_checkpoint_of_the_sql_speed_layer_is_refused_with_the_way_on(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    """The speed layer's aggregate was Flink SQL before ``GoldWindowAggregate``: its state has no
    place in the new graph. The unbounded run stops before writing anything, saying what to do; doing
    it (one bounded run, a backfill of the windows the old run had begun) gives exact gold rows and
    silver holds every order."""
    old = old_tree(BEFORE_GOLD_AGGREGATE, tmp_path / "old")
    env, before, after = killed_between_halves(old, kafka, lakehouse, tmp_path, seed=7)
    refused_then_drained_and_backfilled(env, tmp_path / "ingest-new.log", lakehouse)
    counted, beyond = classify(before + after)
    assert not beyond
    expected = metrics_of(expected_gold(e.delivery() for e in counted))
    got = metrics_of(list(gold_rows(lakehouse).values()))
    # The backfill writes every window of its range, the empty ones with zeros.
    assert {w: m for w, m in got.items() if m["events"]} == expected
    assert table_rows(lakehouse, "bronze/order_events") == len(before) + len(after)  # nothing twice
    orders = {e.order_id for e in before + after if e.order_id is not None}
    silver = DeltaTable(str(lakehouse / "silver/orders")).to_pyarrow_table(columns=["order_id"])
    assert sorted(silver.column("order_id").to_pylist()) == sorted(orders)


def test_a_checkpoint_of_another_gold_window_is_refused_with_the_way_on(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    """``gold.window`` changed under a live lineage: the gold aggregate's state of the old window has no
    place in the new graph. The unbounded run stops before writing anything, saying what to do; doing it
    (one bounded run, a backfill of the windows the old run had begun) gives exact gold rows."""
    env, before, after = killed_between_halves(ROOT, kafka, lakehouse, tmp_path, seed=11)
    ten = {**env, "LAKESTREAM__GOLD__WINDOW": '"10m"', "LAKESTREAM__GOLD__TABLE": GOLD_10M}
    refused_then_drained_and_backfilled(ten, tmp_path / "ingest-10m.log", lakehouse)
    counted, beyond = classify(before + after)
    assert not beyond
    got = DeltaTable(str(lakehouse / GOLD_10M)).to_pyarrow_table().to_pylist()
    ten_minutes = expected_gold((e.delivery() for e in counted), timedelta(minutes=10))
    assert metrics_of(got) == metrics_of(ten_minutes)
    assert table_rows(lakehouse, "bronze/order_events") == len(before) + len(after)  # nothing twice


def test_an_interrupted_bounded_run_is_completed_by_its_own_graph_only(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    """A bounded run killed after its first commits, then a bounded run with another ``gold.window``:
    that graph cannot take the run's checkpoint, and settling it is not exact for a bounded run (a
    writer may have committed its end already), so it stops before writing, saying to complete the run
    with its own settings. Doing that completes it exactly."""
    topics, env = gold_env(kafka, tmp_path, lakehouse)
    events = scenario(seed=13, minutes=120, late_ratio=0.0)
    produce(kafka, topics, events)
    # Small batches, one per Python bundle: slow enough to be killed between its first commit and its end.
    slow = {**env, "LAKESTREAM__FLINK__BATCH_SIZE": "4", "LAKESTREAM__FLINK__BUNDLE_SIZE": "1"}
    log = tmp_path / "bounded.log"
    first = start_ingest(slow, log, "--bounded")
    try:
        wait_for(lakehouse, {"bronze/order_events": 1}, first, log, timeout=240)
    finally:
        kill_group(first)
    partial = table_rows(lakehouse, "bronze/order_events")
    assert 0 < partial < len(events), f"the run was not killed mid-way ({partial} rows)"
    versions = {t: DeltaTable(str(lakehouse / t)).version() for t in ("bronze/order_events", "silver/orders")}

    ten = {**env, "LAKESTREAM__GOLD__WINDOW": '"10m"', "LAKESTREAM__GOLD__TABLE": GOLD_10M}
    said = refused_without_writing(ten, tmp_path / "bounded-10m.log", lakehouse, versions, "--bounded")
    assert "completing the interrupted bounded run" in said, said[-4000:]
    assert "cannot be completed by this job graph" in said and "holds state of operator" in said, said[-4000:]
    assert "the same `lakestream ingest --bounded` command once with the settings" in said

    completed = run_cli("ingest", "--bounded", env=env, timeout=300)
    assert "completing the interrupted bounded run" in completed.stdout
    counted, beyond = classify(events)
    assert not beyond
    assert table_rows(lakehouse, "bronze/order_events") == len(events)  # nothing lost, nothing twice
    assert metrics_of(list(gold_rows(lakehouse).values())) == metrics_of(
        expected_gold(e.delivery() for e in counted)
    )
