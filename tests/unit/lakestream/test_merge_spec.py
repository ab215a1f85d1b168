"""``MergeSpec``: one rule, three interpreters (SQL for Delta, the Python reference fold, numpy).

Hand-written cases pin the Python reference to the rule as DESIGN.md states it; property tests hold the
columnar pre-reduction (``lakestream.merge_reduce``) to the reference. The Delta MERGE is held to it in
``tests/unit/sinks/test_merge_mode.py``, on real tables.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakestream.merge_reduce import reduce_guarded, reduce_latest
from lakestream.merge_spec import MergeSpec, MergeSpecError
from lakestream.silver import SILVER_MERGE, SILVER_SCHEMA
from tests.support.silver_rows import change, ts

SPEC, SILVER = SILVER_MERGE, SILVER_SCHEMA
UTC = dt.timezone.utc


# ---------------------------------------------------------------- the definition


def test_spec_refuses_a_column_with_two_roles() -> None:
    with pytest.raises(MergeSpecError, match="'a' is both a key and a guarded value"):
        MergeSpec(keys=("a",), guarded={"a": "t"})
    with pytest.raises(MergeSpecError, match="'t' is both the event-time column of 'x'"):
        MergeSpec(keys=("k",), guarded={"x": "t", "y": "t"})
    with pytest.raises(MergeSpecError, match="neither a guarded nor a greatest"):
        MergeSpec(keys=("k",), companions={"z": ("z_id",)})
    with pytest.raises(MergeSpecError, match="does not have: nope"):
        MergeSpec(keys=("k",), greatest=("nope",)).validate(pa.schema([("k", pa.string())]))


def test_update_sql_guards_value_time_and_companion_together() -> None:
    updates = SPEC.update_expressions(SILVER)
    cond = 's."status" IS NOT NULL AND (t."status__ts" IS NULL OR s."status__ts" >= t."status__ts")'
    for col in ("status", "status__ts", "status__eid"):
        assert updates[f'"{col}"'] == f'CASE WHEN {cond} THEN s."{col}" ELSE t."{col}" END'
    lasts = 't."last_event_time" IS NULL OR s."last_event_time" >= t."last_event_time"'
    assert lasts in updates['"last_event_id"']
    assert '"order_id"' not in updates and len(updates) == len(SILVER) - 1


# ---------------------------------------------------------------- the Python reference


def test_newer_value_wins_and_older_loses_field_by_field() -> None:
    row = SPEC.merge_row(None, change("1", "a", 5, address="A", status="created"), SILVER)
    row = SPEC.merge_row(row, change("1", "b", 1, address="B", amount=3), SILVER)
    assert (row["address"], row["address__eid"], row["status"], row["amount"]) == ("A", "a", "created", 3)
    assert (row["last_event_time"], row["last_event_id"]) == (ts(5), "a")


def test_a_null_never_erases_even_when_newer() -> None:
    target = SPEC.merge_row(None, change("1", "a", 1, address="A"), SILVER)
    newer_null = {**change("1", "b", 9, address=None), "address__ts": ts(9), "address__eid": "b"}
    merged = SPEC.merge_row(target, newer_null, SILVER)
    assert (merged["address"], merged["address__ts"], merged["address__eid"]) == ("A", ts(1), "a")


def test_ties_go_to_the_later_arrival_and_false_is_a_value() -> None:
    a, b = change("1", "a", 5, deleted=True), change("1", "b", 5, deleted=False)
    assert SPEC.fold_rows([a, b], SILVER)[("1",)]["deleted"] is False
    assert SPEC.fold_rows([b, a], SILVER)[("1",)]["deleted"] is True
    assert SPEC.fold_rows([a, b], SILVER)[("1",)]["last_event_id"] == "b"


def test_a_null_source_time_never_beats_a_time_but_fills_an_empty_field() -> None:
    timed = change("1", "a", 5, status="x")
    untimed = {**change("1", "b", 6, status="y"), "status__ts": None}
    assert SPEC.fold_rows([timed, untimed], SILVER)[("1",)]["status"] == "x"
    assert SPEC.fold_rows([untimed], SILVER)[("1",)]["status"] == "y"


def test_folding_is_idempotent_and_keys_must_match() -> None:
    rows = [change("1", "a", 3, address="A"), change("1", "b", 1, status="s"), change("2", "c", 2, amount=1)]
    once = SPEC.fold_rows(rows, SILVER)
    assert SPEC.fold_rows(rows, SILVER, once) == once
    with pytest.raises(ValueError, match=r"order_id: cannot merge row \('2',\) into row \('1',\)"):
        SPEC.merge_row(once[("1",)], rows[2], SILVER)


def test_unguarded_columns_take_the_last_non_null_value() -> None:
    schema = pa.schema([("k", pa.string()), ("u", pa.int64())])
    spec = MergeSpec(keys=("k",))
    rows = [{"k": "x", "u": 1}, {"k": "x", "u": None}, {"k": "x", "u": 2}, {"k": "x", "u": None}]
    assert spec.fold_rows(rows, schema) == {("x",): {"k": "x", "u": 2}}


# ---------------------------------------------------------------- columnar pre-reduction = the reference


SMALL = pa.schema(
    [
        ("k", pa.string()),
        ("a", pa.string()),
        ("a_t", pa.int64()),
        ("a_id", pa.string()),
        ("g", pa.int64()),
        ("g_id", pa.string()),
        ("u", pa.int64()),
    ]
)
SMALL_SPEC = MergeSpec(
    keys=("k",), guarded={"a": "a_t"}, greatest=("g",), companions={"a": ("a_id",), "g": ("g_id",)}
)
maybe_int = st.none() | st.integers(0, 3)
small_rows = st.lists(
    st.fixed_dictionaries(
        {
            "k": st.sampled_from(["x", "y", "z"]),
            "a": st.none() | st.sampled_from(["p", "q", "r"]),
            "a_t": maybe_int,
            "a_id": st.text("ab", max_size=2),
            "g": maybe_int,
            "g_id": st.text("ab", max_size=2),
            "u": maybe_int,
        }
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=150, deadline=None)
@given(small_rows)
def test_reduce_guarded_equals_the_reference_fold(rows: list[dict[str, Any]]) -> None:
    reduced = reduce_guarded(pa.Table.from_pylist(rows, schema=SMALL), SMALL_SPEC)
    expected = SMALL_SPEC.fold_rows(rows, SMALL)
    assert {(r["k"],): r for r in reduced.to_pylist()} == expected
    assert reduced.num_rows == len(expected)


# Two key columns (the sort path), a timestamp guard and a string "greatest" column (the rank path).
WIDE = pa.schema(
    [
        ("k1", pa.string()),
        ("k2", pa.int64()),
        ("a", pa.string()),
        ("a_t", pa.timestamp("us", tz="UTC")),
        ("g", pa.string()),
        ("u", pa.int64()),
    ]
)
WIDE_SPEC = MergeSpec(keys=("k1", "k2"), guarded={"a": "a_t"}, greatest=("g",))
some_time = st.none() | st.sampled_from(
    [dt.datetime(2024, 6, 1, h, tzinfo=dt.timezone.utc) for h in (0, 1, 2)]
)
wide_rows = st.lists(
    st.fixed_dictionaries(
        {
            "k1": st.sampled_from(["x", "y"]),
            "k2": st.integers(0, 1),
            "a": st.none() | st.sampled_from(["p", "q"]),
            "a_t": some_time,
            "g": st.none() | st.sampled_from(["", "m", "n"]),
            "u": maybe_int,
        }
    ),
    min_size=1,
    max_size=16,
)


@settings(max_examples=150, deadline=None)
@given(wide_rows, st.integers(1, 4))
def test_reduce_guarded_with_two_keys_and_timestamps_equals_the_reference_fold(
    rows: list[dict[str, Any]], chunk: int
) -> None:
    table = pa.Table.from_pylist(rows, schema=WIDE)
    chunked = pa.concat_tables([table.slice(i, chunk) for i in range(0, table.num_rows, chunk)])
    reduced = reduce_guarded(chunked, WIDE_SPEC)
    expected = WIDE_SPEC.fold_rows(rows, WIDE)
    assert {(r["k1"], r["k2"]): r for r in reduced.to_pylist()} == expected
    assert reduced.num_rows == len(expected)
    last_arrival = {}
    for i, r in enumerate(rows):
        last_arrival[(r["k1"], r["k2"])] = i
    assert [(r["k1"], r["k2"]) for r in reduced.to_pylist()] == sorted(last_arrival, key=last_arrival.get)


@settings(max_examples=100, deadline=None)
@given(small_rows)
def test_reduce_latest_keeps_the_last_row_per_key(rows: list[dict[str, Any]]) -> None:
    reduced = reduce_latest(pa.Table.from_pylist(rows, schema=SMALL), ["k"])
    last = {r["k"]: r for r in rows}
    assert {r["k"]: r for r in reduced.to_pylist()} == last
