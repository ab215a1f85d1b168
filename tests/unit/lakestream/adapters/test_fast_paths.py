"""The per-record fast paths compute exactly what the slow paths compute, on edge cases too.

Each fast path in ``lakestream.adapters.parsing`` (and ``StandardEvent``'s compiled ``_new_event``, the
positional re-tag in ``classify``) claims to be the slow path minus work that cannot change the result.
These tests hold them to it: same value, same type and representation (``Decimal`` exponent, ``tzinfo``
object, ``fold``), or the same ``FieldError`` reason.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import pickle
from collections.abc import Callable
from datetime import datetime, timedelta, timezone, tzinfo
from decimal import Decimal
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakestream.adapters import ADAPTERS, get_adapter, parsing
from lakestream.adapters.parsing import (
    _CANONICAL,
    FieldError,
    _fen_as_yuan_slow,
    _millis_to_utc_slow,
    _parse_object_slow,
    _parse_timestamp_fast,
    _parse_timestamp_slow,
    _yuan_slow,
    canonical_json,
    canonical_json_bytes,
    get_fen_as_yuan,
    get_yuan,
    millis_to_utc,
    parse_object,
    parse_timestamp,
    parse_timestamp_iso,
    stable_id,
)
from lakestream.adapters.settings import DEFAULT_SETTINGS
from lakestream.quality import QualityRules, classify
from lakestream.standard import EVENT_COLUMNS, StandardEvent, _new_event
from tests.support import json_strategies
from tests.support.adapter_samples import BEHAVIOUR, LOGISTICS, ORDER

UTC = timezone.utc
ZONES: list[tzinfo | None] = [
    None,
    ZoneInfo("Asia/Shanghai"),
    ZoneInfo("Europe/Berlin"),
    ZoneInfo("America/New_York"),
    ZoneInfo("Australia/Lord_Howe"),  # 30-minute DST shift
    ZoneInfo("UTC"),
    UTC,
    timezone(timedelta(hours=5, minutes=30)),
]


def outcome(fn: Callable[[], object]) -> tuple[str, ...]:
    """What a call produced, comparable across paths: the value's exact form, or the error's reason."""
    try:
        value = fn()
    except FieldError as exc:
        return ("FieldError", str(exc))
    if isinstance(value, datetime):
        return ("datetime", repr(value), str(value.fold), str(value.tzinfo is UTC))
    return (type(value).__name__, repr(value))


# --- timestamps -----------------------------------------------------------------------------------------


def _two(lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.integers(lo, hi).map(lambda v: f"{v:02d}")


def _timestamp(
    date: tuple[str, str, str], sep: str, time: tuple[str, str, str | None], frac: str, off: str
) -> str:
    text = f"{date[0]}-{date[1]}-{date[2]}{sep}{time[0]}:{time[1]}"
    if time[2] is not None:
        text += f":{time[2]}{frac}"
    return text + off


SPECIAL_TIMESTAMPS = [
    "2024-03-31 02:30:00",  # Berlin spring-forward gap
    "2024-10-27 02:30:00",  # Berlin fall-back: ambiguous, fold=0
    "2024-03-10 02:30:00",  # New York gap
    "2024-11-03 01:30:00",  # New York ambiguous
    "2024-04-07 01:45:00",  # Lord Howe ambiguous (30 minutes)
    "2024-10-06 02:15:00",  # Lord Howe gap
    "1991-04-14 01:30:00",  # Shanghai's last DST year
    "0001-01-01 00:00:00",
    "0001-01-01T00:00:00+01:00",  # before the first representable UTC instant
    "9999-12-31T23:59:59-01:00",  # after the last one
    "9999-12-31T23:59:59.999999Z",
    "2024-06-01T12:00:00.000000+00:00",
    "2024-06-01T12:00:00.000+00:00",
    " 2024-06-01T12:00:00+00:00\n",
    "2023-02-29 12:00:00",
    "2024-06-01T24:00:00Z",
    "2024-06-01T12:00:60Z",
    "2024-06-01T12:00Z",
    "2024-06-01 12:00:00   +00:00",
    "2024-06-01 12:00:00+05:99",
    "２０２４-06-01 12:00:00",  # full-width digits: only the slow path reads them
    "2024-06-01T12:00:00,5Z",
    "2024-06-01T12:00:00.1234567-0330",
]

timestamp_texts = st.one_of(
    st.builds(
        _timestamp,
        st.tuples(st.integers(0, 9999).map(lambda v: f"{v:04d}"), _two(0, 13), _two(0, 32)),
        st.sampled_from(["T", " ", "t", "_"]),
        st.tuples(_two(0, 25), _two(0, 61), st.none() | _two(0, 61)),
        st.sampled_from(["", ".5", ".123", ".123456", ".1234567", ",25", "."]),
        st.sampled_from(
            ["", "Z", "z", "+00:00", "-00:00", "+08:00", "-05:30", "+0800", "+08", "+24:00", "+23:59"]
        ),
    ),
    st.sampled_from(SPECIAL_TIMESTAMPS),
    st.builds(
        lambda s, i, c: s[:i] + c + s[i + 1 :],
        st.sampled_from(SPECIAL_TIMESTAMPS),
        st.integers(0, 30),
        st.sampled_from([*"0123456789:-+ TZ", "٣"]),
    ),
    st.text(max_size=30),
)


@settings(max_examples=1500, deadline=None)
@given(text=timestamp_texts, zone=st.sampled_from(ZONES))
def test_parse_timestamp_equals_the_slow_path(text: str, zone: tzinfo | None) -> None:
    fast = outcome(lambda: parse_timestamp("ts", text, naive_zone=zone))
    assert fast == outcome(lambda: _parse_timestamp_slow("ts", text, zone))


@settings(max_examples=500, deadline=None)
@given(text=timestamp_texts, zone=st.sampled_from(ZONES))
def test_parse_timestamp_iso_is_the_parse_and_its_isoformat(text: str, zone: tzinfo | None) -> None:
    try:
        parsed, iso = parse_timestamp_iso("ts", text, naive_zone=zone)
    except FieldError as exc:
        assert outcome(lambda: parse_timestamp("ts", text, naive_zone=zone)) == ("FieldError", str(exc))
        return
    assert iso == parsed.isoformat()
    assert outcome(lambda: parsed) == outcome(lambda: parse_timestamp("ts", text, naive_zone=zone))


@pytest.mark.parametrize(
    ("zone", "day"),
    [
        ("Europe/Berlin", "2024-03-31"),
        ("Europe/Berlin", "2024-10-27"),
        ("America/New_York", "2024-03-10"),
        ("America/New_York", "2024-11-03"),
        ("Australia/Lord_Howe", "2024-04-07"),
        ("Australia/Lord_Howe", "2024-10-06"),
        ("Asia/Shanghai", "1991-04-14"),
        ("Asia/Shanghai", "1991-09-15"),
    ],
)
def test_fast_path_matches_slow_path_across_a_dst_transition_day(zone: str, day: str) -> None:
    tz = ZoneInfo(zone)
    start = datetime.fromisoformat(f"{day} 00:00:00")
    for minutes in range(0, 24 * 60, 5):
        text = (start + timedelta(minutes=minutes, seconds=7)).isoformat(" ")
        fast = outcome(partial(_parse_timestamp_fast, text, tz))
        assert fast[0] == "datetime", text
        assert fast == outcome(partial(_parse_timestamp_slow, "ts", text, tz)), text


@pytest.mark.parametrize(
    ("text", "zone"),
    [
        ("2024-06-01 14:45:29", ZoneInfo("Asia/Shanghai")),
        ("2024-06-01T14:45:29.123456", ZoneInfo("Europe/Berlin")),
        ("2024-06-01T17:04:19+00:00", None),
        ("2024-06-01T17:04:19.500+08:00", None),
        ("2024-06-01T17:04:19Z", None),
    ],
)
def test_usual_spellings_take_the_fast_path(text: str, zone: tzinfo | None) -> None:
    assert _parse_timestamp_fast(text, zone) is not None


@pytest.mark.parametrize(
    ("text", "zone"),
    [
        ("2024-06-01 14:45:29", None),  # no zone: the slow path words the reject
        ("2024-06-01 14:45:29", timezone(timedelta(hours=1))),  # not a ZoneInfo
        ("2024-02-30T12:00:00Z", None),  # invalid date: the slow path words the reject
        ("2024-06-01T12:00:00,5Z", None),  # comma fraction
        ("２０２４-06-01 12:00:00", ZoneInfo("UTC")),
    ],
)
def test_unusual_spellings_leave_the_fast_path(text: str, zone: tzinfo | None) -> None:
    assert _parse_timestamp_fast(text, zone) is None


# --- JSON in and out ------------------------------------------------------------------------------------

json_values = json_strategies.json_values(
    st.decimals(allow_nan=False, allow_infinity=False),
    text_size=12,
    container_size=4,
    key_size=6,
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(value=json_values)
def test_canonical_json_equals_the_json_encoder(value: Any) -> None:
    assert canonical_json(value) == _CANONICAL.encode(value)


def _json_outcome(fn: Callable[[], bytes]) -> tuple[str, ...]:
    try:
        return ("bytes", repr(fn()))
    except Exception as exc:  # noqa: BLE001 - the error type is the outcome here
        return ("error", type(exc).__name__)


#: Where orjson and the ``json`` module part ways: orjson refuses these, the json module's form must win.
CANONICAL_EDGES: list[Any] = [
    2**63 - 1,
    2**63,
    2**64,
    -(2**63),
    -(2**63) - 1,
    10**30,
    {"k": [2**64, "x"]},
    f"lone {chr(0xD800)} surrogate",
    {chr(0xDFFF): 1},
    {"b": 1, "a": {"é": 1, "z": 2, "\ue000": 3, "\U0001f600": 4, "A": 5}},
    ['\x00\x1f\x7f\u2028\u2029"\\/', Decimal("1E+2"), Decimal("-0.00"), True, None],
    [[[[]]]],
    {"x": [[]] * 3},
]
DEEP = {"d": 1}
for _ in range(300):  # deeper than orjson's 255 levels
    DEEP = {"d": DEEP}
CANONICAL_EDGES.append(DEEP)


@settings(max_examples=500, deadline=None)
@given(value=json_values)
def test_canonical_json_bytes_equal_the_json_encoder(value: Any) -> None:
    expected = _json_outcome(lambda: _CANONICAL.encode(value).encode("utf-8"))
    assert _json_outcome(lambda: canonical_json_bytes(value)) == expected


@pytest.mark.parametrize("value", CANONICAL_EDGES)
def test_canonical_json_bytes_where_orjson_differs_or_refuses(value: Any) -> None:
    expected = _json_outcome(lambda: _CANONICAL.encode(value).encode("utf-8"))
    assert _json_outcome(lambda: canonical_json_bytes(value)) == expected
    if expected[0] == "bytes":
        digest = parsing._sha256(_CANONICAL.encode(value).encode("utf-8")).hexdigest()[:32]
        assert stable_id("s", value) == f"s:{digest}"


def _payload_bytes(obj: dict[str, Any], variant: str) -> bytes:
    text = json.dumps(obj, default=str, ensure_ascii=variant == "ascii")
    raw = text.encode()
    return {
        "plain": raw,
        "ascii": raw,
        "bom": b"\xef\xbb\xbf" + raw,
        "spaces": b" \n" + raw + b"\t",
        "trailing": raw + b" {}",
        "truncated": raw[:-2] + b"}",
        "bad utf-8": raw[:-1] + b', "x": "\xff"}',
        "nan": raw[:-1] + b', "x": NaN}' if raw != b"{}" else b'{"x": NaN}',
        "deep": b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        # where orjson and the json module may part ways (orjson's reading must never be kept for these)
        "duplicate key": raw[:-1] + b', "dup": 1, "dup": "2"}' if raw != b"{}" else b'{"d": 1, "d": 2}',
        "surrogate escape": raw[:-1] + b', "s": "\\ud800"}' if raw != b"{}" else b'{"s": "\\udc00"}',
        "cesu surrogate": b'{"s": "\xed\xa0\x80"}',
        "big int": b'{"n": 18446744073709551616, "m": -9223372036854775809}',
        "int64 edges": b'{"n": 9223372036854775807, "m": -9223372036854775808, "z": -0}',
        "floats": b'{"f": 1.10, "e": 1E2, "g": -0.0, "h": 1e400}',
        "nested": b'{"o": {"a": 1.5}, "l": [1, 2.50]}',
        "control char": b'{"c": "a\x01b"}',
        "leading zero": b'{"n": 01}',
    }[variant]


@settings(max_examples=400, deadline=None)
@given(
    obj=st.dictionaries(st.text(max_size=6), json_values, max_size=5),
    variant=st.sampled_from(
        [
            "plain",
            "ascii",
            "bom",
            "spaces",
            "trailing",
            "truncated",
            "bad utf-8",
            "nan",
            "deep",
            "duplicate key",
            "surrogate escape",
            "cesu surrogate",
            "big int",
            "int64 edges",
            "floats",
            "nested",
            "control char",
            "leading zero",
        ]
    ),
)
def test_parse_object_equals_the_slow_path(obj: dict[str, Any], variant: str) -> None:
    raw = _payload_bytes(obj, variant)
    assert outcome(lambda: parse_object(raw, DEFAULT_SETTINGS)) == outcome(lambda: _parse_object_slow(raw))


@settings(max_examples=1500, deadline=None)
@given(
    obj=st.dictionaries(st.text(max_size=6), json_values, max_size=5),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=3),
)
def test_parse_object_equals_the_slow_path_on_damaged_bytes(
    obj: dict[str, Any], flips: list[tuple[int, int]]
) -> None:
    raw = bytearray(json.dumps(obj, default=str, ensure_ascii=False).encode())
    for at, byte in flips:  # keep the braces: the fast paths only look at {...}
        if len(raw) > 2:
            raw[1 + at % (len(raw) - 2)] = byte
    damaged = bytes(raw)
    assert outcome(lambda: parse_object(damaged, DEFAULT_SETTINGS)) == outcome(
        lambda: _parse_object_slow(damaged)
    )


# --- amounts and epoch milliseconds ---------------------------------------------------------------------

number_like = st.one_of(
    st.integers(min_value=-(10**19), max_value=10**19),
    st.sampled_from(
        [0, 1, -1, 10**16 - 1, 10**16, -(10**16) + 1, -(10**16), 10**18 - 1, 10**18, -(10**18) + 1]
    ),
    st.sampled_from([True, False, None, [1], {"a": 1}, 1.5]),
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-(10**17), max_value=10**17),
    st.sampled_from([Decimal("1E+300"), Decimal("1E-40"), Decimal("-0"), Decimal("100.0"), Decimal("1E2")]),
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-(10**17), max_value=10**17).map(
        str
    ),
    st.sampled_from(
        ["0", "-0", "-0.5", "3", "568.9", "487.42", "00.10", "1.505", " 1.5", "1.5 ", "+1", "1e3", "1_000"]
    ),
    st.sampled_from(["٣.٥", "9999999999999999.99", "10000000000000000", "-9999999999999999.99", ".5", "5."]),
    st.text(alphabet="0123456789.-", max_size=20),
)


@settings(max_examples=800, deadline=None)
@given(value=number_like)
def test_yuan_fast_paths_equal_the_slow_paths(value: Any) -> None:
    if value is None:
        return
    obj = {"amount": value}
    assert outcome(lambda: get_yuan(obj, ("amount",))) == outcome(lambda: _yuan_slow("amount", value))
    assert outcome(lambda: get_fen_as_yuan(obj, ("amount",))) == outcome(
        lambda: _fen_as_yuan_slow("amount", value)
    )


@settings(max_examples=500, deadline=None)
@given(
    value=number_like
    | st.integers(min_value=-10, max_value=253_402_300_800_010)
    | st.sampled_from([253_402_300_799_999, 253_402_300_800_000, Decimal("1717214400123.5")])
)
def test_millis_fast_path_equals_the_slow_path(value: Any) -> None:
    assert outcome(lambda: millis_to_utc("ts", value)) == outcome(lambda: _millis_to_utc_slow("ts", value))


# --- whole adapters: ids and reasons as before the fast paths --------------------------------------------

# The sample payloads of test_adapters, so the pinned ids below are of the very same records.


@pytest.mark.parametrize(
    ("source", "payload", "event_id"),
    [
        # Computed by the adapters before the fast paths existed: ids must never change, or a replay
        # would stop de-duplicating against what is already in the tables.
        ("orders_db", ORDER, "orders_db:0d62dda90c298b282a0c004eb3c99240"),
        (
            "orders_db",
            {**ORDER, "amount": 12.5, "address": "café 朝阳", "status": None},
            "orders_db:bc0684decc3d2010f988c0724d88faf0",
        ),
        ("logistics", LOGISTICS, "logistics:886659414201bf17fe08163e78e4c504"),
        (
            "logistics",
            {**LOGISTICS, "ts": "2024-06-01T04:30:00Z"},
            "logistics:886659414201bf17fe08163e78e4c504",
        ),
        ("behaviour", BEHAVIOUR, "behaviour:a5bd98803ae8920228bd7584975da305"),
        (
            "behaviour",
            {**BEHAVIOUR, "extra": {"b": [1, 2.50, None, True], "a": "x"}},
            "behaviour:b0d28200581ef7a1d914d91e3df60030",
        ),
    ],
)
def test_event_ids_are_unchanged(source: str, payload: dict[str, Any], event_id: str) -> None:
    event = get_adapter(source)(json.dumps(payload).encode(), topic="t", partition=3, offset=42)
    assert isinstance(event, StandardEvent) and event.event_id == event_id


def test_the_canonical_encoder_is_built_once() -> None:
    # The fast path depends on the C encoder; on CPython it is always there.
    assert parsing._canonical_chunks is not None
    assert sorted(ADAPTERS) == ["behaviour", "logistics", "orders_db", "payments"]


# --- StandardEvent's constructors and classify's re-tag -------------------------------------------------


def test_standard_event_init_has_the_dataclass_signature() -> None:
    params = list(inspect.signature(StandardEvent).parameters.values())
    fields = dataclasses.fields(StandardEvent)
    assert [p.name for p in params] == [f.name for f in fields] == list(EVENT_COLUMNS)
    for p, f in zip(params, fields, strict=True):
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        expected = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        assert p.default == expected, p.name


def test_standard_event_init_stores_every_argument_in_its_field() -> None:
    values = [f"value-{i}" for i in range(len(EVENT_COLUMNS))]
    positional = StandardEvent(*values)  # type: ignore[arg-type]
    keyword = StandardEvent(**dict(zip(EVENT_COLUMNS, values, strict=True)))  # type: ignore[arg-type]
    for event in (positional, keyword):
        assert [getattr(event, name) for name in EVENT_COLUMNS] == values
    assert positional == keyword and hash(positional) == hash(keyword)
    defaults = StandardEvent(*values[:15])  # type: ignore[arg-type]
    assert (defaults.quality, defaults.quality_reason) == ("VALID", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        positional.event_id = "x"  # type: ignore[misc]
    assert dataclasses.replace(positional, quality="INVALID").quality == "INVALID"


def test_new_event_builds_what_the_constructor_builds() -> None:
    assert inspect.signature(_new_event).parameters == inspect.signature(StandardEvent).parameters
    values: list[Any] = [f"value-{i}" for i in range(len(EVENT_COLUMNS))]
    for args in (values, values[:15]):
        fast, slow = _new_event(*args), StandardEvent(*args)
        assert type(fast) is StandardEvent
        assert [getattr(fast, n) for n in EVENT_COLUMNS] == [getattr(slow, n) for n in EVENT_COLUMNS]
        assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
        assert pickle.loads(pickle.dumps(fast)) == slow and copy.copy(fast) == slow
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.order_id = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "now"),
    [
        ({}, datetime(2024, 6, 2, tzinfo=UTC)),  # VALID, returned as is
        ({"quality": "SUSPICIOUS", "quality_reason": "old"}, datetime(2024, 6, 2, tzinfo=UTC)),  # re-VALID
        ({}, datetime(2024, 5, 1, tzinfo=UTC)),  # in the future: SUSPICIOUS
        ({"order_id": None, "amount": Decimal("-1.00")}, datetime(2024, 6, 2, tzinfo=UTC)),  # INVALID
    ],
)
def test_classify_retags_like_dataclasses_replace(changes: dict[str, Any], now: datetime) -> None:
    base = get_adapter("orders_db")(json.dumps(ORDER).encode(), topic="t", partition=3, offset=42)
    assert isinstance(base, StandardEvent)
    event = dataclasses.replace(base, **changes)
    tagged = classify(event, now=now, rules=QualityRules())
    assert tagged == dataclasses.replace(event, quality=tagged.quality, quality_reason=tagged.quality_reason)
    assert type(tagged) is StandardEvent
