"""The ``silver/orders`` table: one row per order, every field stamped with the event that set it.

Three definitions, each in one place: the columns (``SILVER_SCHEMA``: per resolved field ``F`` its value,
``F__ts`` and ``F__eid``), which event offers which field (``FIELD_OFFERS``), and the rule that folds
offers into a row (``SILVER_MERGE``, a ``MergeSpec``: per field the newest event time wins, ties to the
later arrival, a null never erases; DESIGN.md section 2). ``silver_source`` interprets the offers on
Arrow batches of standard events and yields the partial rows that the rule folds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakestream.merge_spec import MergeSpec
from lakestream.standard import (
    AMOUNT,
    LOGISTICS,
    ORDER_CREATED,
    ORDER_DELETED,
    ORDER_UPDATED,
    PAYMENT,
    TIMESTAMP,
    Quality,
)

#: Resolved fields, in column order, with their value types.
FIELD_TYPES: Mapping[str, pa.DataType] = {
    "user_id": pa.string(),
    "status": pa.string(),
    "amount": AMOUNT,
    "paid_amount": AMOUNT,
    "address": pa.string(),
    "logistics_state": pa.string(),
    "created_time": TIMESTAMP,
    "deleted": pa.bool_(),
}
RESOLVED_FIELDS: tuple[str, ...] = tuple(FIELD_TYPES)
SILVER_KEY: tuple[str, ...] = ("order_id",)
LAST_EVENT_TIME = "last_event_time"
LAST_EVENT_ID = "last_event_id"

#: The MERGE rule of silver: ``F`` guarded by ``F__ts``, ``F__eid`` moving with it; ``last_event_time``
#: keeps the greatest stamp, ``last_event_id`` moving with it.
SILVER_MERGE: MergeSpec = MergeSpec.with_suffixes(
    keys=SILVER_KEY,
    fields=RESOLVED_FIELDS,
    greatest=(LAST_EVENT_TIME,),
    greatest_companions={LAST_EVENT_TIME: (LAST_EVENT_ID,)},
)

SILVER_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("order_id", pa.string(), nullable=False),
        *(
            fld
            for f in RESOLVED_FIELDS
            for fld in (
                pa.field(f, FIELD_TYPES[f]),
                pa.field(SILVER_MERGE.guarded[f], TIMESTAMP),
                *(pa.field(c, pa.string()) for c in SILVER_MERGE.companions[f]),
            )
        ),
        pa.field(LAST_EVENT_TIME, TIMESTAMP),
        pa.field(LAST_EVENT_ID, pa.string()),
    ]
)
SILVER_COLUMNS: tuple[str, ...] = tuple(SILVER_SCHEMA.names)

#: Merge-on-read layout (``silver.layout = "merge_on_read"``, DESIGN.md section 13): each commit's
#: folded rows go to a changes table stamped with ``change_seq``; the compaction folds them into the
#: snapshot with ``SILVER_MOR_MERGE``, the same rule with ``change_seq`` kept as the greatest. A null
#: ``change_seq`` is a row folded before any sequence (a copy-on-write silver switched to the layout).
CHANGE_SEQ = "change_seq"
SILVER_MOR_MERGE: MergeSpec = SILVER_MERGE.sequenced(CHANGE_SEQ)
SILVER_MOR_SCHEMA: pa.Schema = SILVER_SCHEMA.append(pa.field(CHANGE_SEQ, pa.int64()))

#: Quality tags whose events are applied: SUSPICIOUS ones (e.g. stamped in the future) would pin fields.
SILVER_ACCEPTS: frozenset[Quality] = frozenset({"VALID"})
PAID = "paid"
ORDER_CHANGES: tuple[str, ...] = (ORDER_CREATED, ORDER_UPDATED, ORDER_DELETED)


class Offer(NamedTuple):
    """Events of ``event_types`` offer a field the event's ``column``, or ``constant`` when no column."""

    event_types: tuple[str, ...]
    column: str | None = None
    constant: Any = None


#: Which event sets which field. Order changes carry the row image (a delete is a tombstone that an
#: older update cannot lift, a newer re-create can); payments set what was paid; behaviour sets nothing.
FIELD_OFFERS: Mapping[str, tuple[Offer, ...]] = {
    "user_id": (Offer(ORDER_CHANGES, "user_id"),),
    "status": (Offer(ORDER_CHANGES, "status"), Offer((PAYMENT,), constant=PAID)),
    "amount": (Offer(ORDER_CHANGES, "amount"),),
    "paid_amount": (Offer((PAYMENT,), "amount"),),
    "address": (Offer(ORDER_CHANGES, "address"),),
    "logistics_state": (Offer((LOGISTICS,), "logistics_state"),),
    "created_time": (Offer((ORDER_CREATED,), "event_time"),),
    "deleted": (
        Offer((ORDER_CREATED, ORDER_UPDATED), constant=False),
        Offer((ORDER_DELETED,), constant=True),
    ),
}


def _check_offers() -> None:
    if tuple(FIELD_OFFERS) != RESOLVED_FIELDS:
        raise AssertionError(f"FIELD_OFFERS must list {RESOLVED_FIELDS} in order, has {tuple(FIELD_OFFERS)}")
    for f, offers in FIELD_OFFERS.items():
        types = [t for o in offers for t in o.event_types]
        if len(types) != len(set(types)):
            raise AssertionError(f"FIELD_OFFERS[{f!r}]: an event type offers the field twice")
        if any((o.column is None) == (o.constant is None) for o in offers):
            raise AssertionError(f"FIELD_OFFERS[{f!r}]: each offer needs a column or a constant")


_check_offers()


def silver_source(
    events: pa.Table | pa.RecordBatch, *, accept: frozenset[Quality] = SILVER_ACCEPTS
) -> pa.Table:
    """Standard events (``BRONZE_SCHEMA`` columns) -> one partial silver row per event, in arrival order.

    Each row holds the fields its event offers (``FIELD_OFFERS``; a null offers nothing), each with the
    event's time and id, plus ``last_event_time``/``last_event_id``. Events of other qualities, without
    an order id, or offering nothing give no row. Column-wise: turning events back into Python
    objects would cost about as much as parsing them.
    """
    t = events if isinstance(events, pa.Table) else pa.Table.from_batches([events])
    keep = pc.and_(
        pc.is_in(t["quality"], value_set=pa.array(sorted(accept), pa.string())), pc.is_valid(t["order_id"])
    )
    t = t.filter(keep)
    etype = t["event_type"]
    is_type: dict[tuple[str, ...], Any] = {}

    def of_type(types: tuple[str, ...]) -> Any:
        if types not in is_type:
            is_type[types] = pc.fill_null(pc.is_in(etype, value_set=pa.array(types, pa.string())), False)
        return is_type[types]

    time_type = t.schema.field("event_time").type
    any_set = pa.array(np.zeros(t.num_rows, dtype=bool))
    columns: dict[str, Any] = {"order_id": t["order_id"]}
    for f, offers in FIELD_OFFERS.items():
        typ = t.schema.field(offers[0].column).type if offers[0].column else FIELD_TYPES[f]
        value: Any = pa.scalar(None, typ)
        for offer in reversed(offers):
            offered = t[offer.column] if offer.column else pa.scalar(offer.constant, typ)
            value = pc.if_else(of_type(offer.event_types), offered, value)
        valid = pc.is_valid(value)
        any_set = pc.or_(any_set, valid)
        columns[f] = value
        columns[SILVER_MERGE.guarded[f]] = pc.if_else(valid, t["event_time"], pa.scalar(None, time_type))
        for companion in SILVER_MERGE.companions[f]:
            columns[companion] = pc.if_else(valid, t["event_id"], pa.scalar(None, pa.string()))
    columns[LAST_EVENT_TIME] = t["event_time"]
    columns[LAST_EVENT_ID] = t["event_id"]
    out = pa.table([columns[c] for c in SILVER_COLUMNS], names=list(SILVER_COLUMNS))
    return out.filter(any_set).cast(SILVER_SCHEMA)
