"""The gold table as ``lakestream serve`` answers from it: served windows and their JSON, per version.

A snapshot holds every UTC day of one table version: its served windows (selection rule, running
totals) and each window's JSON, prepared once, so a request only bisects and joins bytes. A new version
rebuilds only the days it touched: the data files added or removed since the previous snapshot name
them through their ``window_start`` statistics (a file without them, or a change to most days, rebuilds
everything). Running totals restart every UTC day, so an untouched day's windows stay valid as they are.
"""

from __future__ import annotations

import bisect
import gc
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from lakestream.time import EPOCH, iso_utc
from serving.gold_read import open_gold, row_json_bytes, rows_where
from serving.metrics_view import (
    GoldRow,
    ServedWindow,
    batch_through,
    check_window,
    running_totals,
    select_windows,
)
from storage.delta_log import commit_ms

UTC = timezone.utc
_DAY_US = 86_400_000_000

#: Data file path -> (first, last) UTC day of its ``window_start`` values; None: no statistics.
FileDays = Mapping[str, tuple[int, int] | None]


@dataclass(frozen=True)
class DayPart:
    """One UTC day of a snapshot: its served windows and their JSON, in window order."""

    served: list[ServedWindow]
    json: list[bytes]


def build_day(rows: Iterable[GoldRow]) -> DayPart:
    """The served windows of one day's rows, with their JSON."""
    served = running_totals(select_windows(rows))
    return DayPart(served, [row_json_bytes(s) for s in served])


def _day_number(when: datetime) -> int:
    return (when - EPOCH) // timedelta(days=1)


def file_days(dt: DeltaTable) -> dict[str, tuple[int, int] | None]:
    """The days of each data file of this version, from the log's ``window_start`` min/max statistics."""
    adds = pa.table(dt.get_add_actions(flatten=True))
    paths = adds.column("path").to_pylist()
    if "min.window_start" not in adds.column_names or "max.window_start" not in adds.column_names:
        return dict.fromkeys(paths)
    lows, highs = (
        pc.cast(pc.cast(adds.column(c), pa.timestamp("us", tz="UTC")), pa.int64()).to_pylist()
        for c in ("min.window_start", "max.window_start")
    )
    return {
        p: None if lo is None or hi is None else (lo // _DAY_US, hi // _DAY_US)
        for p, lo, hi in zip(paths, lows, highs, strict=True)
    }


def changed_days(before: FileDays, after: FileDays) -> set[int] | None:
    """The days whose rows may differ between two versions (files added or removed); None: unknown."""
    days: set[int] = set()
    for path in set(before) ^ set(after):
        span = after[path] if path in after else before[path]
        if span is None:
            return None
        days.update(range(span[0], span[1] + 1))
    return days


class GoldSnapshot:
    """One version of the gold table as served: every window, sorted, with its JSON."""

    def __init__(
        self, version: int, days: dict[int, DayPart], files: FileDays, committed_ms: int | None
    ) -> None:
        self.version = version
        self.days = days
        self.files = files
        #: Commit time of the version (epoch ms), None when its commit file is gone.
        self.committed_ms = committed_ms
        ordered = [days[d] for d in sorted(days)]
        self.served: list[ServedWindow] = [s for part in ordered for s in part.served]
        self._json: list[bytes] = [j for part in ordered for j in part.json]
        self._starts = [s.row.window_start for s in self.served]

    def window_range(self, start: datetime, end: datetime) -> tuple[int, int]:
        """Indexes ``[i, j)`` of the served windows with ``start <= window_start < end``."""
        return bisect.bisect_left(self._starts, start), bisect.bisect_left(self._starts, end)

    def between(self, start: datetime, end: datetime) -> list[ServedWindow]:
        """The served windows with ``start <= window_start < end``."""
        i, j = self.window_range(start, end)
        return self.served[i:j]

    def json_array(self, start: datetime, end: datetime) -> bytes:
        """The JSON array of the windows of ``[start, end)``, as ``query metrics --format json`` prints."""
        i, j = self.window_range(start, end)
        return b"[" + b",".join(self._json[i:j]) + b"]"

    @cached_property
    def batch_through(self) -> datetime | None:
        """End of the newest batch window of this version (:func:`serving.metrics_view.batch_through`)."""
        return batch_through([s.row for s in self.served])


def _by_day(rows: Iterable[GoldRow]) -> dict[int, list[GoldRow]]:
    out: dict[int, list[GoldRow]] = {}
    for r in rows:
        out.setdefault(_day_number(r.window_start), []).append(r)
    return out


def _days_condition(days: Iterable[int]) -> str:
    """A SQL condition on ``window_start`` for these days, contiguous days merged into one range."""
    ranges: list[list[int]] = []
    for d in sorted(days):
        if ranges and ranges[-1][1] == d:
            ranges[-1][1] = d + 1
        else:
            ranges.append([d, d + 1])
    parts = [
        f"(window_start >= '{iso_utc(EPOCH + timedelta(days=lo))}' "
        f"AND window_start < '{iso_utc(EPOCH + timedelta(days=hi))}')"
        for lo, hi in ranges
    ]
    return " OR ".join(parts)


def snapshot(
    dt: DeltaTable, uri: str, window: timedelta, previous: GoldSnapshot | None = None
) -> GoldSnapshot:
    """This version served: the days it changed since ``previous`` rebuilt, the others kept."""
    files = file_days(dt)
    days = None if previous is None else changed_days(previous.files, files)
    if previous is None or days is None or len(days) * 2 > max(len(previous.days), 1):
        rows = rows_where(dt, uri)
        check_window(rows, window)
        parts = {d: build_day(day_rows) for d, day_rows in _by_day(rows).items()}
    else:
        rows = rows_where(dt, uri, _days_condition(days)) if days else []
        check_window(rows, window)
        parts = {d: p for d, p in previous.days.items() if d not in days}
        parts.update({d: build_day(day_rows) for d, day_rows in _by_day(rows).items()})
    return GoldSnapshot(dt.version(), parts, files, commit_ms(uri, dt.version()))


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a snapshot is built, and its objects frozen after.

    A year's snapshot is about a million small objects, none in a reference cycle; the collector's
    full passes while they are created tripled the build time, and later passes would walk them again.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.freeze()


class GoldCache:
    """Served snapshots of one gold table: the latest (kept up to date), a few older ones (``as_of``).

    Each request asks delta-rs for new commits (it reads only the log after the version it has); a
    snapshot is built once per version. Safe to share between the server's threads.
    """

    def __init__(self, uri: str, window: timedelta, *, keep: int = 4) -> None:
        self.uri = uri
        self.window = window
        self._keep = keep
        self._lock = threading.Lock()
        self._table: DeltaTable | None = None
        self._latest: GoldSnapshot | None = None
        self._older: OrderedDict[int, GoldSnapshot] = OrderedDict()

    def latest(self) -> GoldSnapshot:
        """The snapshot of the table's newest version (built now if that version is new)."""
        with self._lock:
            if self._table is None:
                self._table = open_gold(self.uri)
            else:
                self._table.update_incremental()
            if self._latest is None or self._latest.version != self._table.version():
                with _collector_paused():
                    self._latest = snapshot(self._table, self.uri, self.window, self._latest)
            return self._latest

    def at(self, at: int | datetime) -> GoldSnapshot:
        """The snapshot at version ``at`` or as of time ``at`` (``as_of``)."""
        with self._lock:
            if isinstance(at, int) and self._latest is not None and self._latest.version == at:
                return self._latest
            if isinstance(at, int) and at in self._older:
                self._older.move_to_end(at)
                return self._older[at]
            dt = open_gold(self.uri, at, name="as_of")
            version = dt.version()
            if self._latest is not None and self._latest.version == version:
                return self._latest
            if version not in self._older:
                with _collector_paused():
                    self._older[version] = snapshot(dt, self.uri, self.window)
                while len(self._older) > self._keep:
                    self._older.popitem(last=False)
            return self._older[version]
