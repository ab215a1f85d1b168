"""``explain_order``: the seed case, and over random streams the explained winners are silver's values.

Silver here is the production path (``silver_source`` then ``SILVER_MERGE``'s fold, as in test_silver)
and is checked against the independent oracle first, so the explanation is held to a silver row that
is right, not to its own reading of the rule.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakestream.explain_order import OUTCOMES, explain_order, shows_change
from lakestream.silver import SILVER_MERGE
from lakestream.standard import LATE_SCHEMA, StandardEvent
from tests.support.silver_oracle import oracle_rows
from tests.unit.lakestream.test_silver import _orders_db, bronze, ev, run

UTC = timezone.utc


def late_rows(events: list[StandardEvent], watermark: datetime) -> pa.Table:
    table = bronze(events)
    return table.append_column(
        "watermark", pa.array([watermark] * table.num_rows, LATE_SCHEMA.field("watermark").type)
    )


def test_seed_case_haidian_wins_and_the_late_xicheng_is_named_older_and_not_applied() -> None:
    chaoyang = _orders_db("c", "2024-06-01 12:00:00", "朝阳区", 0)
    haidian = _orders_db("u", "2024-06-01 12:05:00", "海淀区", 1)
    xicheng = _orders_db("u", "2024-06-01 10:00:00", "西城区", 2)
    events = [chaoyang, haidian, xicheng]
    silver = run(events)["1001"]
    watermark = datetime(2024, 6, 1, 3, 35, tzinfo=UTC)  # 12:05 local - 30 min bound, in UTC
    out = explain_order("1001", silver, bronze(events), late=late_rows([xicheng], watermark))

    assert out.problems == ()
    address = next(f for f in out.fields if f.field == "address")
    assert address.value == "海淀区" and address.winner is not None
    assert address.winner.event_id == haidian.event_id
    assert address.winner.event_time == datetime(2024, 6, 1, 4, 5, tzinfo=UTC)
    assert address.winner.coordinates == "orders/0@1"
    losers = {o.value: o for o in address.others}
    assert set(losers) == {"朝阳区", "西城区"}
    assert losers["西城区"].outcome == "older" and losers["朝阳区"].outcome == "older"
    assert "older than 2024-06-01T04:05:00Z" in losers["西城区"].detail

    late = next(e for e in out.timeline if e.event.event_id == xicheng.event_id)
    assert late.outcome == "older" and late.tables == ("bronze", "late") and late.late is not None
    assert "late: arrived" in late.detail and "did not set a silver value" in late.detail
    assert late.late.lateness(xicheng.event_time) == 95 * 60  # 10:00 local is 02:00 UTC, 95 min behind
    assert [e.event.event_id for e in out.timeline] == [xicheng.event_id, chaoyang.event_id, haidian.event_id]
    created = next(e for e in out.timeline if e.event.event_id == chaoyang.event_id)
    assert created.outcome == "won" and created.fields_won == ("created_time",)
    # How the row came to be: the create set every field it offers, the 12:05 update moved the address
    # (and the fields it offers again); the late 10:00 update set nothing.
    assert [c.event.event_id for c in out.history] == [chaoyang.event_id, haidian.event_id]
    assert out.history[0].values["address"] == "朝阳区" and out.history[1].values["address"] == "海淀区"
    assert "created_time" not in out.history[1].values


def test_a_silver_row_shows_a_change_once_it_holds_its_event_or_a_later_change_of_a_field_it_set() -> None:
    chaoyang = _orders_db("c", "2024-06-01 12:00:00", "朝阳区", 0)
    haidian = _orders_db("u", "2024-06-01 12:05:00", "海淀区", 1)
    before = run([chaoyang])["1001"]
    after = run([chaoyang, haidian])["1001"]
    history = explain_order("1001", after, bronze([chaoyang, haidian])).history
    assert [c.event.event_id for c in history] == [chaoyang.event_id, haidian.event_id]

    assert [shows_change(history, i, None) for i in (0, 1)] == [False, False]
    assert [shows_change(history, i, before) for i in (0, 1)] == [True, False]
    assert [shows_change(history, i, after) for i in (0, 1)] == [True, True]
    foreign = {**after, **{c: "someone-else" for c in after if c.endswith("__eid")}}
    assert [shows_change(history, i, foreign) for i in (0, 1)] == [False, False]


def test_duplicates_review_quarantine_and_fields_nobody_offers() -> None:
    created = ev("c", 0, user_id="u1", amount=Decimal("5.00"), address="A")
    again = ev("c", 0, eid=created.event_id, user_id="u1", amount=Decimal("5.00"), address="A")
    suspicious = ev("u", 9, address="S", quality="SUSPICIOUS")
    invalid = ev("u", 8, address="I", quality="INVALID")
    view = ev("behaviour", 3)
    events = [created, again, suspicious, invalid, view]
    silver = run(events)["1001"]
    out = explain_order("1001", silver, bronze(events))
    outcome = {(e.event.event_id, e.event.offset): e.outcome for e in out.timeline}
    assert outcome == {
        (created.event_id, created.offset): "won",
        (again.event_id, again.offset): "duplicate",
        (suspicious.event_id, suspicious.offset): "review",
        (invalid.event_id, invalid.offset): "quarantined",
        (view.event_id, view.offset): "no_field",
    }
    dup = next(e for e in out.timeline if e.outcome == "duplicate")
    assert dup.first_delivery is not None and dup.first_delivery.offset == created.offset
    address = next(f for f in out.fields if f.field == "address")
    assert {(o.value, o.outcome) for o in address.others} == {
        ("A", "duplicate"),
        ("S", "review"),
        ("I", "quarantined"),
    }
    logistics = next(f for f in out.fields if f.field == "logistics_state")
    assert logistics.value is None and logistics.winner is None and logistics.others == ()


def test_a_silver_version_behind_bronze_names_the_newer_events_pending() -> None:
    first = ev("c", 0, address="A")
    newer = ev("u", 5, address="B")
    silver = run([first])["1001"]
    out = explain_order("1001", silver, bronze([first, newer]))
    entry = next(e for e in out.timeline if e.event.event_id == newer.event_id)
    assert entry.outcome == "pending" and "not applied at the silver version read" in entry.detail
    assert out.problems == ()


def test_a_winner_missing_from_bronze_is_a_problem_not_a_guess() -> None:
    first, second = ev("c", 0, address="A"), ev("u", 5, address="B")
    silver = run([first, second])["1001"]
    out = explain_order("1001", silver, bronze([first]))
    assert any(p.startswith("address: silver's value was set by") for p in out.problems)


KINDS = ["c", "u", "d", "payment", "logistics", "behaviour"]


@st.composite
def streams(draw: st.DrawFn) -> list[StandardEvent]:
    """One order's events: few distinct times (many ties), every quality, re-deliveries."""
    specs = draw(
        st.lists(
            st.tuples(
                st.sampled_from(KINDS),
                st.integers(0, 5),
                st.sampled_from(["VALID", "VALID", "VALID", "SUSPICIOUS", "INVALID"]),
                st.sampled_from([None, "u1", "u2"]),
                st.sampled_from([None, Decimal("1.00"), Decimal("2.50")]),
                st.sampled_from([None, "A", "B"]),
                st.sampled_from([None, "x", "y"]),
            ),
            min_size=1,
            max_size=20,
        )
    )
    events = [
        ev(
            k,
            m,
            quality=q,
            user_id=u,
            amount=a,
            address=ad,
            logistics_state=lg,
            status=None if k != "payment" else "paid",
        )
        for k, m, q, u, a, ad, lg in specs
    ]
    dups = draw(st.lists(st.sampled_from(events), max_size=5))
    order = draw(st.permutations(events + dups))
    # Offsets in arrival order: the delivery order bronze gives them.
    return [replace(e, offset=i) for i, e in enumerate(order)]


def _first_deliveries(events: list[StandardEvent]) -> list[StandardEvent]:
    ids: set[str] = set()
    out = []
    for e in events:
        if e.quality == "VALID" and e.event_id in ids:
            continue
        out.append(e)
        if e.quality == "VALID":
            ids.add(e.event_id)
    return out


@settings(max_examples=200, deadline=None)
@given(events=streams(), cut=st.integers(0, 20))
def test_every_event_once_with_one_reason_and_the_winners_give_silver(
    events: list[StandardEvent], cut: int
) -> None:
    # Silver as the job leaves it: re-deliveries kept out by the de-dup, maybe behind bronze (``cut``).
    seen = _first_deliveries(events[: min(cut, len(events))] if cut < len(events) else events)
    silver_rows = run(seen)
    oracle = oracle_rows(seen)
    assert silver_rows == oracle
    silver: dict[str, Any] | None = silver_rows.get("1001")
    table = bronze(events)
    out = explain_order("1001", silver, table)

    assert out.problems == ()
    assert Counter((e.event.topic, e.event.partition, e.event.offset) for e in out.timeline) == Counter(
        (e.topic, e.partition, e.offset) for e in events
    )
    assert all(e.outcome in OUTCOMES for e in out.timeline)
    for f in out.fields:
        if silver is None or silver[f.field] is None:
            assert f.winner is None
            continue
        assert f.winner is not None and f.winner.event_id == silver[f.id_column]
        assert f.winner.quality == "VALID"
        winner_entry = next(e for e in out.timeline if e.event is f.winner)
        assert winner_entry.outcome == "won" and f.field in winner_entry.fields_won
        # Every other event offering the field lost for a reason the rule gives.
        for other in f.others:
            assert other.outcome != "won"
            if other.outcome == "older":
                assert other.event.event_time < silver[f.time_column]
    if cut >= len(events) and silver is not None:
        assert not any(e.outcome == "pending" for e in out.timeline)
    assert set(g.value for g in SILVER_MERGE.groups()) == {f.field for f in out.fields}
