"""An independent oracle for ``silver/orders``, written apart from ``lakestream.silver`` on purpose.

Per order and field: the value of the newest event time that set it, ties to the later arrival, nulls
offer nothing. Tests hold the product's interpreters (``silver_source`` + the ``MergeSpec`` folds, the
Delta MERGE, the whole job) to it, so two implementations are compared rather than one with itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from lakestream.standard import StandardEvent

FIELDS = (
    "user_id",
    "status",
    "amount",
    "paid_amount",
    "address",
    "logistics_state",
    "created_time",
    "deleted",
)


def offers(event: StandardEvent) -> dict[str, Any]:
    """What one VALID event with an order id says about its order (the README's field rules)."""
    kind = event.event_type
    if kind in ("order_created", "order_updated", "order_deleted"):
        out = {
            "user_id": event.user_id,
            "amount": event.amount,
            "status": event.status,
            "address": event.address,
            "deleted": kind == "order_deleted",
        }
        if kind == "order_created":
            out["created_time"] = event.event_time
        return out
    if kind == "payment":
        return {"paid_amount": event.amount, "status": "paid"}
    if kind == "logistics":
        return {"logistics_state": event.logistics_state}
    return {}


def oracle_rows(events: Iterable[StandardEvent]) -> dict[str, dict[str, Any]]:
    """Full silver rows (values, ``__ts``, ``__eid``, last event) per order id, events in arrival order."""
    rows: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.quality != "VALID" or e.order_id is None:
            continue
        offered = {f: v for f, v in offers(e).items() if v is not None}
        if not offered:
            continue
        row = rows.setdefault(
            e.order_id,
            {"order_id": e.order_id, **{c: None for f in FIELDS for c in (f, f"{f}__ts", f"{f}__eid")}}
            | {"last_event_time": None, "last_event_id": None},
        )
        for f, value in offered.items():
            if row[f"{f}__ts"] is None or e.event_time >= row[f"{f}__ts"]:
                row[f], row[f"{f}__ts"], row[f"{f}__eid"] = value, e.event_time, e.event_id
        if row["last_event_time"] is None or e.event_time >= row["last_event_time"]:
            row["last_event_time"], row["last_event_id"] = e.event_time, e.event_id
    return rows


class GeneratedEvent(Protocol):
    """What the sample generator knows about an event it made."""

    malformed: bool
    order_id: str | None
    event_time: datetime | None
    sets: dict[str, Any]


def expected_silver(events: Iterable[GeneratedEvent]) -> dict[str, dict[str, Any]]:
    """Field values per order from the sample generator's own model (``SourceEvent.sets``).

    Ties cannot occur in generated data (event times differ per order), so arrival order does not
    matter here; duplicates and late events change nothing by construction.
    """
    best: dict[str, dict[str, tuple[datetime, Any]]] = {}
    for ev in events:
        if ev.malformed or ev.order_id is None or ev.event_time is None:
            continue
        fields = best.setdefault(ev.order_id, {})
        for name, value in ev.sets.items():
            if value is None:
                continue
            current = fields.get(name)
            if current is None or ev.event_time >= current[0]:
                fields[name] = (ev.event_time, value)
    return {oid: {k: v for k, (_, v) in f.items()} for oid, f in best.items() if f}
