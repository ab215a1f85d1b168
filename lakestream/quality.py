"""Quality tags: VALID events feed silver, SUSPICIOUS stay in bronze (for a human), INVALID go to quarantine.

Business rules on events the adapters already typed, kept out of the adapters so that streamed,
backfilled and hand-built events meet the same ones. The rules, and why SUSPICIOUS stays out of silver:
DESIGN.md section 5.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from operator import attrgetter

from lakestream.standard import (
    EVENT_COLUMNS,
    LOGISTICS,
    ORDER_CREATED,
    ORDER_DELETED,
    ORDER_UPDATED,
    PAYMENT,
    Quality,
    StandardEvent,
    _new_event,
)

UTC = timezone.utc

#: Order statuses the order database and payment callbacks are known to produce (lower case).
KNOWN_STATUSES: frozenset[str] = frozenset(
    {
        "created",
        "pending",
        "paid",
        "shipped",
        "delivered",
        "completed",
        "cancelled",
        "refunded",
        "closed",
    }
)

_ORDER_CHANGES = frozenset({ORDER_CREATED, ORDER_UPDATED, ORDER_DELETED})
#: Event types that resolve onto an order row and therefore need its key.
NEEDS_ORDER_ID: frozenset[str] = _ORDER_CHANGES | {PAYMENT, LOGISTICS}


@dataclass(frozen=True, slots=True)
class QualityRules:
    """Thresholds of the SUSPICIOUS rules (the INVALID rules are not configurable: they are type-level)."""

    max_future: timedelta = timedelta(minutes=5)
    amount_ceiling: Decimal = Decimal(1_000_000)
    known_statuses: frozenset[str] = field(default=KNOWN_STATUSES)
    min_event_time: datetime = datetime(2000, 1, 1, tzinfo=UTC)

    def __post_init__(self) -> None:
        if self.max_future < timedelta(0):
            raise ValueError(f"max_future: must not be negative, got {self.max_future}")
        if self.min_event_time.tzinfo is None:
            raise ValueError("min_event_time: must be timezone-aware (e.g. datetime(2000, 1, 1, tzinfo=UTC))")


DEFAULT_RULES = QualityRules()


def findings(
    event: StandardEvent, *, now: datetime, rules: QualityRules = DEFAULT_RULES
) -> tuple[list[str], list[str]]:
    """The INVALID and SUSPICIOUS findings for ``event`` (empty lists when it is VALID)."""
    return _findings(event, now, rules)


def _findings(event: StandardEvent, now: datetime, rules: QualityRules) -> tuple[list[str], list[str]]:
    # Positional (no keyword call per record); ``classify`` calls this directly.
    invalid: list[str] = []
    suspicious: list[str] = []
    etype = event.event_type
    if event.order_id is None and etype in NEEDS_ORDER_ID:
        invalid.append(f"order_id: missing, required for {etype} events")
    if etype in _ORDER_CHANGES and event.op is None:
        invalid.append(f"op: missing, required for {etype} events")
    if etype == PAYMENT and event.amount is None:
        invalid.append("amount: missing, required for payment events")
    if etype == LOGISTICS and event.logistics_state is None:
        invalid.append("logistics_state: missing, required for logistics events")
    amount = event.amount
    if amount is not None:
        if amount < 0:
            invalid.append(f"amount: {amount} is negative")
        elif amount > rules.amount_ceiling:
            suspicious.append(f"amount: {amount} is above the ceiling {rules.amount_ceiling}")
    ts = event.event_time
    tz = ts.tzinfo
    # ``timezone.utc`` (what every adapter produces) always has an offset: skip the ``utcoffset`` call.
    if tz is None or (tz is not UTC and ts.utcoffset() is None):
        invalid.append(f"event_time: {ts.isoformat()} has no time zone")
    else:
        if ts > now + rules.max_future:
            suspicious.append(
                f"event_time: {ts.isoformat()} is {ts - now} ahead of now (allowed: {rules.max_future})"
            )
        if ts < rules.min_event_time:
            suspicious.append(f"event_time: {ts.isoformat()} is before {rules.min_event_time.isoformat()}")
    status = event.status
    if status is not None and status not in rules.known_statuses:
        suspicious.append(f"status: {status!r} is not a known status")
    return invalid, suspicious


#: The event columns before ``quality`` (``StandardEvent``'s field order), to re-tag without
#: ``dataclasses.replace``, which looks every field up by name and calls the constructor by keyword.
_untagged = attrgetter(*EVENT_COLUMNS[: EVENT_COLUMNS.index("quality")])
assert EVENT_COLUMNS[-2:] == ("quality", "quality_reason")


def _tagged(event: StandardEvent, quality: Quality, reason: str | None) -> StandardEvent:
    """``dataclasses.replace(event, quality=quality, quality_reason=reason)``, positionally."""
    if type(event) is not StandardEvent:  # a subclass may have more fields: let ``replace`` handle it
        return dataclasses.replace(event, quality=quality, quality_reason=reason)
    make: Callable[..., StandardEvent] = _new_event  # mypy cannot count a star argument's items
    return make(*_untagged(event), quality, reason)


def classify(event: StandardEvent, *, now: datetime, rules: QualityRules = DEFAULT_RULES) -> StandardEvent:
    """Return ``event`` tagged VALID / SUSPICIOUS / INVALID with a reason naming every offending field.

    ``now`` is the processing-time clock of the caller (tz-aware). A VALID event that is already tagged
    VALID is returned as is (no allocation on the hot path).
    """
    if now.tzinfo is None:
        raise ValueError("now: must be timezone-aware; pass datetime.now(timezone.utc)")
    invalid, suspicious = _findings(event, now, rules)
    if invalid:
        return _tagged(event, "INVALID", "; ".join(invalid + suspicious))
    if suspicious:
        return _tagged(event, "SUSPICIOUS", "; ".join(suspicious))
    if event.quality == "VALID" and event.quality_reason is None:
        return event
    return _tagged(event, "VALID", None)
