"""The gold oracle: hand-computed cases, and agreement with ``lakestream.gold`` on random deliveries.

The integration tests take their gold expectations from ``tests/support/gold_oracle.py``; here it is
held to numbers written out by hand and, both ways, to the product's input rule and its two
interpretations (``aggregate`` and ``reference_aggregate``), times before 1970 and on boundaries,
re-deliveries, other qualities, null ids and amounts, refunds and empty windows included.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakestream.gold import GmvOverflowError, GoldSettings, aggregate, gold_inputs, reference_aggregate
from lakestream.standard import BRONZE_SCHEMA, StandardEvent, bronze_batch
from tests.support.gold_oracle import (
    LARGEST_GMV,
    METRIC_NAMES,
    Delivery,
    bronze_deliveries,
    expected_gold,
    kind,
    window_start,
)

UTC = timezone.utc
T0 = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DAY = datetime(2024, 6, 1, tzinfo=UTC)  # a boundary of every window length
MIN = timedelta(minutes=1)


def row(start: datetime, events: int, orders: int, payments: int, gmv: str, users: int) -> dict[str, Any]:
    return {
        "window_start": start,
        "window_end": start + timedelta(minutes=5),
        "events": events,
        "orders_created": orders,
        "payments": payments,
        "gmv": Decimal(gmv),
        "active_users": users,
    }


def test_kinds() -> None:
    assert kind("orders_db", "c") == "order_created"
    assert kind("orders_db", "u") == "other" and kind("orders_db", None) == "other"
    assert kind("payments", None) == "payment" and kind("payments", "c") == "payment"
    assert kind("behaviour", "c") == "other" and kind("logistics", None) == "other"


def test_metrics_by_hand() -> None:
    deliveries = [
        Delivery("e1", T0, "order_created", Decimal("10.00"), "o1", "u1"),
        Delivery("e2", T0 + 5 * MIN - timedelta(microseconds=1), "order_created", None, "o1", "u2"),
        Delivery("e3", T0 + MIN, "payment", Decimal("12.34"), "o1"),
        Delivery("e4", T0 + 2 * MIN, "payment", Decimal("-2.50"), "o2"),  # a refund
        Delivery("e5", T0 + 3 * MIN, "payment", None, "o2"),
        Delivery("e3", T0 + 6 * MIN, "payment", Decimal("99.99"), "o1"),  # a re-delivery: not again
        Delivery("e6", T0 + 2 * MIN, "other", user_id="u9", valid=False),
        Delivery("e7", T0 + 2 * MIN, "other", user_id="u8", valid=False),  # its VALID delivery counts
        Delivery("e7", T0 + 7 * MIN, "other", user_id="u4"),
        Delivery("e8", T0 + 5 * MIN, "other", Decimal("5.00"), "o3", "u3"),  # on the boundary
        Delivery("e9", T0 + 9 * MIN, "order_created", None, None, "u3"),  # no order id
    ]
    assert expected_gold(deliveries) == [
        row(T0, 5, 1, 3, "9.84", 2),
        row(T0 + 5 * MIN, 3, 0, 0, "0.00", 2),
    ]
    assert str(expected_gold(deliveries)[0]["gmv"]) == "9.84"
    assert list(expected_gold(deliveries)[0]) == ["window_start", "window_end", *METRIC_NAMES]


def test_windows_by_hand() -> None:
    assert window_start(EPOCH) == EPOCH
    assert window_start(EPOCH - timedelta(microseconds=1)) == datetime(1969, 12, 31, 23, 55, tzinfo=UTC)
    assert window_start(EPOCH - 5 * MIN) == datetime(1969, 12, 31, 23, 55, tzinfo=UTC)
    assert window_start(T0 + 5 * MIN - timedelta(microseconds=1)) == T0
    shanghai = datetime(2024, 6, 1, 12, 3, tzinfo=timezone(timedelta(hours=8)))
    assert window_start(shanghai) == T0
    assert window_start(datetime(2024, 6, 1, 0, 59, tzinfo=UTC), timedelta(hours=1)) == T0 - 4 * 60 * MIN
    assert window_start(T0 + 59 * MIN, timedelta(minutes=15)) == T0 + 45 * MIN
    assert window_start(T0, timedelta(days=1)) == datetime(2024, 6, 1, tzinfo=UTC)
    [only] = expected_gold([Delivery("e", EPOCH - timedelta(microseconds=1), "other")], timedelta(hours=1))
    assert (only["window_start"], only["window_end"]) == (EPOCH - 60 * MIN, EPOCH)


def test_a_range_has_every_window_and_nothing_outside() -> None:
    deliveries = [
        Delivery("before", T0 - 5 * MIN - timedelta(seconds=1), "payment", Decimal("1.00"), "o1"),
        Delivery("in", T0, "payment", Decimal("2.00"), "o1", "u1"),
        Delivery("after", T0 + 15 * MIN, "payment", Decimal("4.00"), "o1"),
    ]
    assert expected_gold(deliveries, over=(T0 - 5 * MIN, T0 + 15 * MIN)) == [
        row(T0 - 5 * MIN, 0, 0, 0, "0.00", 0),
        row(T0, 1, 0, 1, "2.00", 1),
        row(T0 + 5 * MIN, 0, 0, 0, "0.00", 0),
        row(T0 + 10 * MIN, 0, 0, 0, "0.00", 0),
    ]
    assert expected_gold([]) == []


def test_bronze_rows_are_deliveries_in_arrival_order() -> None:
    def bronze(offset: int, ingest: datetime, at: datetime, quality: str = "VALID") -> dict[str, Any]:
        return {
            "event_id": "payments:P1",
            "event_time": at,
            "source": "payments",
            "op": None,
            "amount": Decimal("1.50"),
            "order_id": "o1",
            "user_id": None,
            "quality": quality,
            "topic": "payments.topic",
            "partition": 0,
            "offset": offset,
            "ingest_time": ingest,
        }

    later, earlier = T0 + 60 * MIN, T0 + 30 * MIN
    rows = [bronze(1, later, T0), bronze(9, earlier, T0 + 5 * MIN), bronze(3, earlier, T0 + 10 * MIN)]
    delivered = bronze_deliveries(rows)
    assert [d.at for d in delivered] == [T0 + 10 * MIN, T0 + 5 * MIN, T0]
    assert delivered[0] == Delivery("payments:P1", T0 + 10 * MIN, "payment", Decimal("1.50"), "o1")
    assert [r["window_start"] for r in expected_gold(delivered)] == [T0 + 10 * MIN]
    assert not bronze_deliveries([bronze(1, T0, T0, "SUSPICIOUS")])[0].valid


def test_refusals() -> None:
    with pytest.raises(ValueError, match="whole windows"):
        expected_gold([], over=(T0 + MIN, T0 + 10 * MIN))
    with pytest.raises(ValueError, match="whole windows"):
        expected_gold([], over=(T0, T0))
    with pytest.raises(ValueError, match="divide a day"):
        expected_gold([], timedelta(minutes=7))
    with pytest.raises(ValueError, match="no offset"):
        window_start(datetime(2024, 6, 1))
    big = [Delivery(f"p{i}", T0, "payment", LARGEST_GMV) for i in range(2)]
    with pytest.raises(OverflowError, match="gmv"):
        expected_gold(big)
    assert expected_gold(big[:1])[0]["gmv"] == LARGEST_GMV


# -- held to lakestream.gold --------------------------------------------------------------------------

SOURCES = [
    *[("orders_db", "c")] * 3,
    ("orders_db", "u"),
    ("orders_db", "d"),
    *[("payments", None)] * 3,
    ("behaviour", None),
    ("logistics", None),
]
AMOUNTS = st.one_of(
    st.none(),
    st.sampled_from([Decimal("0.00"), Decimal("-0.01"), LARGEST_GMV, -LARGEST_GMV]),
    st.decimals(min_value=-1000, max_value=1000, places=2, allow_nan=False, allow_infinity=False),
)
#: A few moments per example (on window boundaries around 1970 and T0, or anywhere in four days); each
#: delivery lies minutes from one of them, on or next to a boundary, so that events share windows.
MOMENTS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from([EPOCH, DAY, T0]), st.integers(-60, 60)).map(lambda t: t[0] + t[1] * MIN),
        st.integers(-2 * 86_400 * 10**6, 2 * 86_400 * 10**6).map(lambda us: T0 + timedelta(microseconds=us)),
    ),
    min_size=1,
    max_size=2,
)
DELIVERY = st.tuples(
    st.integers(0, 12),  # event id (few: re-deliveries, some with other content)
    st.sampled_from(SOURCES),
    st.sampled_from(["VALID", "VALID", "VALID", "VALID", "SUSPICIOUS", "INVALID"]),
    st.tuples(
        st.integers(0, 1),  # the moment
        st.integers(-2, 2),  # minutes from it
        st.sampled_from([-1, 0, 1]),  # microseconds
        st.sampled_from([0, 8 * 60, -(3 * 60 + 30)]),  # the offset the time is written with (minutes)
    ),
    AMOUNTS,
    st.one_of(st.none(), st.sampled_from(["o1", "o2"])),
    st.one_of(st.none(), st.sampled_from(["u1", "u2", "u3"])),
)

DELIVERY_LISTS = st.lists(DELIVERY, min_size=3, max_size=40)  # several: windows shared more often


@st.composite
def deliveries(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """(event id, (source, op), quality, time, amount, order id, user id) per delivery, in order."""
    moments = draw(MOMENTS)
    out = []
    for eid, source, quality, (m, minutes, us, offset), *rest in draw(DELIVERY_LISTS):
        at = moments[m % len(moments)] + minutes * MIN + timedelta(microseconds=us)
        out.append((eid, source, quality, at.astimezone(timezone(offset * MIN)), *rest))
    return out


def _standard(i: int, spec: tuple[Any, ...]) -> StandardEvent:
    eid, (source, op), quality, at, amount, order_id, user_id = spec
    return StandardEvent(
        event_id=f"e{eid}",
        order_id=order_id,
        user_id=user_id,
        event_type="order_created" if op == "c" else "other",
        event_time=at,
        amount=amount,
        status=None,
        address=None,
        logistics_state=None,
        op=op,
        source=source,
        raw=b"{}",
        topic="t",  # one partition: the offsets are the delivery order
        partition=0,
        offset=i,
        quality=quality,
    )


def _delivery(spec: tuple[Any, ...]) -> Delivery:
    eid, (source, op), quality, at, amount, order_id, user_id = spec
    return Delivery(f"e{eid}", at, kind(source, op), amount, order_id, user_id, valid=quality == "VALID")


def _or_overflow(compute: Any) -> Any:
    try:
        return compute()
    except (GmvOverflowError, OverflowError):
        return "overflow"


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    deliveries(),
    st.sampled_from([1, 5, 15, 60, 1440]),
    st.one_of(st.none(), st.tuples(st.sampled_from([EPOCH, DAY]), st.integers(-3, 2), st.integers(1, 6))),
)
def test_the_oracle_agrees_with_the_gold_definition(
    specs: list[tuple[Any, ...]], minutes: int, range_spec: tuple[datetime, int, int] | None
) -> None:
    gold = GoldSettings(window=timedelta(minutes=minutes))
    over = None
    if range_spec is not None:
        anchor, first, n = range_spec
        over = (anchor + first * gold.window, anchor + (first + n) * gold.window)
    events = [_standard(i, s) for i, s in enumerate(specs)]
    want = _or_overflow(lambda: expected_gold([_delivery(s) for s in specs], gold.window, over=over))
    # The input rule on the events in delivery order, and on their bronze rows (one ingest per event).
    inputs = gold_inputs(events)
    if events:  # bronze in another physical order: one batch, so the offsets decide
        bronze = pa.Table.from_batches([bronze_batch(events, ingest_time=T0)]).to_pylist()[::-1]
        assert gold_inputs(pa.Table.from_pylist(bronze, BRONZE_SCHEMA)).to_pylist() == inputs.to_pylist()
        assert _or_overflow(lambda: expected_gold(bronze_deliveries(bronze), gold.window, over=over)) == want
    assert _or_overflow(lambda: reference_aggregate(inputs.to_pylist(), gold, over=over)) == want
    assert _or_overflow(lambda: aggregate(inputs, gold, over=over).to_pylist()) == want
