"""The demo's live view: numbers from real Delta tables, a plain line for logs, the rich table."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake
from rich.console import Console

from demo.live_view import LiveView, Snapshot, TableState, Watcher, choose_mode, plain_line, render
from lakestream.table_names import TABLES as INGEST_TABLES
from storage.delta_log import END_OF_INPUT

TABLES = ("bronze/order_events", "late/order_events", "quarantine/order_events", "silver/orders")


def _write(root: Path, table: str, rows: int, checkpoint: int | None, **counters: int) -> None:
    props = CommitProperties(
        app_transactions=[Transaction(f"{table}:run:0", checkpoint)] if checkpoint is not None else None,
        custom_metadata={"lakestream.counters": counters} if counters else None,
    )
    data = pa.table({"n": pa.array(range(rows), pa.int64())})
    write_deltalake(str(root / table), data, mode="append", commit_properties=props)


def _snapshot(watcher: Watcher) -> Snapshot:
    return watcher.snapshot(
        elapsed_s=12.0,
        phase="producing",
        produced={"orders_db": 5, "payments": 2},
        planned={"orders_db": 10, "payments": 4},
        expected_bronze=14,
    )


def test_watcher_counts_rows_checkpoints_and_silver_counters(tmp_path: Path) -> None:
    watcher = Watcher(tmp_path, TABLES)
    assert not watcher.all_exist()
    empty = _snapshot(watcher)
    assert [t.rows for t in empty.tables] == [0, 0, 0, 0] and empty.checkpoints == 0

    for table in TABLES:
        _write(tmp_path, table, 0, None)  # created at the writers' OPEN: no txn
    assert watcher.all_exist()
    _write(tmp_path, "bronze/order_events", 6, 1)
    _write(tmp_path, "silver/orders", 3, 1, events_late=1, events_duplicate=2)
    _write(tmp_path, "bronze/order_events", 4, 2)
    _write(tmp_path, "late/order_events", 1, END_OF_INPUT)
    _write(tmp_path, "silver/orders", 2, END_OF_INPUT, events_late=1, silver_changes=9)
    s = _snapshot(watcher)
    assert s.rows("bronze/order_events") == 10 and s.rows("silver/orders") == 5
    bronze = s.table("bronze/order_events")
    assert bronze is not None and bronze.version == 2 and bronze.checkpoint_commits == 2
    assert s.counters == {"events_duplicate": 2, "events_late": 2, "silver_changes": 9}
    assert s.checkpoints == 2 and s.end_of_input
    assert s.table("gold/x") is None and s.rows("gold/x") == 0


def test_merge_on_read_silver_counters_come_from_its_changes_table(tmp_path: Path) -> None:
    watcher = Watcher(tmp_path, TABLES)
    _write(tmp_path, "silver/orders_changes", 3, 1, events_duplicate=2, silver_changes=3)
    _write(tmp_path, "silver/orders", 3, None)  # a fold: no txn of the job, no counters
    _write(tmp_path, "silver/orders_changes", 1, 2, events_late=1, silver_changes=1)
    s = _snapshot(watcher)
    assert s.counters == {"events_duplicate": 2, "events_late": 1, "silver_changes": 4}
    assert s.table("silver/orders_changes") is None  # counted, not shown


def test_the_gold_table_is_watched_too_without_holding_the_start_back(tmp_path: Path) -> None:
    gold = "gold/order_metrics_5m"
    watcher = Watcher(tmp_path, (*INGEST_TABLES, gold))
    for table in INGEST_TABLES:
        _write(tmp_path, table, 0, None)
    assert watcher.all_exist()  # the events are released once the ingest's own tables exist
    _write(tmp_path, gold, 3, 1)
    snap = _snapshot(watcher)
    assert [t.name for t in snap.tables] == [*INGEST_TABLES, gold]
    assert (snap.table(gold).rows, snap.table(gold).version) == (3, 0)  # type: ignore[union-attr]


def _fixed() -> Snapshot:
    return Snapshot(
        elapsed_s=42.4,
        phase="producing",
        produced={"orders_db": 700, "payments": 300},
        planned={"orders_db": 721, "payments": 293 + 7},
        tables=(
            TableState("bronze/order_events", 950, 7, 6, 1_000),
            TableState("late/order_events", 12, 2, 1, 1_000),
            TableState("quarantine/order_events", 9, 3, 2, None),
            TableState("review/order_events", None, None, 0, None),
        ),
        expected_bronze=1000,
        counters={"events_duplicate": 31},
        checkpoints=5,
    )


def test_plain_line_has_the_numbers() -> None:
    line = plain_line(_fixed())
    assert line.startswith("[   42s] producing | produced 1000/1021 |")
    assert "bronze 950 late 12 quarantine 9 review 0" in line
    assert "late 12, duplicates 31, quarantined 9 | checkpoints 5" in line
    assert "end of input" not in line


def test_render_draws_bars_and_tables() -> None:
    console = Console(file=io.StringIO(), width=140, record=True)
    console.print(render(_fixed(), now_ms=4_000))
    text = console.export_text()
    assert "produced to Kafka" in text and "orders_db 700/721" in text
    assert "950/1000 events" in text
    assert "bronze/order_events" in text and "950" in text and "3s ago" in text
    assert "duplicates 31" in text and "checkpoints 5" in text


def test_plain_mode_prints_every_few_seconds_and_the_last_line_once() -> None:
    out = io.StringIO()
    assert choose_mode("auto", out) == "plain"
    assert choose_mode("live", out) == "live"
    base = _fixed()
    with LiveView("plain", stream=out, every_s=5) as view:
        view.note("hello")
        for t in (0.0, 1.0, 4.9, 5.0, 7.0):
            view.show(Snapshot(**{**{f: getattr(base, f) for f in Snapshot.__slots__}, "elapsed_s": t}))
    lines = out.getvalue().splitlines()
    assert lines[0] == "hello"
    assert [line[:8] for line in lines[1:]] == ["[    0s]", "[    5s]", "[    7s]"]
