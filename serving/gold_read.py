"""Read the gold table (``gold.table``, latest or an older version) and the day counts of the page.

Rows come through delta-rs' DataFusion engine as :class:`serving.metrics_view.GoldRow`; the JSON of
a served window is written here, once for the CLI and the server (``serving.gold_cache``).
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError

from lakestream.time import EPOCH, iso_utc
from maintenance.maintenance_errors import MaintenanceError
from serving.metrics_view import (
    GoldRow,
    ServedWindow,
)
from storage.time_travel import OutOfReachError, open_table_at

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


def open_gold(uri: str, at: int | datetime | None = None, *, name: str = "--as-of") -> DeltaTable:
    """The gold table at its latest version, at version ``at`` (int), or as of time ``at``.

    As of a time means the newest version committed at or before it; a time before the oldest retained
    commit, or a version that is not there, raises :class:`GoldReadError` naming ``name``.
    """
    try:
        return open_table_at(uri, at, name=name)
    except TableNotFoundError:
        raise GoldMissingError(
            f"no gold table at {uri}: the gold jobs (batch backfill, speed layer) create it; check "
            "lakehouse.root (--lakehouse)"
        ) from None
    except OutOfReachError as exc:
        raise GoldReadError(str(exc)) from None


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


def _times(column: pa.ChunkedArray) -> list[datetime | None]:
    """A timestamp column as UTC datetimes, through epoch microseconds (pyarrow's own conversion of
    zoned timestamps is about ten times slower)."""
    micros = pc.cast(pc.cast(column, pa.timestamp("us", tz="UTC")), pa.int64()).to_pylist()
    return [None if us is None else EPOCH + timedelta(microseconds=us) for us in micros]


def read_rows(
    dt: DeltaTable, uri: str, start: datetime | None = None, end: datetime | None = None
) -> list[GoldRow]:
    """The gold rows with ``start <= window_start < end`` (either bound optional) of that version."""
    where = [f"window_start >= {_literal(start)}"] if start is not None else []
    where += [f"window_start < {_literal(end)}"] if end is not None else []
    return rows_where(dt, uri, " AND ".join(where))


def rows_where(dt: DeltaTable, uri: str, where: str = "") -> list[GoldRow]:
    """The gold rows of that version matching a SQL condition (none: every row)."""
    sql = "SELECT * FROM t" + (f" WHERE {where}" if where else "")
    try:
        data = query(dt, sql)
    except Exception as exc:  # delta-rs raises DataFusion and I/O errors as plain exceptions
        raise GoldReadError(
            f"{uri} at version {dt.version()}: cannot be read ({str(exc).splitlines()[0]}); VACUUM deletes "
            "the files of old versions once they are older than its retention"
        ) from None
    check_columns(data.schema, uri)
    times = {n: _times(data.column(n)) for n in ("window_start", "window_end", "data_time", "updated_at")}
    plain = {n: data.column(n).to_pylist() for n in GOLD_COLUMNS if n not in times}
    zero = Decimal("0.00")
    return [
        GoldRow(s, e, ev or 0, oc or 0, p or 0, zero if g is None else g, au or 0, lay, d, sv, up)
        for s, e, ev, oc, p, g, au, lay, d, sv, up in zip(
            times["window_start"],
            times["window_end"],
            plain["events"],
            plain["orders_created"],
            plain["payments"],
            plain["gmv"],
            plain["active_users"],
            plain["layer"],
            times["data_time"],
            plain["source_version"],
            times["updated_at"],
            strict=True,
        )
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


def _opt(text: str | None) -> str:
    return "null" if text is None else f'"{text}"'


def row_json_bytes(s: ServedWindow) -> bytes:
    """``json.dumps(row_json(s))`` without spaces, formatted directly (a year of windows: 0.2 s instead
    of 1.5 s). Only the layer is free text; it goes through ``json.dumps``."""
    r, d = s.row, s.day
    sv = "null" if r.source_version is None else str(int(r.source_version))
    return (
        f'{{"window_start":"{iso_utc(r.window_start)}","window_end":"{iso_utc(r.window_end)}",'
        f'"events":{int(r.events)},"orders_created":{int(r.orders_created)},"payments":{int(r.payments)},'
        f'"gmv":"{_money(r.gmv)}","active_users":{int(r.active_users)},"layer":{json.dumps(r.layer)},'
        f'"data_time":{_opt(_time(r.data_time))},"source_version":{sv},'
        f'"updated_at":{_opt(_time(r.updated_at))},"day_events":{int(d.events)},'
        f'"day_orders_created":{int(d.orders_created)},"day_payments":{int(d.payments)},'
        f'"day_gmv":"{_money(d.gmv)}"}}'
    ).encode()


class DayCounts:
    """Rows of an append table (late, quarantine) whose ``column`` falls in a UTC day, by version.

    The late table counts by ``event_time`` (the day gold's windows are in); quarantined records have
    no event time to trust, so they count by ``ingest_time``. A table that does not exist counts 0
    (nothing was late or quarantined yet).
    """

    def __init__(self, uri: str, column: str) -> None:
        self.uri = uri
        self.column = column
        #: The table version the last count read (None: no table yet).
        self.version: int | None = None
        self._lock = threading.Lock()
        self._table: DeltaTable | None = None
        self._counts: dict[tuple[int, datetime], int] = {}

    def count(self, start: datetime, end: datetime) -> int:
        """Rows with ``start <= column < end`` in the table's newest version."""
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
            self.version = self._table.version()
            key = (self.version, start)
            if key not in self._counts:
                sql = (
                    f"SELECT count(*) AS n FROM t WHERE {self.column} >= {_literal(start)} "
                    f"AND {self.column} < {_literal(end)}"
                )
                if len(self._counts) >= 8:
                    self._counts.clear()
                self._counts[key] = int(query(self._table, sql).column("n")[0].as_py())
            return self._counts[key]
