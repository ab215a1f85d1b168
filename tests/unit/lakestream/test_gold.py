"""The gold definition: window maths, the input rule, and the Arrow interpretation against the reference."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakestream.config import ConfigError
from lakestream.gold import (
    GOLD_INPUT_SCHEMA,
    GOLD_SCHEMA,
    KIND_ORDER_CREATED,
    KIND_OTHER,
    KIND_PAYMENT,
    MAX_AMOUNT,
    METRICS_SCHEMA,
    GmvOverflowError,
    GoldSettings,
    GoldTableError,
    WindowAlignmentError,
    aggregate,
    ensure_gold_table,
    from_us,
    gold_inputs,
    gold_rows,
    kind_array,
    kind_of,
    reference_aggregate,
    to_us,
    window_end_us,
    window_of,
    window_start_us,
    windows_of_range,
)
from lakestream.standard import StandardEvent, bronze_batch

UTC = timezone.utc
FIVE = GoldSettings()
T0 = datetime(2024, 6, 1, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# -- window maths -----------------------------------------------------------------------------------


def test_window_floor_before_and_after_1970() -> None:
    w = FIVE.window_us
    assert window_start_us(0, FIVE) == 0
    assert window_start_us(-1, FIVE) == -w
    assert window_start_us(-w, FIVE) == -w
    assert window_start_us(-w - 1, FIVE) == -2 * w
    assert window_start_us(w - 1, FIVE) == 0
    assert window_end_us(-1, FIVE) == 0
    assert window_of(T0 + timedelta(minutes=7, microseconds=1), FIVE) == (
        T0 + timedelta(minutes=5),
        T0 + timedelta(minutes=10),
    )


@given(st.integers(min_value=-(6 * 10**16), max_value=2 * 10**17), st.sampled_from([1, 5, 15, 60, 1440]))
def test_window_holds_its_time(t: int, minutes: int) -> None:
    s = GoldSettings(window=timedelta(minutes=minutes))
    start = window_start_us(t, s)
    assert start <= t < window_end_us(t, s) == start + s.window_us
    assert start % s.window_us == 0
    assert to_us(from_us(t)) == t


def test_windows_of_a_range_and_misaligned_bounds() -> None:
    starts = windows_of_range(T0, T0 + timedelta(minutes=15), FIVE)
    assert starts == [T0, T0 + timedelta(minutes=5), T0 + timedelta(minutes=10)]
    assert windows_of_range(EPOCH - timedelta(minutes=5), EPOCH, FIVE) == [EPOCH - timedelta(minutes=5)]
    with pytest.raises(WindowAlignmentError) as caught:
        windows_of_range(T0 + timedelta(minutes=3), T0 + timedelta(hours=1), FIVE, names=("--from", "--to"))
    assert "--from 2024-06-01T00:03:00Z" in str(caught.value)
    assert "2024-06-01T00:00:00Z and 2024-06-01T00:05:00Z" in str(caught.value)
    assert caught.value.nearest == (T0, T0 + timedelta(minutes=5))
    with pytest.raises(WindowAlignmentError, match="--to"):
        windows_of_range(T0, T0 + timedelta(seconds=1), FIVE, names=("--from", "--to"))
    with pytest.raises(ValueError, match="must be before"):
        windows_of_range(T0, T0, FIVE)


@pytest.mark.parametrize(
    "window", [timedelta(minutes=7), timedelta(seconds=90), timedelta(0), timedelta(days=2)]
)
def test_windows_that_do_not_tile_a_day_are_refused(window: timedelta) -> None:
    with pytest.raises(ConfigError, match="gold.window"):
        GoldSettings(window=window)


def test_negative_lateness_is_refused() -> None:
    with pytest.raises(ConfigError, match="gold.allowed_lateness"):
        GoldSettings(allowed_lateness=timedelta(seconds=-1))


# -- the input rule ---------------------------------------------------------------------------------


def test_kinds() -> None:
    assert kind_of("orders_db", "c") == KIND_ORDER_CREATED
    assert kind_of("orders_db", "u") == KIND_OTHER
    assert kind_of("orders_db", None) == KIND_OTHER
    assert kind_of("payments", None) == KIND_PAYMENT
    assert kind_of("logistics", "c") == KIND_OTHER
    sources = ["orders_db", "orders_db", "orders_db", "payments", "behaviour", "logistics"]
    ops = ["c", "u", None, None, "c", None]
    assert kind_array(pa.array(sources), pa.array(ops, pa.string())).to_pylist() == [
        kind_of(s, o) for s, o in zip(sources, ops, strict=True)
    ]


def _event(i: int, event_id: str, source: str, op: str | None, quality: str, minute: int) -> StandardEvent:
    return StandardEvent(
        event_id=event_id,
        order_id=f"o{i % 3}",
        user_id=None if i % 4 == 0 else f"u{i % 5}",
        event_type="order_created" if op == "c" else "payment",
        event_time=T0 + timedelta(minutes=minute),
        amount=Decimal(i) / 100,
        status=None,
        address=None,
        logistics_state=None,
        op=op,  # type: ignore[arg-type]
        source=source,
        raw=b"{}",
        topic=f"t.{source}",
        partition=i % 2,
        offset=i,
        quality=quality,  # type: ignore[arg-type]
    )


EVENTS = st.lists(
    st.tuples(
        st.integers(0, 5),  # event id (small: duplicates)
        st.sampled_from([("orders_db", "c"), ("orders_db", "u"), ("payments", None), ("behaviour", None)]),
        st.sampled_from(["VALID", "VALID", "SUSPICIOUS", "INVALID"]),
        st.integers(-3, 20),  # minute
    ),
    max_size=25,
)


def _python_inputs(events: list[StandardEvent]) -> list[dict[str, Any]]:
    """The input rule row by row: VALID only, each id's first delivery, kind by ``kind_of``."""
    seen: set[str] = set()
    out = []
    for e in events:
        if e.quality != "VALID" or e.event_id in seen:
            continue
        seen.add(e.event_id)
        out.append(
            {
                "event_time": e.event_time,
                "kind": kind_of(e.source, e.op),
                "amount": e.amount,
                "order_id": e.order_id,
                "user_id": e.user_id,
            }
        )
    return out


@given(EVENTS)
def test_gold_inputs_of_events_and_of_bronze_follow_one_rule(spec: list[tuple[Any, ...]]) -> None:
    events = [_event(i, f"e{eid}", src, op, q, m) for i, (eid, (src, op), q, m) in enumerate(spec)]
    expected = _python_inputs(events)
    assert gold_inputs(events).to_pylist() == expected
    # Bronze in another physical order: the delivery order (ingest time, Kafka coordinates) decides.
    ingest = [T0 + timedelta(hours=1, seconds=i) for i in range(len(events))]
    bronze = pa.Table.from_batches([bronze_batch(events, ingest_time=ingest)]) if events else None
    if bronze is not None:
        shuffled = bronze.take(list(reversed(range(bronze.num_rows))))
        assert gold_inputs(shuffled).to_pylist() == expected
        assert gold_inputs(shuffled).schema == GOLD_INPUT_SCHEMA


def test_first_delivery_wins_by_ingest_time_then_offset() -> None:
    a = _event(1, "payments:P1", "payments", None, "VALID", 1)
    b = _event(3, "payments:P1", "payments", None, "VALID", 9)  # a re-delivery, same partition, later offset
    late, early = T0 + timedelta(hours=2), T0 + timedelta(hours=1)
    bronze = pa.Table.from_batches([bronze_batch([a, b], ingest_time=[late, early])])
    (row,) = gold_inputs(bronze).to_pylist()
    assert row["event_time"] == b.event_time
    same = pa.Table.from_batches([bronze_batch([b, a], ingest_time=early)])  # same batch: lower offset
    (row,) = gold_inputs(same).to_pylist()
    assert row["event_time"] == a.event_time


def test_gold_inputs_refuses_rows_without_the_bronze_columns() -> None:
    with pytest.raises(ValueError, match="ingest_time"):
        gold_inputs(pa.table({"event_id": ["a"]}))


# -- Arrow == reference ------------------------------------------------------------------------------

AMOUNTS = st.one_of(
    st.none(),
    st.sampled_from([Decimal("0.00"), Decimal("0.01"), Decimal("-0.01"), MAX_AMOUNT, -MAX_AMOUNT]),
    st.decimals(min_value=-1000, max_value=1000, places=2, allow_nan=False, allow_infinity=False),
)
ROWS = st.lists(
    st.fixed_dictionaries(
        {
            # around 1970 and around T0, with microseconds on and next to window boundaries
            "event_time": st.one_of(
                st.integers(-3 * FIVE.window_us, 3 * FIVE.window_us).map(from_us),
                st.integers(0, 4 * FIVE.window_us).map(lambda us: T0 + timedelta(microseconds=us)),
            ),
            "kind": st.sampled_from([KIND_OTHER, KIND_ORDER_CREATED, KIND_PAYMENT]),
            "amount": AMOUNTS,
            "order_id": st.one_of(st.none(), st.sampled_from(["o1", "o2", "o3"])),
            "user_id": st.one_of(st.none(), st.sampled_from(["u1", "u2"])),
        }
    ),
    max_size=40,
)


def _both(rows: list[dict[str, Any]], over: tuple[datetime, datetime] | None) -> tuple[Any, Any]:
    table = pa.Table.from_pylist(rows, schema=GOLD_INPUT_SCHEMA)
    try:
        got: Any = aggregate(table, FIVE, over=over).to_pylist()
    except GmvOverflowError:
        got = GmvOverflowError
    try:
        want: Any = reference_aggregate(rows, FIVE, over=over)
    except GmvOverflowError:
        want = GmvOverflowError
    return got, want


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(ROWS)
def test_aggregate_equals_the_reference(rows: list[dict[str, Any]]) -> None:
    got, want = _both(rows, None)
    assert got == want


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(ROWS, st.integers(-4, 2), st.integers(1, 8))
def test_aggregate_over_a_range_has_every_window(rows: list[dict[str, Any]], first: int, n: int) -> None:
    start = EPOCH + first * FIVE.window
    over = (start, start + n * FIVE.window)
    got, want = _both(rows, over)
    assert got == want
    if got is not GmvOverflowError:
        assert [r["window_start"] for r in got] == windows_of_range(*over, FIVE)


def test_re_created_order_counts_once_and_empty_windows_are_zero() -> None:
    rows = [
        {"event_time": T0, "kind": KIND_ORDER_CREATED, "amount": None, "order_id": "o1", "user_id": "u1"},
        {
            "event_time": T0 + timedelta(minutes=2),
            "kind": KIND_ORDER_CREATED,
            "amount": None,
            "order_id": "o1",
            "user_id": None,
        },
        {
            "event_time": T0 + timedelta(minutes=3),
            "kind": KIND_PAYMENT,
            "amount": Decimal("12.34"),
            "order_id": "o1",
            "user_id": None,
        },
    ]
    table = aggregate(
        pa.Table.from_pylist(rows, schema=GOLD_INPUT_SCHEMA), FIVE, over=(T0, T0 + timedelta(minutes=10))
    )
    assert table.schema == METRICS_SCHEMA
    assert table.to_pylist() == [
        {
            "window_start": T0,
            "window_end": T0 + timedelta(minutes=5),
            "events": 3,
            "orders_created": 1,
            "payments": 1,
            "gmv": Decimal("12.34"),
            "active_users": 1,
        },
        {
            "window_start": T0 + timedelta(minutes=5),
            "window_end": T0 + timedelta(minutes=10),
            "events": 0,
            "orders_created": 0,
            "payments": 0,
            "gmv": Decimal("0.00"),
            "active_users": 0,
        },
    ]


def test_gmv_overflow_is_an_error_naming_the_column() -> None:
    rows = [
        {"event_time": T0, "kind": KIND_PAYMENT, "amount": MAX_AMOUNT, "order_id": None, "user_id": None}
    ] * 2
    with pytest.raises(GmvOverflowError, match="gmv"):
        aggregate(pa.Table.from_pylist(rows, schema=GOLD_INPUT_SCHEMA), FIVE)
    with pytest.raises(GmvOverflowError, match="gmv"):
        reference_aggregate(rows, FIVE)


# -- the table ---------------------------------------------------------------------------------------


def test_gold_table_is_created_once_and_checked(tmp_path: Any) -> None:
    uri = str(tmp_path / "gold")
    dt = ensure_gold_table(uri)
    assert dt.schema().to_arrow() == pa.schema(GOLD_SCHEMA) or dt.version() == 0
    assert ensure_gold_table(uri).version() == 0
    rows = gold_rows(
        aggregate(pa.Table.from_pylist([], schema=GOLD_INPUT_SCHEMA), FIVE, over=(T0, T0 + FIVE.window)),
        layer="batch",
        data_time=T0,
        source_version=3,
        updated_at=T0,
    )
    assert rows.schema == GOLD_SCHEMA and rows.num_rows == 1
    from deltalake import write_deltalake

    other = str(tmp_path / "other")
    write_deltalake(other, pa.table({"window_start": [1]}))
    with pytest.raises(GoldTableError, match="move it aside"):
        ensure_gold_table(other)
