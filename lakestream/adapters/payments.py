"""``payments``: payment callbacks (``payId``, ``orderId``, ``payMoney`` in fen, ``paidAt`` epoch millis).

The amount becomes yuan (fen / 100, exact). The id is the provider's ``payId`` prefixed with the source
name (``payments:<payId>``): ids must be unique across sources because de-duplication and silver
``__eid`` columns mix all sources; the bare ``payId`` is still in ``raw``. A payment always sets status
``paid``.
"""

from __future__ import annotations

from typing import Any

from lakestream.adapters.parsing import (
    get_fen_as_yuan,
    get_id,
    make_adapter,
    millis_to_utc,
    require,
)
from lakestream.adapters.settings import AdapterSettings
from lakestream.standard import PAYMENT, StandardEvent

SOURCE = "payments"
PAID_STATUS = "paid"


def _build(
    obj: dict[str, Any], raw: bytes, topic: str, partition: int, offset: int, settings: AdapterSettings
) -> StandardEvent:
    pay_id = require(get_id(obj, ("payId",), settings), ("payId",))
    return StandardEvent(
        event_id=f"{SOURCE}:{pay_id}",
        order_id=get_id(obj, ("orderId",), settings),
        user_id=None,
        event_type=PAYMENT,
        event_time=millis_to_utc("paidAt", require(obj.get("paidAt"), ("paidAt",))),
        amount=get_fen_as_yuan(obj, ("payMoney",)),
        status=PAID_STATUS,
        address=None,
        logistics_state=None,
        op=None,
        source=SOURCE,
        raw=raw,
        topic=topic,
        partition=partition,
        offset=offset,
    )


adapt = make_adapter(SOURCE, _build, "Adapt one payment callback; never raises.")
