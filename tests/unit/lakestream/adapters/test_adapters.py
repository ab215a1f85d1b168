from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakestream.adapters import (
    ADAPTERS,
    AdapterSettings,
    AdapterSettingsError,
    UnknownAdapterError,
    get_adapter,
)
from lakestream.standard import Rejected, StandardEvent
from tests.support import json_strategies
from tests.support.adapter_samples import BEHAVIOUR, LOGISTICS, ORDER, PAYMENT

UTC = timezone.utc
COORDS: dict[str, Any] = {"topic": "t", "partition": 3, "offset": 42}


def run(source: str, payload: Any, **kwargs: Any) -> StandardEvent | Rejected:
    value = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return get_adapter(source)(value, **COORDS, **kwargs)


def ok(source: str, payload: Any, **kwargs: Any) -> StandardEvent:
    result = run(source, payload, **kwargs)
    assert isinstance(result, StandardEvent), result
    return result


def rejected(source: str, payload: Any, **kwargs: Any) -> str:
    result = run(source, payload, **kwargs)
    assert isinstance(result, Rejected), result
    assert result.source == source
    assert (result.topic, result.partition, result.offset) == ("t", 3, 42)
    assert result.stage == "adapter"
    assert "adapter error" not in result.reason
    return result.reason


# --- registry -------------------------------------------------------------------------------------------


def test_registry_has_every_source() -> None:
    assert set(ADAPTERS) == {"orders_db", "payments", "logistics", "behaviour"}


def test_unknown_adapter_lists_known_names() -> None:
    with pytest.raises(UnknownAdapterError) as info:
        get_adapter("crm")
    message = str(info.value)
    assert "'crm'" in message
    for name in ADAPTERS:
        assert name in message


def test_settings_validate_zone_and_limits() -> None:
    with pytest.raises(AdapterSettingsError, match="source_zone: unknown time zone 'Mars/Olympus'"):
        AdapterSettings(source_zone="Mars/Olympus")
    with pytest.raises(AdapterSettingsError, match="logistics_naive_zone"):
        AdapterSettings(logistics_naive_zone="nowhere")
    with pytest.raises(AdapterSettingsError, match="max_payload_bytes: must be a positive integer"):
        AdapterSettings(max_payload_bytes=0)


# --- orders_db ------------------------------------------------------------------------------------------


def test_orders_db_create_is_converted_from_shanghai_to_utc() -> None:
    e = ok("orders_db", ORDER)
    assert e.event_time == datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
    assert e.event_time.utcoffset() == timedelta(0)
    assert (e.order_id, e.user_id, e.status, e.address) == ("1001", "u1", "created", "Chaoyang")
    assert e.amount is not None and e.amount.as_tuple().exponent == -2 and e.amount == Decimal("99.00")
    assert (e.event_type, e.op, e.source) == ("order_created", "c", "orders_db")
    assert (e.topic, e.partition, e.offset) == ("t", 3, 42)
    assert e.raw == json.dumps(ORDER).encode()
    assert e.quality == "VALID" and e.quality_reason is None


def test_orders_db_source_zone_is_configurable() -> None:
    e = ok("orders_db", ORDER, settings=AdapterSettings(source_zone="UTC"))
    assert e.event_time == datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
    berlin = ok("orders_db", ORDER, settings=AdapterSettings(source_zone="Europe/Berlin"))
    assert berlin.event_time == datetime(2024, 6, 1, 10, 0, tzinfo=UTC)  # CEST = UTC+2


@pytest.mark.parametrize(
    ("op", "etype"), [("c", "order_created"), ("u", "order_updated"), ("d", "order_deleted")]
)
def test_orders_db_event_type_follows_op(op: str, etype: str) -> None:
    e = ok("orders_db", {**ORDER, "op": op})
    assert (e.op, e.event_type) == (op, etype)


def test_orders_db_event_id_is_a_stable_hash_of_the_canonical_payload() -> None:
    a = ok("orders_db", ORDER)
    reordered = json.dumps(dict(reversed(list(ORDER.items()))), indent=2).encode()
    b = ok("orders_db", reordered)
    assert a.event_id == b.event_id
    assert a.event_id.startswith("orders_db:") and len(a.event_id) == len("orders_db:") + 32
    c = ok("orders_db", {**ORDER, "address": "Haidian"})
    assert c.event_id != a.event_id


def test_orders_db_accepts_numbers_numeric_ids_fractions_and_offsets() -> None:
    e = ok(
        "orders_db",
        {
            **ORDER,
            "order_id": 1001,
            "user_id": 7,
            "amount": 12.5,
            "updated_at": "2024-06-01T12:00:00.5+08:00",
        },
    )
    assert (e.order_id, e.user_id, e.amount) == ("1001", "7", Decimal("12.50"))
    assert e.event_time == datetime(2024, 6, 1, 4, 0, 0, 500000, tzinfo=UTC)
    big = ok("orders_db", {**ORDER, "amount": "9999999999999999.99"})
    assert big.amount == Decimal("9999999999999999.99")
    nanos = ok("orders_db", {**ORDER, "updated_at": "2024-06-01 12:00:00.123456789"})
    assert nanos.event_time.microsecond == 123456


def test_orders_db_optional_fields_may_be_absent_null_or_empty() -> None:
    e = ok("orders_db", {"op": "u", "updated_at": "2024-06-01 12:00:00", "address": "  ", "status": None})
    assert (e.order_id, e.user_id, e.amount, e.status, e.address) == (None, None, None, None, None)


def test_orders_db_normalises_status_case() -> None:
    assert ok("orders_db", {**ORDER, "status": " Paid "}).status == "paid"


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({**ORDER, "amount": "abc"}, "amount: expected a decimal number of yuan, got 'abc'"),
        ({**ORDER, "amount": True}, "amount: expected a decimal number of yuan, got true"),
        ({**ORDER, "amount": [1]}, "amount: expected a decimal number of yuan, got an array"),
        ({**ORDER, "amount": "1e3"}, "amount: expected a decimal number of yuan, got '1e3'"),
        ({**ORDER, "amount": "1.005"}, "amount: 1.005 has fractions of a fen"),
        ({**ORDER, "amount": 10**16}, "amount: 10000000000000000 is outside decimal(18, 2)"),
        ({**ORDER, "amount": 1e300}, "amount: 1E+300 is outside decimal(18, 2)"),
        ({**ORDER, "op": "x"}, "op: expected one of 'c', 'u', 'd', got 'x'"),
        ({**ORDER, "op": 1}, "op: expected one of 'c', 'u', 'd', got 1"),
        ({k: v for k, v in ORDER.items() if k != "op"}, "op: missing (required)"),
        ({k: v for k, v in ORDER.items() if k != "updated_at"}, "updated_at: missing (required)"),
        ({**ORDER, "updated_at": None}, "updated_at: missing (required)"),
        (
            {**ORDER, "updated_at": 1717214400},
            "updated_at: expected a local timestamp string, got 1717214400",
        ),
        ({**ORDER, "updated_at": "yesterday"}, "updated_at: expected a timestamp like"),
        (
            {**ORDER, "updated_at": "2024-13-01 12:00:00"},
            "updated_at: invalid timestamp '2024-13-01 12:00:00'",
        ),
        ({**ORDER, "order_id": {"id": 1}}, "order_id: expected a string or integer id, got an object"),
        ({**ORDER, "order_id": 1.5}, "order_id: expected a string or integer id, got 1.5"),
        ({**ORDER, "order_id": "x" * 257}, "order_id: id of 257 characters exceeds max_id_chars=256"),
        ({**ORDER, "address": 5}, "address: expected a string, got 5"),
        ({**ORDER, "status": False}, "status: expected a string, got false"),
    ],
)
def test_orders_db_rejects_malformed_fields(payload: dict[str, Any], reason: str) -> None:
    assert rejected("orders_db", payload).startswith(reason)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b'{"op": "u", "order_id": "1', "payload: invalid JSON"),
        (b"\x00\xff\xfe garbage \x81", "payload: not UTF-8 text"),
        (b"[1, 2, 3]", "payload: expected a JSON object, got an array"),
        (b'"just a string"', "payload: expected a JSON object, got 'just a string'"),
        (b"", "payload: empty record"),
        (b'{"amount": NaN}', "payload: invalid JSON: NaN is not a JSON number"),
        (b'{"amount": -Infinity}', "payload: invalid JSON: -Infinity is not a JSON number"),
        (b'{"amount": ' + b"9" * 5000 + b"}", "payload: invalid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "payload: invalid JSON: nested too deeply"),
        (
            b'{"amount": 1338850E999999999999999994}',
            "payload: invalid JSON: the number 1338850E999999999999999994 is beyond the exact decimal range",
        ),
    ],
)
@pytest.mark.parametrize("source", sorted(ADAPTERS))
def test_every_adapter_rejects_undecodable_payloads(source: str, value: bytes, reason: str) -> None:
    assert rejected(source, value).startswith(reason)


@pytest.mark.parametrize("source", sorted(ADAPTERS))
def test_null_kafka_value_is_rejected_not_raised(source: str) -> None:
    result = get_adapter(source)(None, **COORDS)
    assert (
        isinstance(result, Rejected)
        and result.reason.startswith("payload: empty record")
        and result.raw == b""
    )


def test_oversized_payload_is_rejected_with_its_bytes_whole() -> None:
    small = AdapterSettings(max_payload_bytes=64)
    value = json.dumps({**ORDER, "address": "x" * 200}).encode()
    result = get_adapter("orders_db")(value, **COORDS, settings=small)
    assert isinstance(result, Rejected)
    assert result.reason.startswith(f"payload: {len(value)} bytes exceeds max_payload_bytes=64")
    assert result.raw == value  # quarantine keeps every byte, so the record can be replayed after a fix


def test_rejected_keeps_raw_bytes_exactly() -> None:
    value = b'{"op": "c", "amount": "abc", "updated_at": "2024-06-01 12:00:00"}'
    result = get_adapter("orders_db")(value, **COORDS)
    assert isinstance(result, Rejected) and result.raw == value


# --- payments -------------------------------------------------------------------------------------------


def test_payment_converts_fen_to_yuan_and_millis_to_utc() -> None:
    e = ok("payments", PAYMENT)
    assert e.amount == Decimal("99.00")
    assert e.event_time == datetime(2024, 6, 1, 4, 0, 0, 123000, tzinfo=UTC)
    assert (e.event_id, e.order_id, e.status, e.event_type, e.op) == (
        "payments:P1",
        "1001",
        "paid",
        "payment",
        None,
    )
    assert ok("payments", {**PAYMENT, "payMoney": 1}).amount == Decimal("0.01")
    assert ok("payments", {**PAYMENT, "payMoney": 1234.0}).amount == Decimal("12.34")
    assert ok("payments", {**PAYMENT, "payMoney": 10**18 - 1}).amount == Decimal("9999999999999999.99")
    assert ok("payments", {**PAYMENT, "paidAt": 1717214400123.5}).event_time.microsecond == 123500


def test_payment_missing_order_or_amount_is_left_to_quality() -> None:
    e = ok("payments", {"payId": 77, "paidAt": 0})
    assert (e.event_id, e.order_id, e.amount) == ("payments:77", None, None)
    assert e.event_time == datetime(1970, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({**PAYMENT, "payMoney": "9900"}, "payMoney: expected an integer number of fen, got '9900'"),
        ({**PAYMENT, "payMoney": 99.5}, "payMoney: expected an integer number of fen, got 99.5"),
        ({**PAYMENT, "payMoney": True}, "payMoney: expected an integer number of fen, got true"),
        ({**PAYMENT, "payMoney": 10**18}, "payMoney: 1000000000000000000 fen is outside decimal(18, 2)"),
        ({**PAYMENT, "paidAt": "2024-06-01"}, "paidAt: expected epoch milliseconds, got '2024-06-01'"),
        ({**PAYMENT, "paidAt": -1}, "paidAt: epoch milliseconds -1 outside 1970-01-01..9999-12-31"),
        ({**PAYMENT, "paidAt": 10**20}, "paidAt: epoch milliseconds"),
        (
            {**PAYMENT, "paidAt": 1.0001},
            "paidAt: expected epoch milliseconds (at most 3 decimals), got 1.0001",
        ),
        ({**PAYMENT, "paidAt": False}, "paidAt: expected epoch milliseconds, got false"),
        ({k: v for k, v in PAYMENT.items() if k != "paidAt"}, "paidAt: missing (required)"),
        ({k: v for k, v in PAYMENT.items() if k != "payId"}, "payId: missing (required)"),
        ({**PAYMENT, "payId": ""}, "payId: missing (required)"),
        ({**PAYMENT, "payId": None}, "payId: missing (required)"),
        ({**PAYMENT, "orderId": [1001]}, "orderId: expected a string or integer id, got an array"),
    ],
)
def test_payment_rejects_malformed_fields(payload: dict[str, Any], reason: str) -> None:
    assert rejected("payments", payload).startswith(reason)


# --- logistics ------------------------------------------------------------------------------------------


def test_logistics_normalises_offset_to_utc() -> None:
    e = ok("logistics", LOGISTICS)
    assert e.event_time == datetime(2024, 6, 1, 4, 30, tzinfo=UTC)
    assert (e.order_id, e.logistics_state, e.event_type, e.status, e.amount) == (
        "1001",
        "in_transit",
        "logistics",
        None,
        None,
    )
    assert ok("logistics", {**LOGISTICS, "ts": "2024-06-01T04:30:00Z"}).event_time == e.event_time
    assert ok("logistics", {**LOGISTICS, "ts": "2024-06-01T00:30:00-0400"}).event_time == e.event_time


def test_logistics_event_id_ignores_push_metadata_and_spelling_of_the_instant() -> None:
    a = ok("logistics", LOGISTICS)
    b = ok("logistics", {**LOGISTICS, "ts": "2024-06-01T04:30:00Z", "pushedAt": 123, "retry": 2})
    assert a.event_id == b.event_id and a.event_id.startswith("logistics:")
    assert ok("logistics", {**LOGISTICS, "order": "1002"}).event_id != a.event_id  # shared tracking number
    assert ok("logistics", {**LOGISTICS, "state": "delivered"}).event_id != a.event_id
    assert ok("logistics", {**LOGISTICS, "ts": "2024-06-01T12:31:00+08:00"}).event_id != a.event_id


def test_logistics_naive_ts_needs_a_configured_zone() -> None:
    naive = {**LOGISTICS, "ts": "2024-06-01T12:30:00"}
    assert rejected("logistics", naive).startswith("ts: timestamp '2024-06-01T12:30:00' has no UTC offset")
    e = ok("logistics", naive, settings=AdapterSettings(logistics_naive_zone="Asia/Shanghai"))
    assert e.event_time == datetime(2024, 6, 1, 4, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({k: v for k, v in LOGISTICS.items() if k != "trackingNo"}, "trackingNo: missing (required)"),
        ({k: v for k, v in LOGISTICS.items() if k != "ts"}, "ts: missing (required)"),
        ({**LOGISTICS, "ts": 1717214400000}, "ts: expected an ISO-8601 timestamp string, got 1717214400000"),
        ({**LOGISTICS, "ts": "2024-06-01T12:30:00+24:00"}, "ts: UTC offset out of range"),
        ({**LOGISTICS, "ts": "2024-02-30T12:30:00Z"}, "ts: invalid timestamp"),
        ({**LOGISTICS, "state": 3}, "state: expected a string, got 3"),
        ({**LOGISTICS, "order": True}, "order: expected a string or integer id, got true"),
    ],
)
def test_logistics_rejects_malformed_fields(payload: dict[str, Any], reason: str) -> None:
    assert rejected("logistics", payload).startswith(reason)


# --- behaviour ------------------------------------------------------------------------------------------


def test_behaviour_basic_event() -> None:
    e = ok("behaviour", BEHAVIOUR)
    assert (e.user_id, e.order_id, e.event_type) == ("u1", "1001", "behaviour:view")
    assert e.event_time == datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
    assert e.event_id.startswith("behaviour:") and e.amount is None and e.status is None


@pytest.mark.parametrize(
    "payload",
    [
        {"user_id": "u1", "event": "view", "orderId": "1001", "ts": 1717214400000},
        {"userId": "u1", "eventType": "view", "order_id": "1001", "timestamp": "1717214400000"},
        {"uid": "u1", "event_type": "view", "orderId": 1001, "event_time": "2024-06-01T12:00:00+08:00"},
        {"uid": "u1", "user_id": "u1", "event": "view", "orderId": "1001", "ts": "2024-06-01 04:00:00Z"},
    ],
)
def test_behaviour_accepts_documented_field_variants(payload: dict[str, Any]) -> None:
    e = ok("behaviour", payload)
    assert (e.user_id, e.order_id, e.event_type) == ("u1", "1001", "behaviour:view")
    assert e.event_time == datetime(2024, 6, 1, 4, 0, tzinfo=UTC)


def test_behaviour_order_and_user_are_optional_and_own_id_is_used() -> None:
    e = ok("behaviour", {"event": "app_open", "ts": 1717214400000, "eventId": "ev-9"})
    assert (e.user_id, e.order_id, e.event_id) == (None, None, "behaviour:ev-9")


def test_behaviour_without_own_id_hashes_payload() -> None:
    a = ok("behaviour", BEHAVIOUR)
    assert a.event_id == ok("behaviour", dict(reversed(list(BEHAVIOUR.items())))).event_id
    assert a.event_id != ok("behaviour", {**BEHAVIOUR, "ts": 1717214400001}).event_id


def test_behaviour_naive_iso_needs_a_configured_zone() -> None:
    naive = {**BEHAVIOUR, "ts": "2024-06-01 12:00:00"}
    assert rejected("behaviour", naive).startswith("ts: timestamp '2024-06-01 12:00:00' has no UTC offset")
    e = ok("behaviour", naive, settings=AdapterSettings(behaviour_naive_zone="Asia/Shanghai"))
    assert e.event_time == datetime(2024, 6, 1, 4, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"uid": "u1", "ts": 1717214400000}, "event/event_type/eventType: missing (required)"),
        ({"uid": "u1", "event": "view"}, "ts/timestamp/event_time: missing (required)"),
        (
            {**BEHAVIOUR, "uid": "u1", "user_id": "u2"},
            "uid/user_id/userId: conflicting values 'u1' (uid) and 'u2'",
        ),
        ({**BEHAVIOUR, "ts": [1]}, "ts: expected epoch milliseconds, got an array"),
        ({**BEHAVIOUR, "ts": "soon"}, "ts: expected a timestamp like"),
        ({**BEHAVIOUR, "timestamp": "2024-06-01T12:00:00Z"}, "ts/timestamp/event_time: conflicting values"),
        ({**BEHAVIOUR, "event": "x" * 129}, "event/event_type/eventType: event name longer than 128"),
        ({**BEHAVIOUR, "event": {"name": "view"}}, "event: expected a string, got an object"),
        ({**BEHAVIOUR, "uid": 1.5}, "uid: expected a string or integer id, got 1.5"),
    ],
)
def test_behaviour_rejects_malformed_fields(payload: dict[str, Any], reason: str) -> None:
    assert rejected("behaviour", payload).startswith(reason)


@pytest.mark.parametrize(
    ("source", "template", "reason"),
    [
        ("orders_db", '{"op":"c","amount":%s,"updated_at":"2024-06-01 12:00:00"}', "amount: "),
        ("payments", '{"payId":1,"payMoney":%s,"paidAt":1}', "payMoney: "),
        ("payments", '{"payId":1,"payMoney":1,"paidAt":%s}', "paidAt: "),
        ("behaviour", '{"event":"x","ts":%s}', "ts: "),
    ],
)
@pytest.mark.parametrize("number", ["1e999999999", "-1e999999999", "1e-999999999", "1.5e-40"])
def test_extreme_json_numbers_are_field_rejects(source: str, template: str, reason: str, number: str) -> None:
    assert rejected(source, (template % number).encode()).startswith(reason)


# --- fuzzing: adapters never raise and never hit the "adapter error" safety net -------------------------

json_values = json_strategies.json_values(
    st.floats(allow_nan=False, allow_infinity=False), text_size=30, container_size=3, key_size=8, max_leaves=8
)
FIELD_NAMES = sorted(
    {
        *ORDER,
        *PAYMENT,
        *LOGISTICS,
        *BEHAVIOUR,
        "user_id",
        "userId",
        "timestamp",
        "event_time",
        "eventId",
        "order_id",
    }
)
plausible_values = (
    json_values
    | st.sampled_from(["c", "u", "d", "2024-06-01 12:00:00", "2024-06-01T12:00:00+08:00", "12.30", "-1", ""])
    | st.integers(min_value=-(10**17), max_value=10**17)
)
payloads = st.dictionaries(st.sampled_from(FIELD_NAMES), plausible_values, max_size=8)


def _check_result(result: StandardEvent | Rejected) -> None:
    if isinstance(result, Rejected):
        assert "adapter error" not in result.reason, result.reason
        assert ":" in result.reason
    else:
        assert result.event_time.tzinfo is not None and result.event_time.utcoffset() == timedelta(0)
        if result.amount is not None:
            assert result.amount == result.amount.quantize(Decimal("0.01"))
            assert abs(result.amount) < Decimal(10) ** 16


@settings(max_examples=300, deadline=None)
@given(source=st.sampled_from(sorted(ADAPTERS)), payload=payloads)
def test_adapters_never_raise_on_structured_garbage(source: str, payload: dict[str, Any]) -> None:
    _check_result(get_adapter(source)(json.dumps(payload).encode(), **COORDS))


@settings(max_examples=200, deadline=None)
@given(source=st.sampled_from(sorted(ADAPTERS)), value=st.binary(max_size=200))
def test_adapters_never_raise_on_random_bytes(source: str, value: bytes) -> None:
    _check_result(get_adapter(source)(value, **COORDS))


number_literals = st.builds(
    lambda mantissa, exponent: f"{mantissa}e{exponent}",
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-(10**6), max_value=10**6),
    st.integers(min_value=-(10**9), max_value=10**9),
) | st.integers(min_value=-(10**40), max_value=10**40).map(str)


@settings(max_examples=200, deadline=None)
@given(
    source=st.sampled_from(sorted(ADAPTERS)),
    base=st.sampled_from([ORDER, PAYMENT, LOGISTICS, BEHAVIOUR]),
    field=st.sampled_from(["amount", "payMoney", "paidAt", "ts", "order_id", "uid", "updated_at"]),
    number=number_literals,
)
def test_adapters_never_raise_on_extreme_number_literals(
    source: str, base: dict[str, Any], field: str, number: str
) -> None:
    text = json.dumps({**base, field: "__N__"}).replace('"__N__"', number)
    _check_result(get_adapter(source)(text.encode(), **COORDS))
