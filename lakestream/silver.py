"""The ``silver/orders`` table: one row per order, every field stamped with the event that set it.

Each resolved field ``F`` has three columns: ``F`` (value), ``F__ts`` (event time that set it) and
``F__eid`` (event id that set it). Keeping the time *per field* is what makes merging order-independent:
a payment at 12:03 and an address change at 12:05 touch different fields, so neither can clobber the
other, and a late 10:00 record loses field by field against anything newer.

The Delta MERGE (``sinks.merge_spec``) and the in-memory rules (``lakestream.resolution``) must apply the
same guard, implemented here on rows by ``merge_rows``; per field::

    set F = s.F, F__ts = s.F__ts, F__eid = s.F__eid
    when s.F is not null and (t.F__ts is null or s.F__ts >= t.F__ts)

and ``last_event_time`` is a "greatest" column guarded by itself, ``last_event_id`` moving with it::

    set last_event_time = s.last_event_time, last_event_id = s.last_event_id
    when s.last_event_time is not null
     and (t.last_event_time is null or s.last_event_time >= t.last_event_time)

so ``last_event_time`` is the max over the field times and ``last_event_id`` the event that set it (on
equal times, the later arrival, like the fields). ``SILVER_GUARDED``, ``SILVER_GREATEST`` and
``SILVER_COMPANIONS`` describe exactly this for the Delta writer's MERGE spec.
This rule is associative (it keeps, per field, the *last-arriving among the newest*), so pre-reducing a
micro-batch per key with ``merge_rows`` and then MERGE-ing gives exactly the row that folding the events one
by one would; re-running a MERGE with the same source is a no-op (idempotent). Ties (equal ``F__ts``) go to
the later arrival, so only tied events are order-sensitive.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from lakestream.standard import AMOUNT, TIMESTAMP

#: Resolved fields, in column order.
RESOLVED_FIELDS: tuple[str, ...] = (
    "user_id",
    "status",
    "amount",
    "paid_amount",
    "address",
    "logistics_state",
    "created_time",
    "deleted",
)
_VALUE_TYPES: Mapping[str, pa.DataType] = {
    "user_id": pa.string(),
    "status": pa.string(),
    "amount": AMOUNT,
    "paid_amount": AMOUNT,
    "address": pa.string(),
    "logistics_state": pa.string(),
    "created_time": TIMESTAMP,
    "deleted": pa.bool_(),
}

SILVER_KEY: tuple[str, ...] = ("order_id",)
#: Value column -> its event-time column (the MERGE guard's input).
SILVER_GUARDED: Mapping[str, str] = {f: f"{f}__ts" for f in RESOLVED_FIELDS}
#: Value column -> its event-id column.
SILVER_EIDS: Mapping[str, str] = {f: f"{f}__eid" for f in RESOLVED_FIELDS}
LAST_EVENT_TIME = "last_event_time"
LAST_EVENT_ID = "last_event_id"
#: Columns that keep the greater of source and target (ties: source), guarded by themselves.
SILVER_GREATEST: tuple[str, ...] = (LAST_EVENT_TIME,)
#: Guarded or greatest column -> the columns that move together with it.
SILVER_COMPANIONS: Mapping[str, tuple[str, ...]] = {
    **{f: (SILVER_EIDS[f],) for f in RESOLVED_FIELDS},
    LAST_EVENT_TIME: (LAST_EVENT_ID,),
}

SILVER_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("order_id", pa.string(), nullable=False),
        *(
            fld
            for f in RESOLVED_FIELDS
            for fld in (
                pa.field(f, _VALUE_TYPES[f]),
                pa.field(SILVER_GUARDED[f], TIMESTAMP),
                pa.field(SILVER_EIDS[f], pa.string()),
            )
        ),
        pa.field(LAST_EVENT_TIME, TIMESTAMP),
        pa.field(LAST_EVENT_ID, pa.string()),
    ]
)
SILVER_COLUMNS: tuple[str, ...] = tuple(SILVER_SCHEMA.names)

#: A silver row as a plain dict (column name -> Python value), the exchange format with Arrow and Flink.
SilverRow = dict[str, Any]

_TRIPLES: tuple[tuple[str, str, str], ...] = tuple(
    (f, SILVER_GUARDED[f], SILVER_EIDS[f]) for f in RESOLVED_FIELDS
)


def wins(new_ts: datetime, old_ts: datetime | None) -> bool:
    """The event-time guard: a value stamped ``new_ts`` replaces one stamped ``old_ts`` (ties: newcomer)."""
    return old_ts is None or new_ts >= old_ts


def empty_row(order_id: str) -> SilverRow:
    """A row with the key set and every field null (no event has set anything yet)."""
    row: SilverRow = dict.fromkeys(SILVER_COLUMNS)
    row["order_id"] = order_id
    return row


def merge_rows(target: Mapping[str, Any] | None, source: Mapping[str, Any]) -> SilverRow:
    """Apply the MERGE guard of ``source`` onto ``target`` (``None`` = not matched: insert), as a new row.

    Used to compute expected tables in tests and to pre-reduce a micro-batch to one source row per key,
    which Delta MERGE requires.
    """
    key = source["order_id"]
    if key is None:
        raise ValueError("order_id: a silver row needs its key; filter INVALID events before resolution")
    if target is None:
        out = empty_row(key)
    else:
        if target["order_id"] != key:
            raise ValueError(
                f"order_id: cannot merge row {source['order_id']!r} into row {target['order_id']!r}"
            )
        out = dict(target)
    for col, ts_col, eid_col in _TRIPLES:
        value = source.get(col)
        if value is None:
            continue
        s_ts = source[ts_col]
        if s_ts is None:
            raise ValueError(f"{ts_col}: null while {col} is set; every silver value needs its event time")
        if wins(s_ts, out[ts_col]):
            out[col] = value
            out[ts_col] = s_ts
            out[eid_col] = source.get(eid_col)
    s_last = source.get(LAST_EVENT_TIME)
    if s_last is not None and wins(s_last, out[LAST_EVENT_TIME]):
        out[LAST_EVENT_TIME] = s_last
        out[LAST_EVENT_ID] = source.get(LAST_EVENT_ID)
    return out


def reduce_rows(rows: Iterable[Mapping[str, Any]]) -> dict[str, SilverRow]:
    """Pre-reduce rows (in arrival order) to one row per key: the MERGE source for one micro-batch."""
    out: dict[str, SilverRow] = {}
    for row in rows:
        key = row["order_id"]
        out[key] = merge_rows(out.get(key), row)
    return out


def merge_tables(
    target: Mapping[str, Mapping[str, Any]], source: Iterable[Mapping[str, Any]]
) -> dict[str, SilverRow]:
    """In-memory MERGE of source rows into a keyed table; the reference the Delta MERGE is tested against."""
    out: dict[str, SilverRow] = {k: dict(v) for k, v in target.items()}
    for row in source:
        key = row["order_id"]
        out[key] = merge_rows(out.get(key), row)
    return out


def silver_batch(rows: Sequence[Mapping[str, Any]]) -> pa.RecordBatch:
    """Build a ``RecordBatch`` with ``SILVER_SCHEMA`` column-wise from rows."""
    arrays = [
        pa.array([r.get(name) for r in rows], SILVER_SCHEMA.field(name).type) for name in SILVER_COLUMNS
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=SILVER_SCHEMA)


def rows_from_arrow(data: pa.RecordBatch | pa.Table) -> list[SilverRow]:
    """Silver rows back from Arrow (UTC-aware datetimes, ``Decimal`` amounts), e.g. a Delta snapshot."""
    columns = {name: data.column(name).to_pylist() for name in SILVER_COLUMNS}
    return [{name: columns[name][i] for name in SILVER_COLUMNS} for i in range(data.num_rows)]
