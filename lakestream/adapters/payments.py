"""``payments``: payment callbacks (``payId``, ``orderId``, ``payMoney`` in fen, ``paidAt`` epoch millis).

The amount becomes yuan (fen / 100, exact), the status is always ``paid``, and the id is
``payments:<payId>``, as ids must be unique across sources (DESIGN.md section 5).
"""

from __future__ import annotations

from typing import Any

from lakestream.adapters.parsing import (
    FieldError,
    get_fen_as_yuan,
    get_id,
    make_adapter,
    millis_to_utc,
)
from lakestream.adapters.settings import AdapterSettings
from lakestream.standard import PAYMENT, StandardEvent, _new_event

SOURCE = "payments"
PAID_STATUS = "paid"
_PAY_ID = ("payId",)
_ORDER_ID = ("orderId",)
_PAY_MONEY = ("payMoney",)


def _build(
    obj: dict[str, Any], raw: bytes, topic: str, partition: int, offset: int, settings: AdapterSettings
) -> StandardEvent:
    # Runs once per record: checks written out instead of ``require`` calls, ``_new_event`` (the
    # hot-path ``StandardEvent`` constructor) called positionally.
    pay_id = get_id(obj, _PAY_ID, settings)
    if pay_id is None:
        raise FieldError("payId", "missing (required)")
    paid_at = obj.get("paidAt")
    order_id = get_id(obj, _ORDER_ID, settings)
    if paid_at is None:
        raise FieldError("paidAt", "missing (required)")
    return _new_event(
        f"{SOURCE}:{pay_id}",  # event_id
        order_id,
        None,  # user_id
        PAYMENT,  # event_type
        millis_to_utc("paidAt", paid_at),  # event_time
        get_fen_as_yuan(obj, _PAY_MONEY),  # amount
        PAID_STATUS,  # status
        None,  # address
        None,  # logistics_state
        None,  # op
        SOURCE,
        raw,
        topic,
        partition,
        offset,
    )


adapt = make_adapter(SOURCE, _build, "Adapt one payment callback; never raises.")
