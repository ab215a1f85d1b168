"""The lambda layers together, as a user runs them: the speed layer misses events beyond the allowed
lateness, ``reconcile`` names exactly those windows, ``reconcile --fix`` backfills them from bronze,
``reconcile`` passes, and ``query metrics`` serves the corrected numbers as batch rows.

Real broker, ``lakestream ingest --bounded`` on a MiniCluster, the real Delta tables; the expectations
come from what the test produced (``test_gold_speed_layer``'s scenario and lateness oracle) and the
gold oracle (``tests/support/gold_oracle.py``, apart from ``lakestream.gold``), never from the jobs'
code.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from tests.integration.test_gold_speed_layer import (
    BOUND,
    LATENESS,
    START,
    UTC,
    WINDOW,
    Event,
    classify,
    gold_env,
    metrics_of,
    produce,
    scenario,
)
from tests.support.cli import run_cli
from tests.support.gold_oracle import expected_gold

pytestmark = pytest.mark.integration

#: The range reconciled: the scenario's hour and the hour before it (late events land there too).
FROM, TO = START - timedelta(hours=1), START + timedelta(hours=1)


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m cli ARGS`` whatever its exit code (reconcile's 1 is an answer here)."""
    return run_cli(*args, env=env, check=False)


def _first_open_window(events: list[Event]) -> datetime:
    """Where the stream may still update windows: per Kafka partition the newest VALID event time (what
    ingest records with bronze), the lowest of them minus the bound and 1 ms is the watermark, and the
    window holding the watermark minus the allowed lateness is the first not yet closed."""
    newest: dict[tuple[str, int], datetime] = {}
    for e in events:
        key = (e.source, e.partition)
        newest[key] = max(newest.get(key, e.at), e.at)
    watermark = min(newest.values()) - BOUND - timedelta(milliseconds=1)
    t = watermark - LATENESS
    return datetime.fromtimestamp((int(t.timestamp()) // 300) * 300, UTC)


def test_reconcile_names_the_windows_the_speed_layer_missed_and_fix_serves_batch_rows(
    kafka: str, any_lakehouse: Path, tmp_path: Path
) -> None:
    lakehouse = any_lakehouse
    topics, env = gold_env(kafka, tmp_path, lakehouse)
    events = scenario(seed=16)
    produce(kafka, topics, events)
    run_cli("ingest", "--bounded", env=env, timeout=300)

    counted, beyond = classify(events)
    everything = metrics_of(expected_gold(e.delivery() for e in events))
    realtime = metrics_of(expected_gold(e.delivery() for e in counted))
    first_open = _first_open_window(events)
    missed = sorted(w for w in everything if FROM <= w < first_open and realtime.get(w) != everything[w])
    assert missed, "the scenario has closed windows with events beyond the allowed lateness"

    span = ("--from", _iso(FROM), "--to", _iso(TO))
    run = _cli(env, "reconcile", *span)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"the windows from {_iso(first_open)} on are still open" in run.stdout
    named = run.stdout.split("differ above the threshold 0: ")[1].splitlines()[0]
    assert named == ", ".join(_iso(w) for w in missed)

    fix = _cli(env, "reconcile", *span, "--fix")
    assert fix.returncode == 0, fix.stdout + fix.stderr
    assert "re-checked: gold matches bronze now" in fix.stdout
    run = _cli(env, "reconcile", *span)
    assert run.returncode == 0, run.stdout + run.stderr
    staged = lakehouse / "_staging"
    assert not staged.exists() or not [p for p in staged.rglob("*") if p.is_file()], "staging table left"

    served = json.loads(_cli(env, "query", "metrics", *span, "--format", "json").stdout)
    by_window = {datetime.fromisoformat(r["window_start"].replace("Z", "+00:00")): r for r in served}
    for w in missed:
        row, want = by_window[w], everything[w]
        assert row["layer"] == "batch" and row["source_version"] is not None, row
        assert (row["events"], row["orders_created"], row["payments"], row["active_users"]) == (
            want["events"],
            want["orders_created"],
            want["payments"],
            want["active_users"],
        )
        assert Decimal(row["gmv"]) == want["gmv"]
    # Every other window is still the speed layer's, and right.
    for w, row in by_window.items():
        if w not in missed:
            assert row["layer"] == "realtime", row
            assert row["events"] == realtime[w]["events"], row
    assert all(
        w + WINDOW == datetime.fromisoformat(r["window_end"].replace("Z", "+00:00"))
        for w, r in by_window.items()
    )

    # explain window: the batch row, the realtime row it replaced, what it counted, what it left out.
    w = missed[0]
    out = _cli(env, "explain", "window", _iso(w + timedelta(minutes=2)), "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    told = json.loads(out.stdout)
    assert told["window_start"] == _iso(w) and told["row"]["layer"] == "batch"
    figures = ("events", "orders_created", "payments", "active_users")
    assert {m: told["recomputed"][m] for m in figures} == {m: everything[w][m] for m in figures}
    assert Decimal(told["recomputed"]["gmv"]) == everything[w]["gmv"]
    assert {m: told["batch"][m] for m in figures} == {m: everything[w][m] for m in figures}
    if w in realtime:  # the speed layer's row before the fix, and the same from bronze without the too-late
        assert {m: told["realtime"][m] for m in figures} == {m: realtime[w][m] for m in figures}
        assert {m: told["speed_layer_counts"][m] for m in figures} == {m: realtime[w][m] for m in figures}
    in_w = [e for e in events if w <= e.at < w + WINDOW]
    assert len(told["beyond_allowed_lateness"]) == sum(w <= e.at < w + WINDOW for e in beyond) >= 1
    assert all(e["lateness_s"] > 0 for e in told["beyond_allowed_lateness"])
    assert len(told["duplicates_left_out"]) == len(in_w) - len({e.event_id for e in in_w})
    assert sum(told["counted_by_kind"].values()) == everything[w]["events"]
    assert told["backfills"] and told["backfills"][-1]["run_id"]
    assert {r["window_start"] for r in told["reconcile"]} == {_iso(w)}
    assert any(r["fixed"] for r in told["reconcile"]) and any(not r["fixed"] for r in told["reconcile"])
    # Nothing to explain: exit 2, naming what is there.
    outside = _cli(env, "explain", "window", "2020-01-01T00:00:00Z")
    assert outside.returncode == 2 and "no row for it" in outside.stderr, outside.stderr
    assert "it has none within a day" in outside.stderr
    unknown = _cli(env, "explain", "order", "no-such-order")
    assert unknown.returncode == 2 and "existing order ids nearby: " in unknown.stderr, unknown.stderr
    text = _cli(env, "explain", "order", "o7")
    assert text.returncode == 0 and text.stdout.startswith("order o7: silver/orders_changes version "), (
        text.stdout
    )
