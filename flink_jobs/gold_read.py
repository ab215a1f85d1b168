"""Read the gold table ``gold/order_metrics_5m`` (latest or an older version) as served windows.

``lakestream query metrics`` reads once; ``lakestream serve`` keeps a :class:`GoldCache`: the served
windows of the whole table and their JSON, built once per table version and reused until a new
version is committed, so a request only slices and joins prepared bytes.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError, TableNotFoundError

from flink_jobs.tables import commit_ms
from lakestream.metrics_view import (
    GoldRow,
    ServedWindow,
    batch_through,
    check_window,
    running_totals,
    select_windows,
)
from lakestream.time_args import ACCEPTED_FORMS, TimeArgError, iso_utc, parse_time
from maintenance.errors import MaintenanceError

LATE_TABLE = "late/order_events"
QUARANTINE_TABLE = "quarantine/order_events"

#: The gold columns the serving side reads, with the Arrow types it accepts.
GOLD_COLUMNS: dict[str, tuple[str, ...]] = {
    "window_start": ("timestamp",),
    "window_end": ("timestamp",),
    "events": ("int64", "int32"),
    "orders_created": ("int64", "int32"),
    "payments": ("int64", "int32"),
    "gmv": ("decimal",),
    "active_users": ("int64", "int32"),
    "layer": ("string", "large_string"),
    "data_time": ("timestamp",),
    "source_version": ("int64", "int32"),
    "updated_at": ("timestamp",),
}


class GoldReadError(MaintenanceError):
    """The gold table (or a version of it) cannot be read; the message says why and what to do."""


class GoldMissingError(GoldReadError):
    """There is no gold table at the configured location (yet)."""


def parse_as_of(text: str, *, name: str) -> int | datetime:
    """``--as-of`` / ``as_of``: a version number (``12``) or an ISO 8601 time (read as UTC)."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        return parse_time(value, name=name)
    except TimeArgError:
        raise TimeArgError(
            f"{name} {text!r}: expected a table version (a whole number such as 12) or a time "
            f"({ACCEPTED_FORMS})"
        ) from None


def open_gold(uri: str, at: int | datetime | None = None, *, name: str = "--as-of") -> DeltaTable:
    """The gold table at its latest version, at version ``at`` (int), or as of time ``at``.

    As of a time means the newest version committed at or before it; a time before the oldest retained
    commit, or a version that is not there, raises :class:`GoldReadError` naming ``name``.
    """
    try:
        dt = DeltaTable(uri)
    except TableNotFoundError:
        raise GoldMissingError(
            f"no gold table at {uri}: the gold jobs (batch backfill, speed layer) create it; check "
            "lakehouse.root (--lakehouse)"
        ) from None
    if at is None:
        return dt
    latest = dt.version()
    try:
        dt.load_as_version(at)
    except (DeltaError, ValueError, OSError) as exc:
        hint = (
            f"versions go from the oldest retained commit to {latest}"
            if isinstance(at, int)
            else "give a time after the oldest retained commit"
        )
        raise GoldReadError(
            f"{name} {at if isinstance(at, int) else iso_utc(at)}: cannot load {uri} there "
            f"({str(exc).splitlines()[0]}); {hint}"
        ) from None
    if isinstance(at, datetime):
        committed = commit_ms(uri, dt.version())
        if committed is not None and committed > at.timestamp() * 1000:
            raise GoldReadError(
                f"{name} {iso_utc(at)}: {uri} has no version committed at or before it (its oldest "
                f"retained version {dt.version()} was committed at "
                f"{iso_utc(datetime.fromtimestamp(committed / 1000, tz=timezone.utc))})"
            )
    return dt


def check_columns(schema: pa.Schema, uri: str) -> None:
    """Fail with the column's name when the table lacks a gold column or has it with another type."""
    for name, kinds in GOLD_COLUMNS.items():
        if name not in schema.names:
            raise GoldReadError(f"{uri}: column {name!r} is missing; is this the gold table?")
        kind = str(schema.field(name).type)
        if not kind.startswith(kinds):
            raise GoldReadError(f"{uri}: column {name!r} is {kind}, expected {' or '.join(kinds)}")


def _literal(when: datetime) -> str:
    return f"'{iso_utc(when)}'"


def query(dt: DeltaTable, sql: str) -> pa.Table:
    """Run ``sql`` against the table registered as ``t`` (delta-rs' DataFusion engine).

    Not pyarrow's dataset scanner: a CLI process that had scanned with it aborted at exit now and then
    ("terminate called without an active exception"), losing buffered output.
    """
    result = QueryBuilder().register("t", dt).execute(sql)
    return pa.RecordBatchReader.from_stream(result).read_all()


def read_rows(
    dt: DeltaTable, uri: str, start: datetime | None = None, end: datetime | None = None
) -> list[GoldRow]:
    """The gold rows with ``start <= window_start < end`` (either bound optional) of that version."""
    where = [f"window_start >= {_literal(start)}"] if start is not None else []
    where += [f"window_start < {_literal(end)}"] if end is not None else []
    sql = "SELECT * FROM t" + (" WHERE " + " AND ".join(where) if where else "")
    try:
        data = query(dt, sql)
    except Exception as exc:  # delta-rs raises DataFusion and I/O errors as plain exceptions
        raise GoldReadError(
            f"{uri} at version {dt.version()}: cannot be read ({str(exc).splitlines()[0]}); VACUUM deletes "
            "the files of old versions once they are older than its retention"
        ) from None
    check_columns(data.schema, uri)
    columns = [data.column(name).to_pylist() for name in GOLD_COLUMNS]
    zero = Decimal("0.00")
    return [
        GoldRow(s, e, ev or 0, oc or 0, p or 0, zero if g is None else g, au or 0, lay, d, sv, up)
        for s, e, ev, oc, p, g, au, lay, d, sv, up in zip(*columns, strict=True)
    ]


def _money(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.01'))}"


def _time(value: datetime | None) -> str | None:
    return None if value is None else iso_utc(value)


def row_json(s: ServedWindow) -> dict[str, Any]:
    """One served window as JSON: the gold columns (decimals as text with two places, times ISO 8601 Z),
    then the day's running totals (``day_*``; ``active_users`` has none, it is per window)."""
    r = s.row
    return {
        "window_start": iso_utc(r.window_start),
        "window_end": iso_utc(r.window_end),
        "events": r.events,
        "orders_created": r.orders_created,
        "payments": r.payments,
        "gmv": _money(r.gmv),
        "active_users": r.active_users,
        "layer": r.layer,
        "data_time": _time(r.data_time),
        "source_version": r.source_version,
        "updated_at": _time(r.updated_at),
        "day_events": s.day.events,
        "day_orders_created": s.day.orders_created,
        "day_payments": s.day.payments,
        "day_gmv": _money(s.day.gmv),
    }


@dataclass
class GoldSnapshot:
    """One version of the gold table as served: every window with its running totals, sorted."""

    version: int
    served: list[ServedWindow]
    #: Commit time of the version (epoch ms), None when its commit file is gone.
    committed_ms: int | None = None
    _starts: list[datetime] = field(default_factory=list, repr=False)
    _json: list[bytes] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self._starts = [s.row.window_start for s in self.served]

    def window_range(self, start: datetime, end: datetime) -> tuple[int, int]:
        """Indexes ``[i, j)`` of the served windows with ``start <= window_start < end``."""
        return bisect.bisect_left(self._starts, start), bisect.bisect_left(self._starts, end)

    def between(self, start: datetime, end: datetime) -> list[ServedWindow]:
        """The served windows with ``start <= window_start < end``."""
        i, j = self.window_range(start, end)
        return self.served[i:j]

    def json_array(self, start: datetime, end: datetime) -> bytes:
        """The JSON array of the windows of ``[start, end)`` (rows as :func:`row_json`), from cached parts."""
        with self._lock:
            if self._json is None:
                self._json = [json.dumps(row_json(s), separators=(",", ":")).encode() for s in self.served]
        i, j = self.window_range(start, end)
        return b"[" + b",".join(self._json[i:j]) + b"]"

    def batch_through(self) -> datetime | None:
        """End of the newest batch window of this version (:func:`lakestream.metrics_view.batch_through`)."""
        return batch_through([s.row for s in self.served])


def snapshot(dt: DeltaTable, uri: str, window: timedelta) -> GoldSnapshot:
    """Every window of this version of the gold table, served (selection rule, running totals)."""
    rows = read_rows(dt, uri)
    check_window(rows, window)
    return GoldSnapshot(dt.version(), running_totals(select_windows(rows)), commit_ms(uri, dt.version()))


class GoldCache:
    """Served snapshots of one gold table by version: the latest, and a few older ones (``as_of``).

    Each request asks for the latest version (a read of the log's new commits only); a snapshot is
    built once per version. Safe to share between the server's threads.
    """

    def __init__(self, uri: str, window: timedelta, *, keep: int = 4) -> None:
        self.uri = uri
        self.window = window
        self._keep = keep
        self._lock = threading.Lock()
        self._table: DeltaTable | None = None
        self._snapshots: OrderedDict[int, GoldSnapshot] = OrderedDict()

    def _latest_version(self) -> int:
        if self._table is None:
            self._table = open_gold(self.uri)
        else:
            self._table.update_incremental()
        return self._table.version()

    def _get(self, version: int, dt: DeltaTable | None) -> GoldSnapshot:
        found = self._snapshots.get(version)
        if found is not None:
            self._snapshots.move_to_end(version)
            return found
        if dt is None:
            dt = open_gold(self.uri, version, name="as_of")
        built = snapshot(dt, self.uri, self.window)
        self._snapshots[version] = built
        while len(self._snapshots) > self._keep:
            self._snapshots.popitem(last=False)
        return built

    def latest(self) -> GoldSnapshot:
        """The snapshot of the table's newest version (built now if that version is new)."""
        with self._lock:
            version = self._latest_version()
            if version in self._snapshots:
                return self._get(version, None)
            return self._get(version, self._table)

    def at(self, at: int | datetime) -> GoldSnapshot:
        """The snapshot at version ``at`` or as of time ``at`` (``as_of``)."""
        with self._lock:
            if isinstance(at, int) and at in self._snapshots:
                return self._get(at, None)
            dt = open_gold(self.uri, at, name="as_of")
            return self._get(dt.version(), dt)


class DayCounts:
    """Rows of an append table (late, quarantine) whose ``ingest_time`` falls in a UTC day, by version.

    A table that does not exist counts 0 (nothing was late or quarantined yet).
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._lock = threading.Lock()
        self._table: DeltaTable | None = None
        self._counts: dict[tuple[int, datetime], int] = {}

    def count(self, start: datetime, end: datetime) -> int:
        """Rows with ``start <= ingest_time < end`` in the table's newest version."""
        with self._lock:
            if self._table is None:
                if not (Path(self.uri) / "_delta_log").is_dir() and "://" not in self.uri:
                    return 0
                try:
                    self._table = DeltaTable(self.uri)
                except TableNotFoundError:
                    return 0
            else:
                self._table.update_incremental()
            key = (self._table.version(), start)
            if key not in self._counts:
                sql = (
                    f"SELECT count(*) AS n FROM t WHERE ingest_time >= {_literal(start)} "
                    f"AND ingest_time < {_literal(end)}"
                )
                if len(self._counts) >= 8:
                    self._counts.clear()
                self._counts[key] = int(query(self._table, sql).column("n")[0].as_py())
            return self._counts[key]
