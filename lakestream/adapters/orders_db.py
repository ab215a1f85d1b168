"""``orders_db``: CDC rows of the order database (``op`` c/u/d, local wall-clock ``updated_at``).

Payload: ``op``, ``order_id``, ``user_id``, ``amount`` (yuan, decimal string or number), ``status``,
``address``, ``updated_at`` (``"2024-06-01 12:00:00"``, the wall clock of ``AdapterSettings.source_zone``,
converted to UTC). The feed has no event id, so the id is a hash of the canonical payload (DESIGN.md
section 5).
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
    stable_id,
)
from lakestream.adapters.settings import AdapterSettings, zone
from lakestream.standard import OP_EVENT_TYPES, Op, StandardEvent, _new_event

SOURCE = "orders_db"
_OPS: dict[str, Op] = {"c": "c", "u": "u", "d": "d"}
_ORDER_ID = ("order_id",)
_USER_ID = ("user_id",)
_AMOUNT = ("amount",)
_STATUS = ("status",)
_ADDRESS = ("address",)


def _build(
    obj: dict[str, Any], raw: bytes, topic: str, partition: int, offset: int, settings: AdapterSettings
) -> StandardEvent:
    # Runs once per record: checks written out instead of ``require`` calls, ``_new_event`` (the
    # hot-path ``StandardEvent`` constructor) called positionally.
    op_value = obj.get("op")
    if op_value is None:
        raise FieldError("op", "missing (required)")
    op = _OPS.get(op_value) if isinstance(op_value, str) else None
    if op is None:
        raise FieldError("op", f"expected one of 'c', 'u', 'd', got {describe(op_value)}")
    updated_at = obj.get("updated_at")
    if updated_at is None:
        raise FieldError("updated_at", "missing (required)")
    if not isinstance(updated_at, str):
        raise FieldError("updated_at", f"expected a local timestamp string, got {describe(updated_at)}")
    return _new_event(
        stable_id(SOURCE, obj),  # event_id
        get_id(obj, _ORDER_ID, settings),  # order_id
        get_id(obj, _USER_ID, settings),  # user_id
        OP_EVENT_TYPES[op],  # event_type
        parse_timestamp("updated_at", updated_at, naive_zone=zone(settings.source_zone)),  # event_time
        get_yuan(obj, _AMOUNT),  # amount
        get_code(obj, _STATUS, settings),  # status
        get_text(obj, _ADDRESS, settings),  # address
        None,  # logistics_state
        op,
        SOURCE,
        raw,
        topic,
        partition,
        offset,
    )


adapt = make_adapter(SOURCE, _build, "Adapt one order-database CDC record; never raises.")
