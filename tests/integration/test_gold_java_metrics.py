"""The speed layer's interpretation of ``lakestream.gold.METRICS`` (``GoldLatenessGate`` partials merged
by ``GoldWindowAggregate``, in a real Flink job) equals the Python reference.

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
    reference_aggregate,
    to_us,
)

pytestmark = pytest.mark.integration
UTC = timezone.utc
NO_AMOUNT = -(2**63)


def _rows() -> list[dict[str, Any]]:
    t0 = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    ms = timedelta(milliseconds=1)
    spec = [
        (t0, KIND_ORDER_CREATED, Decimal("10.00"), "o1", "u1"),
        (t0 + timedelta(minutes=4, seconds=59, milliseconds=999), KIND_ORDER_CREATED, None, "o1", "u1"),
        (t0 + timedelta(minutes=1), KIND_PAYMENT, Decimal("9999999999999999.99"), "o1", None),
        (t0 + timedelta(minutes=2), KIND_PAYMENT, Decimal("-0.01"), "o2", None),
        (t0 + timedelta(minutes=3), KIND_ORDER_CREATED, None, "o2", "u2"),
        (t0 + timedelta(minutes=5), KIND_OTHER, Decimal("1.00"), "o3", "u2"),
        (t0 + timedelta(minutes=6), KIND_PAYMENT, Decimal("0.01"), None, "u2"),
        (t0 + timedelta(minutes=7), KIND_ORDER_CREATED, None, None, "u2"),
        (epoch - ms, KIND_ORDER_CREATED, None, "o4", "u3"),
        (epoch - timedelta(minutes=5), KIND_OTHER, None, None, None),
        (epoch - timedelta(minutes=5) - ms, KIND_PAYMENT, Decimal("2.50"), "o4", "u3"),
        (epoch, KIND_OTHER, None, None, "u4"),
    ]
    return [{"event_time": t, "kind": k, "amount": a, "order_id": o, "user_id": u} for t, k, a, o, u in spec]


def _part(rows: list[dict[str, Any]]) -> Any:
    """A ``KeyedDedupEpochOperator.GOLD_EVENTS`` row of ``rows``, none beyond the lateness."""
    from pyflink.common import Row

    return Row(
        [to_us(r["event_time"]) // 1000 for r in rows],
        bytes(r["kind"] for r in rows),
        [NO_AMOUNT if r["amount"] is None else int(r["amount"] * 100) for r in rows],
        [r["order_id"] for r in rows],
        [r["user_id"] for r in rows],
        [NO_AMOUNT for _ in rows],  # Long.MIN_VALUE: no watermark at arrival
    )


def test_the_java_operators_equal_the_reference(tmp_path: Path) -> None:
    from pyflink.common import Types
    from pyflink.datastream import DataStream
    from pyflink.java_gateway import get_gateway

    from lakestream.config import FlinkConfig
    from runtime.flink_env import build_env
    from udfs.ingest_gold import java_metrics

    settings = GoldSettings(window=timedelta(minutes=5), allowed_lateness=timedelta(minutes=10))
    rows = _rows()
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
    slices = [rows[0:2], rows[2:5], rows[5:9], rows[9:]]
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
    expected = reference_aggregate(rows, settings)
    assert got == expected
    assert len(expected) == 5
