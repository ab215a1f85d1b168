"""``explain_window``: what a window counted, what it left out, and what the speed layer dropped.

The figures are held to the gold oracle (``tests/support/gold_oracle.py``, apart from ``lakestream.gold``).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa

from lakestream.explain_window import explain_window
from lakestream.gold import GoldSettings
from lakestream.standard import LATE_SCHEMA, StandardEvent, bronze_batch
from tests.support.gold_oracle import Delivery, expected_gold, kind

UTC = timezone.utc
T0 = datetime(2024, 6, 1, 4, 5, tzinfo=UTC)
SETTINGS = GoldSettings(window=timedelta(minutes=5), allowed_lateness=timedelta(minutes=10))


def _event(
    offset: int, event_id: str, source: str, op: str | None, second: int, quality: str = "VALID"
) -> StandardEvent:
    return StandardEvent(
        event_id=event_id,
        order_id=f"o{offset % 2}",
        user_id=f"u{offset % 3}",
        event_type="order_created" if op == "c" else "payment" if source == "payments" else "behaviour:view",
        event_time=T0 + timedelta(seconds=second),
        amount=Decimal("1.50") if source == "payments" else None,
        status=None,
        address=None,
        logistics_state=None,
        op=op,  # type: ignore[arg-type]
        source=source,
        raw=b"{}",
        topic=f"t.{source}",
        partition=0,
        offset=offset,
        quality=quality,  # type: ignore[arg-type]
    )


def test_counts_left_outs_and_the_speed_layers_figures() -> None:
    created = _event(0, "e0", "orders_db", "c", 10)
    paid = _event(1, "e1", "payments", None, 20)
    again = _event(2, "e1", "payments", None, 20)  # a re-delivery
    view = _event(3, "e3", "behaviour", None, 30)
    bad = _event(4, "e4", "payments", None, 40, quality="INVALID")
    too_late = _event(5, "e5", "payments", None, 50)  # arrived when the watermark was 04:25
    allowed = _event(6, "e6", "orders_db", "c", 60)  # late, but its watermark 04:19 is within lateness
    events = [created, paid, again, view, bad, too_late, allowed]
    bronze = pa.Table.from_batches([bronze_batch(events, ingest_time=T0 + timedelta(hours=1))])
    late_events = bronze_batch([too_late, allowed], ingest_time=T0 + timedelta(hours=1))
    watermarks = [T0 + timedelta(minutes=20), T0 + timedelta(minutes=14)]
    late = pa.Table.from_batches([late_events]).append_column(
        "watermark", pa.array(watermarks, LATE_SCHEMA.field("watermark").type)
    )
    out = explain_window(T0, T0 + timedelta(minutes=5), bronze, late, SETTINGS)

    def oracle(kept: list[StandardEvent]) -> dict[str, object]:
        deliveries = [
            Delivery(e.event_id, e.event_time, kind(e.source, e.op), e.amount, e.order_id, e.user_id)
            for e in kept
        ]
        (row,) = expected_gold(deliveries, over=(T0, T0 + timedelta(minutes=5)))
        return {k: v for k, v in row.items() if k not in ("window_start", "window_end")}

    counted = [created, paid, view, too_late, allowed]
    assert out.recomputed == oracle(counted)
    assert out.speed_layer == oracle([created, paid, view, allowed])
    assert out.counted == {"order_created": 2, "payment": 2, "other": 1}
    assert [(d.event_id, d.offset) for d in out.duplicates] == [("e1", 2)]
    assert "t.payments/0@1 is counted" in out.duplicates[0].reason
    assert [(n.event_id, n.reason.split(":")[0]) for n in out.not_valid] == [("e4", "tagged INVALID")]
    assert [(e.event_id, e.lateness_s) for e in out.beyond_lateness] == [("e5", 20 * 60 - 50)]
    assert out.bronze_rows == 7
