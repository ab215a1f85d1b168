"""``silver/orders`` from standard events: the field table, ``silver_source`` and the silver MERGE rule.

``run`` is the production path (``silver_source`` then ``SILVER_MERGE``'s reference fold); the pre-reduced
path (``merge_reduce``, as the writer runs it per checkpoint) and the independent oracle in
``tests/support/silver_oracle.py`` must agree with it for any arrival order, batch boundaries and ties.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from itertools import pairwise
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakestream.adapters import get_adapter
from lakestream.merge_reduce import reduce_guarded
from lakestream.quality import classify
from lakestream.silver import (
    FIELD_OFFERS,
    LAST_EVENT_TIME,
    RESOLVED_FIELDS,
    SILVER_COLUMNS,
    SILVER_KEY,
    SILVER_MERGE,
    SILVER_SCHEMA,
    silver_source,
)
from lakestream.standard import BRONZE_SCHEMA, Quality, StandardEvent
from tests.support.silver_oracle import oracle_rows

UTC = timezone.utc
T0 = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
TS = pa.timestamp("us", tz="UTC")
_offsets = iter(range(10**9))
Row = dict[str, Any]


def ev(
    kind: str,
    minute: float,
    *,
    order_id: str | None = "1001",
    eid: str | None = None,
    quality: Quality = "VALID",
    **fields: Any,
) -> StandardEvent:
    """A standard event of ``kind`` (c/u/d/payment/logistics/behaviour) at T0 + ``minute``."""
    etype = {
        "c": "order_created",
        "u": "order_updated",
        "d": "order_deleted",
        "payment": "payment",
        "logistics": "logistics",
        "behaviour": "behaviour:view",
    }[kind]
    offset = next(_offsets)
    return StandardEvent(
        event_id=eid or f"e{offset}",
        order_id=order_id,
        user_id=fields.get("user_id"),
        event_type=etype,
        event_time=T0 + timedelta(minutes=minute),
        amount=fields.get("amount"),
        status=fields.get("status", "paid" if kind == "payment" else None),
        address=fields.get("address"),
        logistics_state=fields.get("logistics_state"),
        op=kind if kind in ("c", "u", "d") else None,  # type: ignore[arg-type]
        source="test",
        raw=b"",
        topic="t",
        partition=0,
        offset=offset,
        quality=quality,
    )


def bronze(events: Sequence[StandardEvent]) -> pa.Table:
    from udfs.ingest_rows import bronze_row

    rows = [bronze_row(e, T0) for e in events]
    return pa.Table.from_pylist([dict(zip(BRONZE_SCHEMA.names, r, strict=True)) for r in rows], BRONZE_SCHEMA)


def source_rows(events: Sequence[StandardEvent], **kwargs: Any) -> list[Row]:
    return silver_source(bronze(events), **kwargs).to_pylist()


def by_order(table: dict[tuple[Any, ...], Row]) -> dict[str, Row]:
    return {key[0]: row for key, row in table.items()}


def run(events: Sequence[StandardEvent], target: dict[str, Row] | None = None) -> dict[str, Row]:
    """Events -> partial rows -> the reference fold, as one MERGE per event would apply them."""
    start = {(k,): v for k, v in (target or {}).items()}
    return by_order(SILVER_MERGE.fold_rows(source_rows(events), SILVER_SCHEMA, start))


def one(events: Sequence[StandardEvent]) -> Row:
    rows = run(events)
    assert list(rows) == ["1001"]
    return rows["1001"]


# --- the schema and the field table ---------------------------------------------------------------------


def test_schema_has_value_time_and_id_per_field_and_the_spec_covers_every_column_once() -> None:
    assert SILVER_KEY == ("order_id",) and SILVER_SCHEMA.field("order_id").nullable is False
    covered = [*SILVER_MERGE.keys]
    for grp in SILVER_MERGE.groups():
        covered += grp.moved
    assert sorted(covered) == sorted(SILVER_COLUMNS)
    assert SILVER_MERGE.unguarded(SILVER_SCHEMA) == []
    for f in RESOLVED_FIELDS:
        assert SILVER_SCHEMA.field(f"{f}__ts").type == TS
        assert SILVER_SCHEMA.field(f"{f}__eid").type == pa.string()
    assert SILVER_SCHEMA.field("amount").type == pa.decimal128(18, 2)
    assert SILVER_SCHEMA.field("deleted").type == pa.bool_()
    assert SILVER_MERGE.greatest == (LAST_EVENT_TIME,)
    assert SILVER_COLUMNS[-2:] == ("last_event_time", "last_event_id")
    assert list(FIELD_OFFERS) == list(RESOLVED_FIELDS)


# --- the seed scenario ----------------------------------------------------------------------------------


def _orders_db(op: str, updated_at: str, address: str, offset: int) -> StandardEvent:
    payload = {
        "op": op,
        "order_id": "1001",
        "user_id": "u1",
        "amount": "99.0",
        "status": "created",
        "address": address,
        "updated_at": updated_at,
    }
    result = get_adapter("orders_db")(
        json.dumps(payload).encode(), topic="orders", partition=0, offset=offset
    )
    assert isinstance(result, StandardEvent)
    return classify(result, now=datetime(2024, 6, 1, 12, 0, tzinfo=UTC))


def test_seed_scenario_order_1001() -> None:
    chaoyang = _orders_db("c", "2024-06-01 12:00:00", "Chaoyang", 0)
    haidian = _orders_db("u", "2024-06-01 12:05:00", "Haidian", 1)
    xicheng = _orders_db("u", "2024-06-01 10:00:00", "Xicheng", 2)
    row = one([chaoyang, haidian, xicheng])
    assert row["address"] == "Haidian"
    assert row["address__ts"] == datetime(2024, 6, 1, 4, 5, tzinfo=UTC)
    assert row["address__eid"] == haidian.event_id
    assert row["created_time"] == datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
    assert row["amount"] == Decimal("99.00")
    assert (row["last_event_time"], row["last_event_id"]) == (row["address__ts"], haidian.event_id)
    # The late 10:00 update changes nothing, applied after the others one by one.
    assert run([xicheng], run([chaoyang, haidian])) == run([chaoyang, haidian])


# --- field rules ----------------------------------------------------------------------------------------


def test_order_events_set_their_fields_and_create_sets_created_time() -> None:
    row = one([ev("c", 0, user_id="u1", amount=Decimal(10), status="created", address="A")])
    assert (row["user_id"], row["amount"], row["status"], row["address"], row["deleted"]) == (
        "u1",
        Decimal(10),
        "created",
        "A",
        False,
    )
    assert row["created_time"] == T0 and row["created_time__ts"] == T0
    assert row["paid_amount"] is None and row["logistics_state"] is None
    assert one([ev("u", 0, status="pending")])["created_time"] is None


def test_payment_sets_paid_amount_and_status_only() -> None:
    row = one([ev("c", 0, amount=Decimal(10), status="created"), ev("payment", 1, amount=Decimal("9.50"))])
    assert (row["paid_amount"], row["status"], row["amount"]) == (Decimal("9.50"), "paid", Decimal(10))
    # A status change stamped before the payment, arriving after it, does not undo "paid".
    late = ev("u", 0.5, status="pending")
    assert one([ev("payment", 1, amount=Decimal(1)), late])["status"] == "paid"
    # A later status (shipped) wins over paid.
    assert one([ev("payment", 1, amount=Decimal(1)), ev("u", 2, status="shipped")])["status"] == "shipped"


def test_logistics_sets_logistics_state_only() -> None:
    row = one(
        [ev("logistics", 3, logistics_state="in_transit"), ev("logistics", 1, logistics_state="picked_up")]
    )
    assert row["logistics_state"] == "in_transit"
    assert row["status"] is None and row["deleted"] is None


def test_behaviour_and_empty_offers_give_no_row() -> None:
    assert source_rows([ev("behaviour", 0), ev("logistics", 1, logistics_state=None)]) == []
    before = run([ev("u", 0, status="created")])
    assert run([ev("behaviour", 5)], before) == before


@pytest.mark.parametrize("quality", ["SUSPICIOUS", "INVALID"])
def test_only_valid_events_resolve_by_default(quality: Quality) -> None:
    e = ev("u", 9999, status="created", quality=quality)
    assert source_rows([e]) == []
    assert len(source_rows([e], accept=frozenset({"VALID", "SUSPICIOUS", "INVALID"}))) == 1


def test_event_without_order_id_sets_nothing() -> None:
    assert source_rows([ev("u", 0, order_id=None, status="created")]) == []


def test_null_never_erases() -> None:
    row = one([ev("u", 0, address="A", amount=Decimal(5)), ev("u", 1, address=None, status="pending")])
    assert (row["address"], row["amount"], row["status"]) == ("A", Decimal(5), "pending")
    assert row["address__ts"] == T0 and row["status__ts"] == T0 + timedelta(minutes=1)


def test_ties_go_to_the_later_arrival() -> None:
    a = ev("u", 5, address="A", eid="a")
    b = ev("u", 5, address="B", eid="b")
    assert one([a, b])["address"] == "B"
    assert one([b, a])["address"] == "A"


def test_reapplying_the_same_event_is_a_no_op() -> None:
    e = ev("c", 0, address="A", status="created")
    before = run([e])
    assert run([e], before) == before


def test_tombstone_keeps_the_row_and_blocks_older_updates() -> None:
    create = ev("c", 0, address="A", status="created")
    delete = ev("d", 10)
    older_update = ev("u", 5, address="B", status="pending")
    row = one([create, delete, older_update])
    assert row["deleted"] is True and row["deleted__eid"] == delete.event_id
    assert row["address"] == "B"  # fields the delete did not carry still resolve by time
    assert row["created_time"] == T0


def test_newer_events_after_a_tombstone_resurrect_only_when_they_are_order_changes() -> None:
    base = [ev("c", 0, status="created"), ev("d", 10)]
    assert one([*base, ev("payment", 20, amount=Decimal(1))])["deleted"] is True
    recreated = one([*base, ev("c", 20, status="created")])
    assert recreated["deleted"] is False and recreated["created_time"] == T0 + timedelta(minutes=20)


def test_delete_carrying_a_row_image_sets_its_values() -> None:
    row = one([ev("u", 0, status="pending"), ev("d", 1, status="cancelled")])
    assert (row["status"], row["deleted"]) == ("cancelled", True)


def test_last_event_is_the_greatest_field_stamp_with_ties_to_the_later_arrival() -> None:
    row = one([ev("payment", 3, amount=Decimal(1), eid="p"), ev("u", 1, address="A", eid="u")])
    assert (row["last_event_time"], row["last_event_id"]) == (T0 + timedelta(minutes=3), "p")
    a = ev("u", 3, address="A", eid="a")
    b = ev("payment", 3, amount=Decimal(1), eid="b")
    assert one([a, b])["last_event_id"] == "b" and one([b, a])["last_event_id"] == "a"


def test_silver_source_rows_carry_exactly_the_offered_fields() -> None:
    (row,) = source_rows([ev("payment", 2, amount=Decimal("9.50"), eid="p")])
    stamp = T0 + timedelta(minutes=2)
    assert {c for c, v in row.items() if v is not None} == {
        "order_id",
        "paid_amount",
        "paid_amount__ts",
        "paid_amount__eid",
        "status",
        "status__ts",
        "status__eid",
        "last_event_time",
        "last_event_id",
    }
    assert (row["paid_amount"], row["status"], row["status__ts"], row["status__eid"]) == (
        Decimal("9.50"),
        "paid",
        stamp,
        "p",
    )
    assert silver_source(bronze([])).schema == SILVER_SCHEMA


# --- properties -----------------------------------------------------------------------------------------

KINDS = ("c", "u", "d", "payment", "logistics", "behaviour")


def _spec(minutes: st.SearchStrategy[int]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(
        st.sampled_from(KINDS),
        minutes,
        st.sampled_from(["1001", "1002", "1003"]),
        st.sampled_from(["VALID", "VALID", "VALID", "SUSPICIOUS"]),
        st.sampled_from([None, "u1", "u2"]),
        st.sampled_from([None, Decimal("1.00"), Decimal("2.50")]),
        st.sampled_from([None, "created", "shipped"]),
        st.sampled_from([None, "A", "B"]),
        st.sampled_from([None, "x", "y"]),
    )


def _to_event(spec: tuple[Any, ...]) -> StandardEvent:
    kind, minute, order_id, quality, user_id, amount, status, address, logistics_state = spec
    return ev(
        kind,
        minute,
        order_id=order_id,
        quality=quality,
        user_id=user_id,
        amount=amount,
        status="paid" if kind == "payment" else status,
        address=address,
        logistics_state=logistics_state,
    )


@st.composite
def event_specs(draw: st.DrawFn, *, distinct_times: bool) -> list[StandardEvent]:
    """Events over three orders; distinct event times (or many ties), plus re-delivered duplicates."""
    if distinct_times:
        specs = draw(st.lists(_spec(st.integers(0, 10_000)), max_size=24, unique_by=lambda t: t[1]))
    else:
        specs = draw(st.lists(_spec(st.integers(0, 4)), max_size=24))
    events = [_to_event(spec) for spec in specs]
    dups = draw(st.lists(st.sampled_from(events), max_size=6)) if events else []
    return events + dups


@settings(max_examples=150, deadline=None)
@given(events=event_specs(distinct_times=False))
def test_the_production_path_equals_the_independent_oracle(events: list[StandardEvent]) -> None:
    extra = [
        ev("behaviour", 0),
        ev("u", 0, order_id=None),
        ev("u", 0, quality="SUSPICIOUS"),
        ev("c", 1, user_id="u9", amount=Decimal("2.50"), address="A"),
        ev("d", 2),
        ev("payment", 3, amount=None),
        ev("logistics", 4, logistics_state=None),
    ]
    sample = [*events, *extra]
    assert run(sample) == oracle_rows(sample)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), events=event_specs(distinct_times=True))
def test_any_arrival_order_gives_the_same_silver(data: st.DataObject, events: list[StandardEvent]) -> None:
    expected = run(events)
    permuted = data.draw(st.permutations(events))
    assert run(permuted) == expected


def _batches(data: st.DataObject, events: list[StandardEvent]) -> list[list[StandardEvent]]:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), max_size=6)))
    bounds = [0, *cuts, len(events)]
    return [events[a:b] for a, b in pairwise(bounds)]


def _merge_in_batches(
    batches: list[list[StandardEvent]], table: dict[str, Row] | None = None
) -> dict[str, Row]:
    """As the writer does it: each batch pre-reduced column-wise, then one MERGE of the reduced rows."""
    keyed = {(k,): v for k, v in (table or {}).items()}
    for batch in batches:
        reduced = reduce_guarded(silver_source(bronze(batch)), SILVER_MERGE)
        keyed = SILVER_MERGE.fold_rows(reduced.to_pylist(), SILVER_SCHEMA, keyed)
    return by_order(keyed)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), events=event_specs(distinct_times=False))
def test_batched_merge_equals_one_by_one_even_with_ties(
    data: st.DataObject, events: list[StandardEvent]
) -> None:
    """Pre-reduce per micro-batch + MERGE == one by one, for any batch boundaries (associativity)."""
    assert _merge_in_batches(_batches(data, events)) == run(events)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), events=event_specs(distinct_times=True))
def test_replaying_merged_batches_is_a_no_op(data: st.DataObject, events: list[StandardEvent]) -> None:
    """A crashed job re-running old micro-batches (in any order) cannot change silver."""
    batches = _batches(data, events)
    table = _merge_in_batches(batches)
    replay = data.draw(st.lists(st.sampled_from(batches), max_size=4)) if batches else []
    assert _merge_in_batches(replay, table) == table


def test_permutation_property_would_catch_an_order_dependent_rule() -> None:
    """Guard against a vacuous property: the same events, applied without the guard, differ by order."""
    events = [ev("u", 5, address="new"), ev("u", 1, address="old")]

    def last_write_wins(es: Sequence[StandardEvent]) -> str | None:
        return [e.address for e in es][-1]

    assert last_write_wins(events) != last_write_wins(events[::-1])
    assert run(events) == run(events[::-1])


def test_quality_variant_events_are_ignored_in_properties_too() -> None:
    e = dataclasses.replace(ev("u", 1, status="created"), quality="SUSPICIOUS")
    assert run([e]) == {}
