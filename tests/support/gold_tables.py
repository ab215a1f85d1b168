"""Real gold tables for the serving tests and the serving benchmark: rows written as the layers write them.

A batch backfill replaces a range of windows in one commit (``replaceWhere``); a realtime write upserts
windows, never over a batch row. No mocks: these are Delta tables written by delta-rs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from lakestream.gold import GOLD_SCHEMA
from serving.metrics_view import BATCH, REALTIME, GoldRow

WINDOW = timedelta(minutes=5)
UTC = timezone.utc


def at(text: str) -> datetime:
    """``"2024-06-01T04:05"`` as an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def row(
    start: datetime,
    *,
    layer: str = REALTIME,
    events: int = 10,
    orders: int = 2,
    payments: int = 1,
    gmv: str = "100.00",
    users: int = 3,
    data_time: datetime | None = None,
    source_version: int | None = None,
    window: timedelta = WINDOW,
) -> GoldRow:
    """One gold row; ``data_time`` defaults to the window's end, ``source_version`` to 7 for batch rows."""
    return GoldRow(
        window_start=start,
        window_end=start + window,
        events=events,
        orders_created=orders,
        payments=payments,
        gmv=Decimal(gmv),
        active_users=users,
        layer=layer,
        data_time=data_time or start + window,
        source_version=source_version if source_version is not None or layer == REALTIME else 7,
        updated_at=(data_time or start + window) + timedelta(seconds=1),
    )


def to_arrow(rows: Sequence[GoldRow]) -> pa.Table:
    """Rows as an Arrow table of :data:`GOLD_SCHEMA`."""
    names = GOLD_SCHEMA.names
    return pa.Table.from_pydict({n: [getattr(r, n) for r in rows] for n in names}, schema=GOLD_SCHEMA)


def _literal(when: datetime) -> str:
    return f"'{when.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.%f')}Z'"


def backfill(table: Path | str, rows: Sequence[GoldRow], start: datetime, end: datetime) -> int:
    """Replace the windows of ``[start, end)`` with batch ``rows`` in one commit; the new version."""
    assert all(r.layer == BATCH and start <= r.window_start < end for r in rows)
    if not (Path(table) / "_delta_log").is_dir():
        write_deltalake(str(table), to_arrow(rows), mode="append")
    else:
        write_deltalake(
            str(table),
            to_arrow(rows),
            mode="overwrite",
            predicate=f"window_start >= {_literal(start)} AND window_start < {_literal(end)}",
        )
    return DeltaTable(str(table)).version()


def upsert_realtime(table: Path | str, rows: Sequence[GoldRow]) -> int:
    """Upsert realtime ``rows`` by ``window_start`` in one commit, never over a batch row; the version."""
    assert all(r.layer == REALTIME for r in rows)
    try:
        dt = DeltaTable(str(table))
    except TableNotFoundError:
        write_deltalake(str(table), to_arrow(rows), mode="append")
        return DeltaTable(str(table)).version()
    (
        dt.merge(
            to_arrow(rows), predicate="t.window_start = s.window_start", source_alias="s", target_alias="t"
        )
        .when_matched_update_all(predicate="t.layer = 'realtime'")
        .when_not_matched_insert_all()
        .execute()
    )
    return DeltaTable(str(table)).version()


def append_rows(table: Path | str, data: pa.Table) -> int:
    """Append an Arrow table (late or quarantine rows) in one commit; the new version."""
    write_deltalake(str(table), data, mode="append")
    return DeltaTable(str(table)).version()


def _dummy(kind: pa.DataType, i: int) -> object:
    if pa.types.is_timestamp(kind):
        return datetime(2024, 6, 1, tzinfo=UTC)
    if pa.types.is_decimal(kind):
        return Decimal("1.00")
    if pa.types.is_integer(kind):
        return i
    if pa.types.is_binary(kind):
        return b"{}"
    return f"x{i}"


def ingest_rows(
    schema: pa.Schema, ingest_times: Sequence[datetime], event_times: Sequence[datetime] | None = None
) -> pa.Table:
    """Rows of a late or quarantine table (``schema``) with these ``ingest_time`` values and (a late
    table) ``event_time`` values (the ingest times when not given), the rest filler."""
    events = list(ingest_times if event_times is None else event_times)
    given = {"ingest_time": list(ingest_times), "event_time": events}
    columns = {
        f.name: given[f.name] if f.name in given else [_dummy(f.type, i) for i in range(len(ingest_times))]
        for f in schema
    }
    return pa.Table.from_pydict(columns, schema=schema)
