"""A quiet Kafka partition across periodic bounded runs: it holds no window open, and its wake-up is kept.

Real broker, ``lakestream ingest --bounded`` twice on a MiniCluster, the CLI's ``reconcile`` and
``backfill``. One behaviour partition carries a single event at the start of the first run, every other
partition an hour of events. The rule (DESIGN.md section 9, the horizon) is computed here from what
the test produced: the windows closed after the first run follow the busy partitions; the second run
starts the quiet partition at that horizon, so its old event is late, in bronze and in the late table,
missing from gold's row until ``reconcile`` names the window and ``--fix`` adds it.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakestream.time import iso_utc
from tests.integration.test_gold_speed_layer import (
    BOUND,
    LATENESS,
    START,
    Event,
    behaviour_event,
    gold_env,
    gold_rows,
    produce,
    scenario,
)
from tests.integration.test_lambda_end_to_end import _cli, _iso
from tests.support.cli import run_cli

pytestmark = pytest.mark.integration

QUIET_AFTER = timedelta(minutes=20)
WINDOW_MIN = 5
FROM, TO = START - timedelta(hours=1), START + timedelta(hours=3)


def _window(t: datetime) -> datetime:
    return t.replace(minute=t.minute - t.minute % WINDOW_MIN, second=0, microsecond=0)


def _horizon(events: list[Event]) -> tuple[datetime, datetime, set[tuple[str, int]]]:
    """(the horizon, the first window still open to the stream, the quiet partitions), by hand: per
    partition the newest event time; quiet = more than QUIET_AFTER behind the newest of all; the lowest
    newest time of the others minus the bound and 1 ms; the window holding it minus the lateness."""
    newest: dict[tuple[str, int], datetime] = {}
    for e in events:
        newest[(e.source, e.partition)] = max(newest.get((e.source, e.partition), e.at), e.at)
    top = max(newest.values())
    quiet = {p for p, t in newest.items() if t < top - QUIET_AFTER}
    horizon = min(t for p, t in newest.items() if p not in quiet) - BOUND - timedelta(milliseconds=1)
    return horizon, _window(horizon - LATENESS), quiet


def _late(events: list[Event], seeds: dict[tuple[str, int], datetime]) -> Counter[tuple[str, datetime]]:
    """Event ids of the arrivals that are late (section 2), by hand: per partition in produced order, at
    or below the newest VALID time so far (from ``seeds``) minus the bound and 1 ms. By (source, time)."""
    newest = dict(seeds)
    out: Counter[tuple[str, datetime]] = Counter()
    for e in events:
        key = (e.source, e.partition)
        if key in newest and e.at <= newest[key] - BOUND - timedelta(milliseconds=1):
            out[(e.source, e.at)] += 1
        newest[key] = max(newest.get(key, e.at), e.at)
    return out


def _events_in(events: list[Event], window: datetime) -> int:
    """First deliveries with an event time in ``[window, window + 5 min)``, counted by hand."""
    ids = {e.event_id for e in events if window <= e.at < window + timedelta(minutes=WINDOW_MIN)}
    return len(ids)


def test_a_quiet_partition_holds_no_window_open_and_its_late_wake_up_is_reconciled(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    topics, env = gold_env(kafka, tmp_path, lakehouse)
    env["LAKESTREAM__EVENT_TIME__QUIET_AFTER"] = '"20m"'
    busy = scenario(seed=31, minutes=60, late_ratio=0.0)
    lone = behaviour_event(1, "lone-1", START + timedelta(minutes=2), "u1")
    first = [e for e in busy if (e.source, e.partition) != ("behaviour", 1)] + [lone]
    produce(kafka, topics, first)
    run_cli("ingest", "--bounded", env=env, timeout=300)

    horizon, first_open, quiet = _horizon(first)
    assert quiet == {("behaviour", 1)}
    assert first_open > START + timedelta(minutes=45), "the busy partitions close most of the hour"
    span = ("--from", _iso(FROM), "--to", _iso(TO))
    run = _cli(env, "reconcile", *span)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"the windows from {_iso(first_open)} on are still open" in run.stdout
    assert (
        "not held back by the quiet partition " in run.stdout
        and "/1 (newest 2024-06-01T04:02:00Z)" in run.stdout
    )
    # backfill takes every closed window, up to the first open one, and refuses the next.
    refused = _cli(env, "backfill", "--from", _iso(START), "--to", _iso(first_open + timedelta(minutes=5)))
    assert (
        refused.returncode == 2
        and f"Pass --to {_iso(first_open)} or earlier" in refused.stdout + refused.stderr
    )
    run_cli("backfill", "--from", _iso(START), "--to", _iso(first_open), env=env)

    # A later run: the busy partitions go on (from the window after the first run's newest event: the
    # windows up to it belong to the batch layer, section 11.6), the quiet one wakes up with an event
    # from the closed part.
    wake = behaviour_event(1, "wake-1", START + timedelta(minutes=20, seconds=10), "u-wake")
    assert wake.at < horizon and _window(wake.at) < first_open
    more = [
        e
        for e in scenario(seed=32, minutes=20, late_ratio=0.0, start=START + timedelta(minutes=67))
        if (e.source, e.partition) != ("behaviour", 1)
    ]
    produce(kafka, topics, [*more, wake])
    before = gold_rows(lakehouse)[_window(wake.at)]
    second = run_cli("ingest", "--bounded", env=env, timeout=300)
    assert "quiet partitions " in second.stdout and "#1 (newest 2024-06-01T04:02:00Z)" in second.stdout
    assert f"start at the horizon {iso_utc(horizon)}" in second.stdout

    # In bronze and, as late, in the late table with the horizon as its watermark; not in gold's row.
    bronze = DeltaTable(str(lakehouse / "bronze/order_events")).to_pyarrow_table().to_pylist()
    assert [r["event_id"] for r in bronze].count(wake.event_id) == 1
    late = DeltaTable(str(lakehouse / "late/order_events")).to_pyarrow_table().to_pylist()
    mine = [r for r in late if r["event_id"] == wake.event_id]
    assert len(mine) == 1 and mine[0]["watermark"] == horizon
    newest = {(e.source, e.partition): e.at for e in sorted(first, key=lambda e: e.at)}
    seeds = {**newest, ("behaviour", 1): horizon + BOUND + timedelta(milliseconds=1)}
    assert Counter((r["source"], r["event_time"]) for r in late) == _late(first, {}) + _late(
        [*more, wake], seeds
    )
    row = gold_rows(lakehouse)[_window(wake.at)]
    assert row == before and row["events"] == _events_in(first, _window(wake.at))

    # reconcile names exactly that window until --fix adds the event.
    run = _cli(env, "reconcile", *span)
    assert run.returncode == 1, run.stdout + run.stderr
    named = run.stdout.split("differ above the threshold 0: ")[1].splitlines()[0]
    assert named == _iso(_window(wake.at))
    fix = _cli(env, "reconcile", *span, "--fix")
    assert fix.returncode == 0, fix.stdout + fix.stderr
    row = gold_rows(lakehouse)[_window(wake.at)]
    assert row["layer"] == "batch" and row["events"] == _events_in([*first, wake], _window(wake.at))
    assert row["events"] == before["events"] + 1 and row["active_users"] == before["active_users"] + 1
    assert _cli(env, "reconcile", *span).returncode == 0
