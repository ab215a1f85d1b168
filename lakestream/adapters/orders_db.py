"""``orders_db``: CDC rows of the order database (``op`` c/u/d, local wall-clock ``updated_at``).

Payload: ``{"op": "c|u|d", "order_id", "user_id", "amount" (yuan, decimal string or number), "status",
"address", "updated_at": "2024-06-01 12:00:00"}``. ``updated_at`` carries no offset: the database writes
the wall clock of ``AdapterSettings.source_zone`` (default Asia/Shanghai), converted here to UTC. The CDC
feed has no event id, so the id is a stable hash of the canonical payload: a re-delivered row gets the same
id, a genuinely different change (any field differs) gets another.
"""

from __future__ import annotations

from typing import Any

from lakestream.adapters.parsing import (
    FieldError,
    describe,
    get_code,
    get_id,
    get_text,
    get_yuan,
    make_adapter,
    parse_timestamp,
    require,
    stable_id,
)
from lakestream.adapters.settings import AdapterSettings, zone
from lakestream.standard import OP_EVENT_TYPES, Op, StandardEvent

SOURCE = "orders_db"
_OPS: dict[str, Op] = {"c": "c", "u": "u", "d": "d"}


def _build(
    obj: dict[str, Any], raw: bytes, topic: str, partition: int, offset: int, settings: AdapterSettings
) -> StandardEvent:
    op_value = require(obj.get("op"), ("op",))
    op = _OPS.get(op_value) if isinstance(op_value, str) else None
    if op is None:
        raise FieldError("op", f"expected one of 'c', 'u', 'd', got {describe(op_value)}")
    updated_at = require(obj.get("updated_at"), ("updated_at",))
    if not isinstance(updated_at, str):
        raise FieldError("updated_at", f"expected a local timestamp string, got {describe(updated_at)}")
    return StandardEvent(
        event_id=stable_id(SOURCE, obj),
        order_id=get_id(obj, ("order_id",), settings),
        user_id=get_id(obj, ("user_id",), settings),
        event_type=OP_EVENT_TYPES[op],
        event_time=parse_timestamp("updated_at", updated_at, naive_zone=zone(settings.source_zone)),
        amount=get_yuan(obj, ("amount",)),
        status=get_code(obj, ("status",), settings),
        address=get_text(obj, ("address",), settings),
        logistics_state=None,
        op=op,
        source=SOURCE,
        raw=raw,
        topic=topic,
        partition=partition,
        offset=offset,
    )


adapt = make_adapter(SOURCE, _build, "Adapt one order-database CDC record; never raises.")
