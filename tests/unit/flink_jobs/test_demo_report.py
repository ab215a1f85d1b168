"""The demo report: its numbers (pure functions) and the page built from real Delta tables."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from demo.html_report import (
    DELAY_BINS,
    GOLD_TABLE,
    arrival_delays,
    bin_index,
    commit_points,
    delay_histogram,
    gold_series,
    quantiles,
    rows_changed,
    write_report,
)
from lakestream.standard import BRONZE_SCHEMA, LATE_SCHEMA
from storage.delta_log import END_OF_INPUT, CommitSummary

T0 = datetime(2024, 6, 1, 4, 0, tzinfo=timezone.utc)
MS = 1000


def test_arrival_delays_follow_kafka_order_per_partition() -> None:
    parts = [("a", 0), ("a", 0), ("a", 1), ("a", 0), ("a", 1), ("a", 0)]
    offsets = [0, 2, 0, 1, 1, 3]
    times = [10 * MS, 4 * MS, 100 * MS, 20 * MS, 40 * MS, 25 * MS]
    # partition a/0 in offset order: 10 s, 20 s, 4 s (16 behind 20), 25 s; a/1: 100 s, 40 s (60 behind).
    assert arrival_delays(parts, offsets, times) == [0.0, 16.0, 0.0, 0.0, 60.0, 0.0]
    assert arrival_delays([], [], []) == []


def test_bins_hold_delays_up_to_their_edge() -> None:
    assert bin_index(0.0) == 0
    assert bin_index(0.001) == 1
    assert bin_index(10.0) == 1
    assert bin_index(300.0) == 3
    assert bin_index(300.001) == 4
    assert bin_index(1e9) == len(DELAY_BINS) - 1
    h = delay_histogram([0.0, 5.0, 400.0, 8000.0], [False, False, True, True])
    assert h["on_time"][:2] == [1, 1] and sum(h["on_time"]) == 2
    assert h["late"][bin_index(400.0)] == 1 and h["late"][bin_index(8000.0)] == 1 and sum(h["late"]) == 2
    assert len(h["bins"]) == len(DELAY_BINS)


def test_quantiles() -> None:
    assert quantiles([]) == []
    assert quantiles([3.0, 1.0, 2.0]) == [1.0, 2.0, 3.0, 3.0]


def _commit(version: int, ts: int, checkpoint: int | None, rows: int, **kw: Any) -> CommitSummary:
    txn = {f"app:{version}": checkpoint} if checkpoint is not None else {}
    return CommitSummary(version, ts, kw.pop("operation", "WRITE"), rows, 1, 0, txn=txn, **kw)


def test_commit_points_one_per_checkpoint() -> None:
    commits = [
        _commit(0, 1_000, None, 0, operation="CREATE TABLE"),
        _commit(1, 5_000, 2, 10, ingest_min_ms=3_000),
        _commit(2, 5_100, 2, 5, ingest_min_ms=4_500),
        _commit(3, 7_000, END_OF_INPUT, 1, ingest_min_ms=6_500),
    ]
    points = commit_points(commits)
    assert [p["checkpoint"] for p in points] == [2, "end of input"]
    assert points[0]["versions"] == [1, 2] and points[0]["rows"] == 15
    assert points[0]["latency_ms"] == 2_000  # the older row of the two commits waited longest
    assert points[0]["time"].startswith("1970-01-01T00:00:05.100")
    assert points[1]["rows"] == 1 and points[1]["merge_ms"] is None


def test_commit_points_follow_the_checkpoints_when_one_subtask_ends_before_another_commits() -> None:
    commits = [
        _commit(1, 5_000, 6, 10),
        _commit(2, 6_000, END_OF_INPUT, 3),  # subtask 0 at end of input
        _commit(3, 6_100, 7, 4),  # subtask 1 still committing checkpoint 7
    ]
    assert [p["checkpoint"] for p in commit_points(commits)] == [6, 7, "end of input"]


def test_a_merge_counts_the_rows_it_changed_not_the_rows_it_rewrote() -> None:
    merge = _commit(
        4,
        9_000,
        3,
        330,
        operation="MERGE",
        metrics={"num_target_rows_inserted": 3, "num_target_rows_updated": 7, "execution_time_ms": 40},
    )
    assert rows_changed(merge) == 10
    [point] = commit_points([merge])
    assert point["rows"] == 10 and point["merge_ms"] == 40 and point["latency_ms"] is None


def test_gold_series_per_layer_sorted_by_window() -> None:
    w = [T0 + timedelta(minutes=5 * i) for i in range(3)]
    series = gold_series(
        {
            "window_start": [w[1], w[0], w[0], w[2]],
            "events": [20, 10, 11, 30],
            "gmv": [Decimal("2.50"), Decimal("1.00"), Decimal("1.10"), None],
            "layer": ["realtime", "realtime", "batch", "realtime"],
        }
    )
    assert list(series) == ["batch", "realtime"]
    assert series["realtime"]["events"] == [10, 20, 30]
    assert series["realtime"]["gmv"] == [1.0, 2.5, 0.0]
    assert series["batch"]["window_start"] == [w[0].isoformat()]


# ------------------------------------------------------------------------------- the page, real tables


def _events(rows: list[tuple[int, int, int]], ingest: datetime) -> pa.Table:
    """Bronze rows (partition, offset, seconds after T0) on topic ``t``."""
    n = len(rows)
    return pa.table(
        {
            "event_id": [f"e{p}-{o}" for p, o, _ in rows],
            "order_id": [None] * n,
            "user_id": [None] * n,
            "event_type": ["behaviour:view"] * n,
            "event_time": [T0 + timedelta(seconds=s) for _, _, s in rows],
            "amount": [None] * n,
            "status": [None] * n,
            "address": [None] * n,
            "logistics_state": [None] * n,
            "op": [None] * n,
            "source": ["behaviour"] * n,
            "raw": [b"{}"] * n,
            "topic": ["t"] * n,
            "partition": [p for p, _, _ in rows],
            "offset": [o for _, o, _ in rows],
            "quality": ["VALID"] * n,
            "quality_reason": [None] * n,
            "ingest_time": [ingest] * n,
        },
        schema=BRONZE_SCHEMA,
    )


def _commit_props(checkpoint: int) -> CommitProperties:
    return CommitProperties(app_transactions=[Transaction("demo:run:0", checkpoint)])


class _Scripts(HTMLParser):
    """Collects the page's ``<script id=...>`` texts and ``<div id=...>`` ids."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: dict[str, str] = {}
        self.divs: set[str] = set()
        self._current: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script" and a.get("id"):
            self._current = str(a["id"])
            self.scripts[self._current] = ""
        if tag == "div" and a.get("id"):
            self.divs.add(str(a["id"]))

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self.scripts[self._current] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._current = None


def _lakehouse(tmp_path: Path) -> Path:
    root = tmp_path / "lakehouse"
    now = datetime.now(timezone.utc)
    bronze, late = str(root / "bronze/order_events"), str(root / "late/order_events")
    # Partition 0: 0 s, 600 s, then 100 s (500 s behind: late); partition 1: 50 s, 40 s (10 s behind).
    first = _events([(0, 0, 0), (0, 1, 600), (1, 0, 50)], now - timedelta(seconds=3))
    second = _events([(0, 2, 100), (1, 1, 40)], now - timedelta(seconds=1))
    write_deltalake(bronze, first, partition_by=["source"], commit_properties=_commit_props(1))
    write_deltalake(bronze, second, mode="append", commit_properties=_commit_props(END_OF_INPUT))
    late_rows = second.slice(0, 1).append_column(
        "watermark", pa.array([T0 + timedelta(seconds=300)], pa.timestamp("us", "UTC"))
    )
    write_deltalake(late, late_rows.cast(LATE_SCHEMA), commit_properties=_commit_props(END_OF_INPUT))
    return root


def _page(root: Path, out: Path) -> tuple[dict[str, Any], _Scripts]:
    data = write_report(root, out, max_out_of_orderness=timedelta(minutes=5))
    parser = _Scripts()
    text = out.read_text(encoding="utf-8")
    parser.feed(text)
    parser.close()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "Plotly.newPlot" in text and len(text) > 1_000_000  # plotly.js is embedded: opens offline
    assert json.loads(parser.scripts["report-data"]) == json.loads(json.dumps(data, default=str))
    return data, parser


def test_report_holds_the_tables_numbers(tmp_path: Path) -> None:
    root = _lakehouse(tmp_path)
    data, page = _page(root, root / "report.html")

    bronze_rows = DeltaTable(str(root / "bronze/order_events")).to_pyarrow_table().num_rows
    assert data["tables"]["bronze/order_events"]["rows"] == 5 == bronze_rows
    assert data["tables"]["late/order_events"]["rows"] == 1
    assert data["tables"]["bronze/order_events"]["version"] == 1
    lateness = data["lateness"]
    assert (lateness["valid_events"], lateness["late_rows"]) == (5, 1)
    assert lateness["late_share"] == pytest.approx(0.2)
    assert sum(lateness["histogram"]["on_time"]) == 4 and sum(lateness["histogram"]["late"]) == 1
    assert lateness["histogram"]["late"][bin_index(500)] == 1
    assert lateness["histogram"]["on_time"][bin_index(10)] == 1

    # The chart draws exactly those counts.
    figure = json.loads(page.scripts["lateness-figure"])
    histogram = lateness["histogram"]
    assert [t["y"] for t in figure["data"]] == [histogram["on_time"], histogram["late"]]
    assert "lateness" in page.divs and "commits" in page.divs

    # Rows per checkpoint add up to the table, and each carries its checkpoint.
    points = data["commits"]["bronze/order_events"]
    assert [p["checkpoint"] for p in points] == [1, "end of input"]
    assert [p["rows"] for p in points] == [3, 2]
    assert all(p["latency_ms"] is not None and p["latency_ms"] >= 0 for p in points)
    commits_fig = json.loads(page.scripts["commits-figure"])
    bronze_trace = next(t for t in commits_fig["data"] if t["name"] == "bronze/order_events")
    assert bronze_trace["y"] == [3, 2]


def test_without_gold_the_report_says_why(tmp_path: Path) -> None:
    root = _lakehouse(tmp_path)
    data, page = _page(root, tmp_path / "r.html")
    assert data["gold"] is None
    assert "gold" not in page.divs and "gold-figure" not in page.scripts
    assert f"No gold table: <code>{GOLD_TABLE}</code> does not exist" in (tmp_path / "r.html").read_text()


def test_with_gold_the_report_compares_realtime_and_batch(tmp_path: Path) -> None:
    root = _lakehouse(tmp_path)
    windows = [T0, T0 + timedelta(minutes=5)]
    gold = pa.table(
        {
            "window_start": windows * 2,
            "window_end": [w + timedelta(minutes=5) for w in windows] * 2,
            "events": pa.array([10, 12, 10, 13], pa.int64()),
            "orders_created": pa.array([3, 4, 3, 4], pa.int64()),
            "payments": pa.array([1, 2, 1, 2], pa.int64()),
            "gmv": pa.array(
                [Decimal("10.50"), Decimal("20.00"), Decimal("10.50"), Decimal("21.00")], pa.decimal128(18, 2)
            ),
            "active_users": pa.array([2, 3, 2, 3], pa.int64()),
            "layer": ["realtime", "realtime", "batch", "batch"],
            "data_time": windows * 2,
        }
    )
    write_deltalake(str(root / GOLD_TABLE), gold)
    data, page = _page(root, tmp_path / "r.html")
    assert data["gold"]["realtime"]["events"] == [10, 12]
    assert data["gold"]["batch"]["gmv"] == [10.5, 21.0]
    assert data["tables"][GOLD_TABLE]["rows"] == 4
    figure = json.loads(page.scripts["gold-figure"])
    names = {t["name"]: t["y"] for t in figure["data"]}
    assert names == {
        "batch events": [10, 13],
        "batch GMV": [10.5, 21.0],
        "realtime events": [10, 12],
        "realtime GMV": [10.5, 20.0],
    }
    assert "No gold table" not in (tmp_path / "r.html").read_text()


def test_a_lakehouse_without_the_ingest_tables_fails_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run the ingest job first"):
        write_report(tmp_path, tmp_path / "r.html", max_out_of_orderness=timedelta(minutes=5))
