"""The speed layer's interpretation of ``lakestream.gold.METRICS`` (``GoldLatenessGate`` partials merged
by ``GoldWindowAggregate``, in a real Flink job) equals the gold oracle (``tests/support/gold_oracle.py``).

One bounded job over events covering what the floor and the filters must get right: times before
1970 and on window boundaries, a re-created order, null user and order ids, every kind, a window with
only other events, decimal edges (the largest gmv a window may hold, negative amounts), and ids split
over several parts so that the distinct counts meet the same value in different partials.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from lakestream.gold import (
    KIND_ORDER_CREATED,
    KIND_OTHER,
    KIND_PAYMENT,
    METRIC_NAMES,
    GoldSettings,
    from_us,
    to_us,
)
from tests.support.gold_oracle import Delivery, Kind, expected_gold

pytestmark = pytest.mark.integration
UTC = timezone.utc
NO_AMOUNT = -(2**63)
#: The operators' input codes of the oracle's kinds.
CODES: dict[Kind, int] = {"order_created": KIND_ORDER_CREATED, "payment": KIND_PAYMENT, "other": KIND_OTHER}


def _deliveries() -> list[Delivery]:
    t0 = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    ms = timedelta(milliseconds=1)
    spec: list[tuple[datetime, Kind, Decimal | None, str | None, str | None]] = [
        (t0, "order_created", Decimal("10.00"), "o1", "u1"),
        (t0 + timedelta(minutes=4, seconds=59, milliseconds=999), "order_created", None, "o1", "u1"),
        (t0 + timedelta(minutes=1), "payment", Decimal("9999999999999999.99"), "o1", None),
        (t0 + timedelta(minutes=2), "payment", Decimal("-0.01"), "o2", None),
        (t0 + timedelta(minutes=3), "order_created", None, "o2", "u2"),
        (t0 + timedelta(minutes=5), "other", Decimal("1.00"), "o3", "u2"),
        (t0 + timedelta(minutes=6), "payment", Decimal("0.01"), None, "u2"),
        (t0 + timedelta(minutes=7), "order_created", None, None, "u2"),
        (epoch - ms, "order_created", None, "o4", "u3"),
        (epoch - timedelta(minutes=5), "other", None, None, None),
        (epoch - timedelta(minutes=5) - ms, "payment", Decimal("2.50"), "o4", "u3"),
        (epoch, "other", None, None, "u4"),
    ]
    return [Delivery(f"e{i}", t, k, a, o, u) for i, (t, k, a, o, u) in enumerate(spec)]


def _part(events: list[Delivery]) -> Any:
    """A ``KeyedDedupEpochOperator.GOLD_EVENTS`` row of ``events``, none beyond the lateness."""
    from pyflink.common import Row

    return Row(
        [to_us(e.at) // 1000 for e in events],
        bytes(CODES[e.kind] for e in events),
        [NO_AMOUNT if e.amount is None else int(e.amount * 100) for e in events],
        [e.order_id for e in events],
        [e.user_id for e in events],
        [NO_AMOUNT for _ in events],  # Long.MIN_VALUE: no watermark at arrival
    )


def test_the_java_operators_equal_the_oracle(tmp_path: Path) -> None:
    from pyflink.common import Types
    from pyflink.datastream import DataStream
    from pyflink.java_gateway import get_gateway

    from lakestream.config import FlinkConfig
    from runtime.flink_env import build_env
    from udfs.ingest_gold import java_metrics

    settings = GoldSettings(window=timedelta(minutes=5), allowed_lateness=timedelta(minutes=10))
    events = _deliveries()
    env = build_env(FlinkConfig(parallelism=2), checkpoint_dir=str(tmp_path / "ckpt"))
    flink = get_gateway().jvm.io.lakestream.flink
    metrics = java_metrics()
    part_type = Types.ROW_NAMED(
        ["event_times", "kinds", "amounts", "order_ids", "user_ids", "arrival_watermarks"],
        [
            Types.PRIMITIVE_ARRAY(Types.LONG()),
            Types.PRIMITIVE_ARRAY(Types.BYTE()),
            Types.PRIMITIVE_ARRAY(Types.LONG()),
            Types.BASIC_ARRAY(Types.STRING()),
            Types.BASIC_ARRAY(Types.STRING()),
            Types.PRIMITIVE_ARRAY(Types.LONG()),
        ],
    )
    # Four parts, the same ids in several (o1, u2): the distinct counts meet them in different partials
    # (the gate flushes each part on its own with ``maxBuffered`` 1).
    slices = [events[0:2], events[2:5], events[5:9], events[9:]]
    parts = [_part(s) for s in slices]
    window_ms = settings.window // timedelta(milliseconds=1)
    lateness_ms = settings.allowed_lateness // timedelta(milliseconds=1)
    gate = flink.gold.GoldLatenessGate(window_ms, lateness_ms, flink.gold.GoldLatenessGate.NO_CUT, metrics, 1)
    source = env.from_collection(parts, type_info=part_type)
    j_partials = source._j_data_stream.transform("gate", flink.gold.GoldLatenessGate.PARTIAL_TYPE, gate)
    aggregate = flink.gold.GoldWindowAggregate(window_ms, lateness_ms, 3_600_000, metrics)
    j_rows = (
        j_partials.keyBy(flink.gold.GoldWindowAggregate.BY_WINDOW_START)
        .transform("aggregate", flink.gold.GoldWindowAggregate.outputType(metrics), aggregate)
        .setParallelism(1)
    )
    latest: dict[int, Any] = {}
    for row in DataStream(j_rows).execute_and_collect():
        latest[row[0]] = row  # the newest row per window wins
    got = []
    for start in sorted(latest):
        row = latest[start]
        out: dict[str, Any] = {
            "window_start": from_us(row[0] * 1000),
            "window_end": from_us(row[1] * 1000),
        }
        for i, name in enumerate(METRIC_NAMES):
            value = row[2 + i]
            out[name] = (Decimal(value) / 100).quantize(Decimal("0.01")) if name == "gmv" else value
        got.append(out)
    expected = expected_gold(events, settings.window)
    assert got == expected
    assert len(expected) == 5
