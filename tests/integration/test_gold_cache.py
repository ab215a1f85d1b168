"""The server's snapshots on real Delta tables: a new version rebuilt from the days it touched serves
exactly what a snapshot built from scratch serves, and the prepared JSON is ``row_json``'s."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from deltalake import DeltaTable

from serving.gold_cache import GoldCache, changed_days, file_days, snapshot
from serving.gold_read import row_json, row_json_bytes
from tests.support.gold_tables import WINDOW, at, backfill, row, upsert_realtime

DAY = at("2024-06-01T00:00")


def _full(table: Path) -> list[bytes]:
    snap = snapshot(DeltaTable(str(table)), str(table), WINDOW)
    return [row_json_bytes(s) for s in snap.served]


def _served(cache: GoldCache) -> list[bytes]:
    return [row_json_bytes(s) for s in cache.latest().served]


def test_a_new_version_rebuilds_only_its_days_and_serves_what_a_full_build_serves(tmp_path: Path) -> None:
    table = tmp_path / "gold"
    days = [DAY + timedelta(days=d) for d in range(5)]
    for d, day in enumerate(days):
        backfill(
            table,
            [row(day + i * WINDOW, layer="batch", events=d + 1) for i in range(4)],
            day,
            day + 4 * WINDOW,
        )
    cache = GoldCache(str(table), WINDOW)
    first = cache.latest()
    assert _served(cache) == _full(table)

    # A realtime upsert on day 4 and a new window on day 5: only those days are read again.
    upsert_realtime(
        table, [row(days[4] + 4 * WINDOW, gmv="3.00"), row(days[4] + timedelta(days=1), gmv="4.00")]
    )
    second = cache.latest()
    assert second.version == first.version + 1
    assert changed_days(first.files, second.files) == {
        (days[4] - at("1970-01-01T00:00")).days,
        (days[4] - at("1970-01-01T00:00")).days + 1,
    }
    assert all(second.days[d] is first.days[d] for d in sorted(first.days)[:4])  # untouched days reused
    assert _served(cache) == _full(table)

    # A backfill replacing day 2 with fewer windows.
    backfill(
        table, [row(days[2], layer="batch", events=50, gmv="9.99")], days[2], days[2] + timedelta(days=1)
    )
    assert _served(cache) == _full(table)
    # A day whose rows are all deleted leaves the snapshot.
    DeltaTable(str(table)).delete(
        "window_start >= '2024-06-02T00:00:00Z' AND window_start < '2024-06-03T00:00:00Z'"
    )
    assert cache.latest().between(days[1], days[2]) == []
    assert _served(cache) == _full(table)
    # A compaction rewrites every file (one file now spans every day: a full rebuild).
    DeltaTable(str(table)).optimize.compact()
    third = cache.latest()
    assert _served(cache) == _full(table)
    assert [s.day.events for s in third.between(days[2], days[3])] == [50]


def test_files_without_window_statistics_mean_a_full_rebuild() -> None:
    assert changed_days({"a": (1, 2)}, {"a": (1, 2), "b": None}) is None
    assert changed_days({"a": (1, 2)}, {"b": (5, 6)}) == {1, 2, 5, 6}
    assert changed_days({"a": (1, 2)}, {"a": (1, 2)}) == set()


def test_prepared_json_is_row_json(tmp_path: Path) -> None:
    table = tmp_path / "gold"
    upsert_realtime(
        table, [row(DAY, gmv="1234567.5"), row(DAY + WINDOW, data_time=DAY + timedelta(microseconds=7))]
    )
    backfill(
        table, [row(DAY + 2 * WINDOW, layer="batch", source_version=12)], DAY + 2 * WINDOW, DAY + 3 * WINDOW
    )
    snap = snapshot(DeltaTable(str(table)), str(table), WINDOW)
    assert len(snap.served) == 3
    for s in snap.served:
        assert json.loads(row_json_bytes(s)) == row_json(s)
    assert json.loads(snap.json_array(DAY, DAY + timedelta(days=1))) == [row_json(s) for s in snap.served]
    assert row_json(snap.served[1])["data_time"] == "2024-06-01T00:00:00.000007Z"
    assert file_days(DeltaTable(str(table)))
