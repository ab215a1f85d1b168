"""An independent oracle for the gold metrics, written apart from ``lakestream.gold`` on purpose.

From the deliveries a test produced, in delivery order, by hand: tumbling UTC windows (every UTC day
begins one), each event id counted at its first VALID delivery only, and the five metrics as DESIGN.md
11.1 words them. Tests hold the speed layer, the batch layer and ``lakestream.gold``'s interpreters
to it, so two implementations are compared rather than one with itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Literal

UTC = timezone.utc
FIVE_MINUTES = timedelta(minutes=5)
#: The largest gmv ``decimal(18, 2)`` holds.
LARGEST_GMV = Decimal("9999999999999999.99")

Kind = Literal["order_created", "payment", "other"]
#: The metrics, as the gold table names its columns.
METRIC_NAMES = ("events", "orders_created", "payments", "gmv", "active_users")


def kind(source: str, op: str | None) -> Kind:
    """What an event counts as: a create of the order database is an order created, any payment one."""
    if source == "orders_db" and op == "c":
        return "order_created"
    return "payment" if source == "payments" else "other"


@dataclass(frozen=True)
class Delivery:
    """One delivery of an event as the test produced it (``valid``: its quality is VALID)."""

    event_id: str
    at: datetime
    kind: Kind
    amount: Decimal | None = None
    order_id: str | None = None
    user_id: str | None = None
    valid: bool = True


def bronze_deliveries(rows: Iterable[Mapping[str, Any]]) -> list[Delivery]:
    """Bronze rows as deliveries, in the order they arrived: by ingest time, then Kafka coordinates
    (within a partition a later offset arrived later)."""
    ordered = sorted(rows, key=lambda r: (r["ingest_time"], r["topic"], r["partition"], r["offset"]))
    return [
        Delivery(
            r["event_id"],
            r["event_time"],
            kind(r["source"], r["op"]),
            r["amount"],
            r["order_id"],
            r["user_id"],
            valid=r["quality"] == "VALID",
        )
        for r in ordered
    ]


def window_start(t: datetime, window: timedelta = FIVE_MINUTES) -> datetime:
    """Start of the window holding ``t``: its UTC day's midnight plus the whole windows since."""
    if t.utcoffset() is None:
        raise ValueError(f"{t} has no offset")
    t = t.astimezone(UTC)
    midnight = t.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight + (t - midnight) // window * window


def expected_gold(
    deliveries: Iterable[Delivery],
    window: timedelta = FIVE_MINUTES,
    *,
    over: tuple[datetime, datetime] | None = None,
) -> list[dict[str, Any]]:
    """Rows of ``window_start``, ``window_end`` and the five metrics, by window start.

    Without ``over``: the windows with events. With ``over=(start, end)`` (window boundaries): every
    window of ``[start, end)``, empty ones all zeros, events outside it left out.
    """
    if timedelta(days=1) % window:
        raise ValueError(f"a window of {window} does not divide a day")
    first: dict[str, Delivery] = {}
    for d in deliveries:
        if d.valid and d.event_id not in first:
            first[d.event_id] = d
    members: dict[datetime, list[Delivery]] = {}
    for d in first.values():
        members.setdefault(window_start(d.at, window), []).append(d)
    if over is None:
        starts = sorted(members)
    else:
        start, end = over
        if window_start(start, window) != start or window_start(end, window) != end or start >= end:
            raise ValueError(f"{over} is not a range of whole windows")
        starts = [start + i * window for i in range((end - start) // window)]
    return [_metrics(s, window, members.get(s, [])) for s in starts]


def _metrics(start: datetime, window: timedelta, events: list[Delivery]) -> dict[str, Any]:
    payments = [e for e in events if e.kind == "payment"]
    gmv = sum((e.amount for e in payments if e.amount is not None), Decimal(0))
    if abs(gmv) > LARGEST_GMV:
        raise OverflowError(f"gmv {gmv} of the window at {start} does not fit decimal(18, 2)")
    return {
        "window_start": start,
        "window_end": start + window,
        "events": len(events),
        "orders_created": len(
            {e.order_id for e in events if e.kind == "order_created" and e.order_id is not None}
        ),
        "payments": len(payments),
        "gmv": gmv.quantize(Decimal("0.01")),
        "active_users": len({e.user_id for e in events if e.user_id is not None}),
    }
