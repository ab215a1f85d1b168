"""Buckets, id hashes and the split of a batch by owning subtask."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakestream.keys import bucket_of, id_hash, split_by_subtask, subtask_of


def test_hashes_are_pinned() -> None:
    # De-dup state keeps these across versions and restores: they must never change.
    assert id_hash("payments:P1") == (7523383764723265305, 3679415133692213651)
    assert bucket_of("1001", "x", 128) == 13
    assert bucket_of(None, "behaviour:abc", 128) == 87


def test_the_bucket_follows_the_order_and_falls_back_to_the_event_id() -> None:
    assert bucket_of("1001", "a", 128) == bucket_of("1001", "b", 128)
    assert bucket_of(None, "a", 128) == bucket_of("a", "other", 128)
    assert all(0 <= bucket_of(str(i), "e", 7) < 7 for i in range(200))


def test_key_groups_are_spread_over_subtasks_in_contiguous_ranges() -> None:
    owners = [subtask_of(kg, 3, 128) for kg in range(128)]
    assert owners == sorted(owners) and set(owners) == {0, 1, 2}
    assert {subtask_of(kg, 1, 128) for kg in range(128)} == {0}
    assert [subtask_of(kg, 128, 128) for kg in range(128)] == list(range(128))


ids = st.lists(
    st.tuples(
        st.sampled_from([None, "o1", "o2", "o3", "o4", "订单-7"]),
        st.one_of(st.text("abc", max_size=3), st.text(max_size=12)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ids, st.integers(1, 8), st.sampled_from([8, 16, 128, 1000, 32768]))
def test_split_by_subtask_places_every_event_once_with_its_owner(
    events: list[tuple[str | None, str]], parallelism: int, max_parallelism: int
) -> None:
    order_ids = [o for o, _ in events]
    event_ids = [e for _, e in events]
    parts = split_by_subtask(order_ids, event_ids, parallelism=parallelism, max_parallelism=max_parallelism)
    assert [p.subtask for p in parts] == sorted({p.subtask for p in parts})
    assert sorted(i for p in parts for i in p.positions) == list(range(len(events)))
    for part in parts:
        assert part.positions == sorted(part.positions)
        for i, bucket, hi, lo in zip(part.positions, part.buckets, part.id_hi, part.id_lo, strict=True):
            assert bucket == bucket_of(order_ids[i], event_ids[i], max_parallelism)
            assert subtask_of(bucket, parallelism, max_parallelism) == part.subtask
            assert (hi, lo) == id_hash(event_ids[i])
    # One order's events, and all copies of one event, go to one subtask.
    owner: dict[tuple[str, str], int] = {}
    for part in parts:
        for i in part.positions:
            key = ("order", order_ids[i]) if order_ids[i] is not None else ("event", event_ids[i])
            assert owner.setdefault(key, part.subtask) == part.subtask  # type: ignore[arg-type]


def test_split_by_subtask_gives_python_ints_in_lists() -> None:
    # The parts go to Beam's coders as they are: lists of plain ints, not numpy values.
    (part,) = split_by_subtask(["o"], ["e"], parallelism=1, max_parallelism=128)
    for column in (part.positions, part.buckets, part.id_hi, part.id_lo):
        assert type(column) is list and all(type(v) is int for v in column)
    assert split_by_subtask([], [], parallelism=2, max_parallelism=128) == []
    with pytest.raises(ValueError, match="order_ids"):
        split_by_subtask(["o"], [], parallelism=1, max_parallelism=128)


def test_bad_parallelism_names_the_settings() -> None:
    with pytest.raises(ValueError, match=r"flink.parallelism \(3\) .* flink.max_parallelism \(2\)"):
        split_by_subtask(["o"], ["e"], parallelism=3, max_parallelism=2)
