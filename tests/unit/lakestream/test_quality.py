from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from lakestream.quality import KNOWN_STATUSES, QualityRules, classify
from lakestream.standard import StandardEvent, reject_event

UTC = timezone.utc
NOW = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)


def event(**overrides: object) -> StandardEvent:
    base = StandardEvent(
        event_id="orders_db:x",
        order_id="1001",
        user_id="u1",
        event_type="order_updated",
        event_time=NOW - timedelta(minutes=1),
        amount=Decimal("99.00"),
        status="created",
        address="Chaoyang",
        logistics_state=None,
        op="u",
        source="orders_db",
        raw=b"{}",
        topic="orders",
        partition=0,
        offset=7,
    )
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


def test_valid_event_is_returned_unchanged_without_copy() -> None:
    e = event()
    assert classify(e, now=NOW) is e


def test_reclassifying_clears_a_stale_tag() -> None:
    stale = event(quality="SUSPICIOUS", quality_reason="status: old")
    again = classify(stale, now=NOW)
    assert (again.quality, again.quality_reason) == ("VALID", None)


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"order_id": None}, "order_id: missing, required for order_updated events"),
        (
            {"order_id": None, "event_type": "payment", "op": None},
            "order_id: missing, required for payment events",
        ),
        (
            {"order_id": None, "event_type": "logistics", "op": None, "logistics_state": "x"},
            "order_id: missing",
        ),
        ({"op": None}, "op: missing, required for order_updated events"),
        (
            {"event_type": "payment", "op": None, "amount": None, "status": "paid"},
            "amount: missing, required for",
        ),
        (
            {"event_type": "logistics", "op": None, "status": None},
            "logistics_state: missing, required for logistics",
        ),
        ({"amount": Decimal("-0.01")}, "amount: -0.01 is negative"),
        ({"event_time": datetime(2024, 6, 1, 4, 0)}, "event_time: 2024-06-01T04:00:00 has no time zone"),
    ],
)
def test_invalid_rules(overrides: dict[str, object], reason: str) -> None:
    tagged = classify(event(**overrides), now=NOW)
    assert tagged.quality == "INVALID"
    assert tagged.quality_reason is not None and reason in tagged.quality_reason


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (
            {"event_time": NOW + timedelta(minutes=6)},
            "event_time: 2024-06-01T04:06:00+00:00 is 0:06:00 ahead of now",
        ),
        (
            {"event_time": datetime(1970, 1, 20, tzinfo=UTC)},
            "event_time: 1970-01-20T00:00:00+00:00 is before 2000",
        ),
        ({"amount": Decimal("1000000.01")}, "amount: 1000000.01 is above the ceiling 1000000"),
        ({"status": "teleported"}, "status: 'teleported' is not a known status"),
    ],
)
def test_suspicious_rules(overrides: dict[str, object], reason: str) -> None:
    tagged = classify(event(**overrides), now=NOW)
    assert tagged.quality == "SUSPICIOUS"
    assert tagged.quality_reason is not None and tagged.quality_reason.startswith(reason)


def test_boundaries_are_inclusive_for_valid() -> None:
    assert classify(event(event_time=NOW + timedelta(minutes=5)), now=NOW).quality == "VALID"
    assert classify(event(amount=Decimal(1_000_000)), now=NOW).quality == "VALID"
    assert classify(event(amount=Decimal(0)), now=NOW).quality == "VALID"


def test_nulls_that_no_rule_needs_are_valid() -> None:
    assert classify(event(status=None, amount=None, user_id=None, address=None), now=NOW).quality == "VALID"
    behaviour = event(event_type="behaviour:view", order_id=None, op=None, amount=None, status=None)
    assert classify(behaviour, now=NOW).quality == "VALID"


def test_invalid_dominates_and_every_finding_is_listed() -> None:
    tagged = classify(event(amount=Decimal(-5), status="weird", order_id=None), now=NOW)
    assert tagged.quality == "INVALID"
    assert tagged.quality_reason == (
        "order_id: missing, required for order_updated events; amount: -5 is negative; "
        "status: 'weird' is not a known status"
    )


def test_rules_are_configurable() -> None:
    rules = QualityRules(
        max_future=timedelta(hours=1),
        amount_ceiling=Decimal(100),
        known_statuses=KNOWN_STATUSES | {"teleported"},
    )
    assert classify(event(event_time=NOW + timedelta(minutes=30)), now=NOW, rules=rules).quality == "VALID"
    assert classify(event(status="teleported"), now=NOW, rules=rules).quality == "VALID"
    assert classify(event(amount=Decimal("100.01")), now=NOW, rules=rules).quality == "SUSPICIOUS"


def test_rules_and_now_must_be_sane() -> None:
    with pytest.raises(ValueError, match="max_future: must not be negative"):
        QualityRules(max_future=timedelta(seconds=-1))
    with pytest.raises(ValueError, match="min_event_time: must be timezone-aware"):
        QualityRules(min_event_time=datetime(2000, 1, 1))
    with pytest.raises(ValueError, match="now: must be timezone-aware"):
        classify(event(), now=datetime(2024, 6, 1))


def test_invalid_event_becomes_a_quality_stage_reject() -> None:
    tagged = classify(event(amount=Decimal(-1)), now=NOW)
    rej = reject_event(tagged)
    assert (rej.stage, rej.reason, rej.raw, rej.topic, rej.offset) == (
        "quality",
        "amount: -1 is negative",
        b"{}",
        "orders",
        7,
    )
