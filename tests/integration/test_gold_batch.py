"""The gold batch layer on real Delta tables: backfill, reconcile and --fix through the CLI, and races.

Bronze is written as ingest writes it (adapters, quality tags, ``bronze_batch``, partitioned by
source, several commits with re-deliveries); the expected metrics come from the gold oracle
(``tests/support/gold_oracle.py``, apart from ``lakestream.gold``), not from the code under test.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from batch.backfill import backfill, read_gold
from lakestream.adapters import get_adapter
from lakestream.config import Config, load_config
from lakestream.gold import (
    LAYER_BATCH,
    LAYER_REALTIME,
    METRIC_NAMES,
    METRICS_SCHEMA,
    ensure_gold_table,
    gold_rows,
)
from lakestream.standard import StandardEvent, bronze_batch
from maintenance.maintenance_errors import ConflictError
from storage.retry_policy import RetryPolicy
from tests.support.gold_oracle import Delivery, expected_gold, kind

ROOT = Path(__file__).resolve().parents[2]
UTC = timezone.utc
T1 = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
T2 = T1 + timedelta(hours=1)
FAST = RetryPolicy(max_attempts=20, initial_backoff_s=0.01, max_backoff_s=0.05)


def _adapt(source: str, payload: dict[str, Any], offset: int) -> StandardEvent:
    event = get_adapter(source)(
        json.dumps(payload).encode(), topic=f"{source}.topic", partition=offset % 2, offset=offset
    )
    assert isinstance(event, StandardEvent), event
    return event


def _local(t: datetime) -> str:
    """The order database's wall clock (Asia/Shanghai) of UTC time ``t``."""
    return (t + timedelta(hours=8)).strftime("%Y-%m-%d %H:%M:%S")


def bronze_commits() -> list[tuple[datetime, list[StandardEvent]]]:
    """Three ingest batches over [T1, T2) and around it: creates, re-creates, updates, payments,
    re-deliveries in a later batch, a SUSPICIOUS and an INVALID event, 04:25-04:35 without events."""
    offset = iter(range(10_000))
    first: list[StandardEvent] = []
    for i in range(40):
        minute = (i * 7) % 60
        if 25 <= minute < 35:
            continue
        t = T1 + timedelta(minutes=minute, seconds=i % 60)
        op = "c" if i % 3 else "u"
        first.append(
            _adapt(
                "orders_db",
                {
                    "op": op,
                    "order_id": f"o{i % 9}",
                    "user_id": None if i % 5 == 0 else f"u{i % 4}",
                    "amount": "10.50",
                    "status": "created",
                    "updated_at": _local(t),
                },
                next(offset),
            )
        )
        if i % 2 == 0:
            paid = int((t + timedelta(seconds=30)).timestamp() * 1000)
            first.append(
                _adapt(
                    "payments",
                    {"payId": f"P{i}", "orderId": f"o{i % 9}", "payMoney": 1000 + i, "paidAt": paid},
                    next(offset),
                )
            )
    outside = [
        _adapt(
            "payments",
            {"payId": "Pout", "orderId": "o1", "payMoney": 5, "paidAt": int(T2.timestamp() * 1000)},
            900,
        ),
        _adapt(
            "payments",
            {"payId": "Pbefore", "orderId": "o1", "payMoney": 5, "paidAt": int(T1.timestamp() * 1000) - 1},
            901,
        ),
    ]
    redelivered = [dataclasses.replace(e, offset=e.offset + 5000) for e in first[::4]]
    suspicious = dataclasses.replace(first[1], event_id="payments:Psus", quality="SUSPICIOUS")
    invalid = dataclasses.replace(first[2], event_id="x:invalid", quality="INVALID")
    return [
        (T1 + timedelta(hours=2), first[: len(first) // 2] + outside),
        (T1 + timedelta(hours=3), first[len(first) // 2 :] + [suspicious, invalid]),
        (T1 + timedelta(hours=4), redelivered),
    ]


def _deliveries(events: list[StandardEvent]) -> list[Delivery]:
    """The events of [T1, T2) in delivery order, as the gold oracle takes them (the batch layer reads
    only the range's rows)."""
    return [
        Delivery(
            e.event_id,
            e.event_time,
            kind(e.source, e.op),
            e.amount,
            e.order_id,
            e.user_id,
            valid=e.quality == "VALID",
        )
        for e in events
        if T1 <= e.event_time < T2
    ]


@pytest.fixture()
def lake(tmp_path: Path) -> tuple[Config, list[dict[str, Any]], int]:
    """A lakehouse with bronze written; the expected metrics of [T1, T2); the bronze version."""
    cfg = load_config(environ={"LAKESTREAM__LAKEHOUSE__ROOT": str(tmp_path / "lake")})
    uri = cfg.lakehouse.table_uri("bronze/order_events")
    delivered: list[StandardEvent] = []
    for ingest_time, events in bronze_commits():
        batch = bronze_batch(events, ingest_time=ingest_time)
        write_deltalake(uri, batch, mode="append", partition_by=list(cfg.tables.bronze_partition_by))
        delivered += events
    expected = expected_gold(_deliveries(delivered), over=(T1, T2))
    return cfg, expected, DeltaTable(uri).version()


def lakestream(cfg: Config, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        env={**os.environ, "LAKESTREAM__LAKEHOUSE__ROOT": cfg.lakehouse.root, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def metrics_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keep = ("window_start", "window_end", *METRIC_NAMES)
    return [{k: r[k] for k in keep} for r in sorted(rows, key=lambda r: r["window_start"])]


def test_backfill_writes_every_window_and_is_repeatable(
    lake: tuple[Config, list[dict[str, Any]], int],
) -> None:
    cfg, expected, version = lake
    assert any(r["events"] == 0 for r in expected) and any(r["orders_created"] for r in expected)
    run = lakestream(cfg, "backfill", "--from", "2024-06-01T04:00:00Z", "--to", "2024-06-01T05:00")
    assert run.returncode == 0, run.stderr
    assert f"bronze at version {version}" in run.stdout
    first = read_gold(cfg, T1, T2)
    assert metrics_of(first) == expected
    assert len(first) == 12
    assert {r["layer"] for r in first} == {LAYER_BATCH}
    assert {r["source_version"] for r in first} == {version}
    assert {r["data_time"] for r in first} == {T1 + timedelta(hours=4)}  # newest ingest time read
    assert not (Path(cfg.lakehouse.root) / "_staging").exists()

    again = lakestream(
        cfg, "backfill", "--from", "2024-06-01T04:00:00+00:00", "--to", "2024-06-01T13:00:00+08:00"
    )
    assert again.returncode == 0, again.stderr
    second = read_gold(cfg, T1, T2)
    drop = lambda rows: [{k: v for k, v in r.items() if k != "updated_at"} for r in rows]  # noqa: E731
    assert drop(second) == drop(first)
    assert DeltaTable(cfg.lakehouse.table_uri(cfg.gold.table)).to_pyarrow_table().num_rows == 12


def test_a_range_without_bronze_rows_is_zeros_with_the_commit_time(
    lake: tuple[Config, list[dict[str, Any]], int],
) -> None:
    cfg, _, version = lake
    bronze = cfg.lakehouse.table_uri("bronze/order_events")
    day = datetime(2024, 7, 1, tzinfo=UTC)
    result = backfill(cfg, bronze, day, day + timedelta(hours=1))
    assert result.recompute.data_time_from == "commit" and result.recompute.rows_read == 0
    committed = DeltaTable(bronze).history(1)[0]["timestamp"]
    gold = read_gold(cfg, day, day + timedelta(hours=1))
    assert len(gold) == 12 and all(r[m] == 0 for r in gold for m in METRIC_NAMES)
    assert {r["data_time"] for r in gold} == {datetime.fromtimestamp(committed / 1000, tz=UTC)}
    assert {r["source_version"] for r in gold} == {version}


def test_backfill_refuses_bad_ranges_with_the_flag_and_the_fix(
    lake: tuple[Config, list[dict[str, Any]], int],
) -> None:
    cfg, _, _ = lake
    run = lakestream(cfg, "backfill", "--from", "2024-06-01T04:03:00Z", "--to", "2024-06-01T05:00:00Z")
    assert run.returncode == 2
    assert (
        "--from 2024-06-01T04:03:00Z" in run.stderr
        and "2024-06-01T04:00:00Z and 2024-06-01T04:05:00Z" in run.stderr
    )
    run = lakestream(cfg, "backfill", "--from", "yesterday", "--to", "2024-06-01T05:00:00Z")
    assert run.returncode == 2
    assert "--from 'yesterday'" in run.stderr and "2024-06-01T04:00:00Z" in run.stderr
    run = lakestream(cfg, "backfill", "--from", "2024-06-01T05:00:00Z", "--to", "2024-06-01T04:00:00Z")
    assert run.returncode == 2 and "--from" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert not Path(cfg.lakehouse.table_uri(cfg.gold.table)).exists()


def _realtime(cfg: Config, expected: list[dict[str, Any]], damaged: dict[datetime, int]) -> None:
    """Gold as a speed layer that dropped events would leave it: realtime rows, some windows short
    by ``damaged[window]`` events (0: the whole window missing)."""
    rows = []
    for r in expected:
        if r["window_start"] in damaged and damaged[r["window_start"]] == 0:
            continue
        short = dict(r)
        if r["window_start"] in damaged:
            short["events"] -= damaged[r["window_start"]]
        rows.append(short)
    metrics = pa.Table.from_pylist(rows, schema=METRICS_SCHEMA)
    uri = cfg.lakehouse.table_uri(cfg.gold.table)
    ensure_gold_table(uri)
    table = gold_rows(metrics, layer=LAYER_REALTIME, data_time=T2, source_version=None, updated_at=T2)
    write_deltalake(uri, table, mode="overwrite")


def test_reconcile_finds_the_short_windows_and_fix_repairs_them(
    lake: tuple[Config, list[dict[str, Any]], int],
) -> None:
    cfg, expected, version = lake
    busy = [r["window_start"] for r in expected if r["events"] >= 2]
    damaged = {busy[0]: 1, busy[1]: 2, busy[-1]: 0}
    _realtime(cfg, expected, damaged)

    run = lakestream(cfg, "reconcile", "--from", "2024-06-01T04:00:00Z", "--to", "2024-06-01T05:00:00Z")
    assert run.returncode == 1, run.stdout + run.stderr
    named = run.stdout.split("differ above the threshold 0: ")[1].splitlines()[0]
    assert named == ", ".join(w.strftime("%Y-%m-%dT%H:%M:%SZ") for w in sorted(damaged))
    log = DeltaTable(cfg.lakehouse.table_uri(cfg.reconcile.table)).to_pyarrow_table().to_pylist()
    assert {r["window_start"] for r in log} == set(damaged)
    assert {r["bronze_version"] for r in log} == {version} and not any(r["fixed"] for r in log)
    short = {(r["window_start"], r["metric"]): r["difference"] for r in log}
    assert short[(busy[0], "events")] == 1 and short[(busy[1], "events")] == 2

    # A threshold above every difference of the short windows (not the missing one) passes those.
    run = lakestream(
        cfg,
        "reconcile",
        "--from",
        "2024-06-01T04:00:00Z",
        "--to",
        "2024-06-01T05:00:00Z",
        "--threshold",
        "1000000",
    )
    assert run.returncode == 0, run.stdout

    fix = lakestream(
        cfg, "reconcile", "--from", "2024-06-01T04:00:00Z", "--to", "2024-06-01T05:00:00Z", "--fix"
    )
    assert fix.returncode == 0, fix.stdout + fix.stderr
    assert "re-checked: gold matches bronze now" in fix.stdout
    gold = read_gold(cfg, T1, T2)
    assert metrics_of(gold) == expected
    by_window = {r["window_start"]: r for r in gold}
    for w in damaged:
        assert by_window[w]["layer"] == LAYER_BATCH and by_window[w]["source_version"] == version
    untouched = set(by_window) - set(damaged)
    assert {by_window[w]["layer"] for w in untouched} == {LAYER_REALTIME}

    run = lakestream(cfg, "reconcile", "--from", "2024-06-01T04:00:00Z", "--to", "2024-06-01T05:00:00Z")
    assert run.returncode == 0, run.stdout
    assert "gold matches bronze" in run.stdout


def test_fix_budget_stops_fixing_and_names_the_windows(
    lake: tuple[Config, list[dict[str, Any]], int],
) -> None:
    cfg, expected, _ = lake
    one_a_day = {"LAKESTREAM__RECONCILE__MAX_FIXES_PER_DAY": "1"}
    busy = [r["window_start"] for r in expected if r["events"] >= 2]
    args = ("reconcile", "--from", "2024-06-01T04:00:00Z", "--to", "2024-06-01T05:00:00Z", "--fix")
    _realtime(cfg, expected, {busy[0]: 1})
    first = lakestream(cfg, *args, **one_a_day)
    assert first.returncode == 0, first.stdout + first.stderr
    _realtime(cfg, expected, {busy[2]: 1})
    second = lakestream(cfg, *args, **one_a_day)
    assert second.returncode == 1, second.stdout + second.stderr
    assert "a person must look at these windows: " + busy[2].strftime("%Y-%m-%dT%H:%M:%SZ") in second.stdout
    assert read_gold(cfg, T1, T2) and {r["layer"] for r in read_gold(cfg, T1, T2)} == {LAYER_REALTIME}


def _upsert(uri: str, rows: pa.Table) -> None:
    """The speed layer's contract: MERGE by window_start, never over a batch row."""
    (
        DeltaTable(uri)
        .merge(rows, "t.window_start = s.window_start", source_alias="s", target_alias="t")
        .when_matched_update_all(predicate="t.layer <> 'batch'")
        .when_not_matched_insert_all()
        .execute()
    )


def _speed_rows(expected: list[dict[str, Any]], n: int) -> pa.Table:
    metrics = pa.Table.from_pylist(
        [dict(r, events=r["events"] + n) for r in expected],
        schema=METRICS_SCHEMA,
    )
    return gold_rows(metrics, layer=LAYER_REALTIME, data_time=T2, source_version=None, updated_at=T2)


def _as_realtime(uri: str, expected: list[dict[str, Any]]) -> None:
    """Gold back to realtime rows only (overwrite), retried while it races the speed layer."""
    for _ in range(50):
        try:
            write_deltalake(uri, _speed_rows(expected, 0), mode="overwrite")
            return
        except Exception as exc:
            if "CommitFailed" not in type(exc).__name__:
                raise
    raise AssertionError("could not reset gold beside the speed layer")


def _assert_one_row_per_window_in_every_version(uri: str) -> None:
    dt = DeltaTable(uri)
    for v in range(dt.version() + 1):
        dt.load_as_version(v)
        starts = dt.to_pyarrow_table(columns=["window_start"])["window_start"].to_pylist()
        assert len(starts) == len(set(starts)), f"version {v} has a window twice"


def test_backfill_racing_streaming_upserts_keeps_one_row_per_window(
    lake: tuple[Config, list[dict[str, Any]], int],
) -> None:
    cfg, expected, version = lake
    uri = cfg.lakehouse.table_uri(cfg.gold.table)
    bronze = cfg.lakehouse.table_uri("bronze/order_events")
    ensure_gold_table(uri)
    stop = threading.Event()
    merges: list[int] = []
    errors: list[BaseException] = []

    def speed_layer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                _upsert(uri, _speed_rows(expected, n))
                merges.append(n)
            except Exception as exc:  # a MERGE that lost the race is retried by the speed layer
                if "CommitFailed" not in type(exc).__name__ and "conflict" not in str(exc).lower():
                    errors.append(exc)

    writer = threading.Thread(target=speed_layer, daemon=True)
    writer.start()
    attempts: list[int] = []
    try:  # until a backfill lost a race at least once (at most 60 backfills)
        while not any(a > 1 for a in attempts) and len(attempts) < 60:
            _as_realtime(uri, expected)  # so that the speed layer's MERGEs change rows again
            attempts.append(backfill(cfg, bronze, T1, T2, retry=FAST).attempts)
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not errors, errors
    assert merges, "the concurrent writer never committed"
    assert any(a > 1 for a in attempts), f"no backfill met a conflicting commit: {attempts}"
    gold = read_gold(cfg, T1, T2)
    assert metrics_of(gold) == expected
    assert {r["layer"] for r in gold} == {LAYER_BATCH} and {r["source_version"] for r in gold} == {version}
    _assert_one_row_per_window_in_every_version(uri)


def test_backfill_replans_after_a_conflicting_commit_and_fails_cleanly_when_it_keeps_losing(
    lake: tuple[Config, list[dict[str, Any]], int],
) -> None:
    cfg, expected, _ = lake
    uri = cfg.lakehouse.table_uri(cfg.gold.table)
    bronze = cfg.lakehouse.table_uri("bronze/order_events")
    ensure_gold_table(uri)
    _upsert(uri, _speed_rows(expected, 1))
    races = iter(range(1, 1000))

    def rival() -> None:  # a streaming commit landing between the backfill's snapshot and its commit
        _upsert(uri, _speed_rows(expected, next(races) + 1))

    with pytest.raises(ConflictError, match="the table is unchanged"):
        backfill(
            cfg, bronze, T1, T2, retry=RetryPolicy(max_attempts=2, initial_backoff_s=0), before_commit=rival
        )
    gold = read_gold(cfg, T1, T2)
    assert {r["layer"] for r in gold} == {LAYER_REALTIME} and len(gold) == 12

    once = iter([True])
    result = backfill(
        cfg,
        bronze,
        T1,
        T2,
        retry=RetryPolicy(max_attempts=3, initial_backoff_s=0),
        before_commit=lambda: next(once, False) and rival(),
    )
    assert result.attempts == 2
    gold = read_gold(cfg, T1, T2)
    assert metrics_of(gold) == expected and {r["layer"] for r in gold} == {LAYER_BATCH}
    _assert_one_row_per_window_in_every_version(uri)
    assert [r["window_start"] for r in expected] == [r["window_start"] for r in gold]


def _record_stream_progress(cfg: Config, newest: dict[str, datetime]) -> None:
    """A bronze commit as ingest makes it: no rows here, the newest VALID event time per partition as
    progress txn actions (and listed in the commit's metadata)."""
    from deltalake import Transaction

    uri = cfg.lakehouse.table_uri("bronze/order_events")
    progress = {f"watermark/{split}": int(t.timestamp() * 1000) for split, t in newest.items()}
    txns = [Transaction(f"ingest/bronze/order_events:progress:{k}", v) for k, v in progress.items()]
    write_deltalake(
        uri,
        bronze_batch([], ingest_time=T2),
        mode="append",
        partition_by=list(cfg.tables.bronze_partition_by),
        commit_properties=CommitProperties(
            custom_metadata={"lakestream.progress": json.dumps(progress)}, app_transactions=txns
        ),
    )


def test_windows_the_stream_still_updates_are_not_frozen_by_a_batch_row(
    lake: tuple[Config, list[dict[str, Any]], int],
) -> None:
    cfg, expected, _ = lake
    # The slowest partition saw 04:40:00.001: watermark 04:35 (newest - 5 min out of order - 1 ms), and
    # a window takes events until 10 min (allowed lateness) after its end: 04:20-04:25 has just closed,
    # 04:25-04:30 is the first window still open. A partition more than event_time.quiet_after (1 h)
    # behind the newest is quiet and holds nothing back.
    slowest, fastest = T1 + timedelta(minutes=40, milliseconds=1), T2 + timedelta(minutes=35)
    quiet = T1 - timedelta(hours=3)
    _record_stream_progress(
        cfg, {"orders.db.changes/0": slowest, "payments.callbacks/0": fastest, "behaviour.logs/1": quiet}
    )
    run = lakestream(cfg, "backfill", "--from", "2024-06-01T04:00:00Z", "--to", "2024-06-01T05:00:00Z")
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.strip().startswith(
        "lakestream backfill: --to 2024-06-01T05:00:00Z: "
        "the windows from 2024-06-01T04:25:00Z on are still open"
    ), run.stderr
    assert (
        "not held back by the quiet partition behaviour.logs/1 (newest 2024-06-01T01:00:00Z)" in run.stderr
    ), run.stderr
    assert "Pass --to 2024-06-01T04:25:00Z or earlier, or --force" in run.stderr
    assert not (Path(cfg.lakehouse.table_uri(cfg.gold.table)) / "_delta_log").exists()  # nothing written

    run = lakestream(cfg, "backfill", "--from", "2024-06-01T04:00:00Z", "--to", "2024-06-01T04:25:00Z")
    assert run.returncode == 0, run.stdout + run.stderr
    assert [r["window_start"] for r in read_gold(cfg, T1, T2)] == [
        T1 + timedelta(minutes=5 * i) for i in range(5)
    ]

    # Reconcile compares the closed windows only: an open window whose realtime row is still filling
    # up is no difference yet, unless asked.
    open_window = T1 + timedelta(minutes=40)
    _realtime(cfg, expected, {open_window: 0})
    run = lakestream(cfg, "reconcile", "--from", "2024-06-01T04:00:00Z", "--to", "2024-06-01T05:00:00Z")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "the windows from 2024-06-01T04:25:00Z on are still open" in run.stdout
    run = lakestream(
        cfg, "reconcile", "--from", "2024-06-01T04:00:00Z", "--to", "2024-06-01T05:00:00Z", "--include-open"
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "2024-06-01T04:40:00Z" in run.stdout.split("differ above the threshold 0: ")[1]

    run = lakestream(cfg, "reconcile", "--from", "2024-06-01T04:30:00Z", "--to", "2024-06-01T05:00:00Z")
    assert run.returncode == 2 and "nothing to compare yet" in run.stderr, run.stdout + run.stderr

    run = lakestream(
        cfg, "backfill", "--from", "2024-06-01T04:00:00Z", "--to", "2024-06-01T05:00:00Z", "--force"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert metrics_of(read_gold(cfg, T1, T2)) == expected
