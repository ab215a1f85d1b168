"""The demo feed's plan: deterministic partitions, end offsets known in advance, an even pace."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo.event_feed import due, end_offsets, partition_for, per_source, plan
from devtools.sample_events import SampleSettings, generate

TOPICS = {"orders_db": "o", "payments": "p", "logistics": "l", "behaviour": "b"}


def test_plan_is_deterministic_and_keeps_each_sources_order() -> None:
    sample = generate(SampleSettings(orders=60))
    partitions = dict.fromkeys(TOPICS.values(), 2)
    first, second = plan(sample, TOPICS, partitions), plan(sample, TOPICS, partitions)
    assert first == second
    assert [r.value for r in first] == [e.value for e in sample]
    assert {r.partition for r in first} == {0, 1}
    # Every event of one order (same key) shares a partition; keyless (malformed) ones are placed too.
    by_key: dict[tuple[str, bytes], set[int]] = {}
    for r in first:
        if r.key is not None:
            by_key.setdefault((r.topic, r.key), set()).add(r.partition)
    assert all(len(p) == 1 for p in by_key.values())
    assert any(r.key is None for r in first)


def test_partition_for_is_in_range_for_any_partition_count() -> None:
    sample = generate(SampleSettings(orders=30))
    for n in (1, 3, 8):
        assert {partition_for(e, n) for e in sample} <= set(range(n))
    assert {partition_for(e, 1) for e in sample} == {0}


def test_end_offsets_add_the_planned_records_to_where_partitions_end() -> None:
    sample = generate(SampleSettings(orders=40))
    records = plan(sample, TOPICS, dict.fromkeys(TOPICS.values(), 2))
    start = {(t, p): 10 for t in TOPICS.values() for p in (0, 1)}
    ends = end_offsets(start, records)
    assert sum(ends.values()) - sum(start.values()) == len(records)
    for (topic, partition), end in ends.items():
        assert end - 10 == sum(1 for r in records if (r.topic, r.partition) == (topic, partition))
    assert per_source(records) == {s: sum(1 for e in sample if e.source == s) for s in TOPICS}


@pytest.mark.parametrize(
    ("elapsed", "total", "seconds", "expected"),
    [
        (0.0, 100, 10.0, 1),  # the first record goes at once
        (5.0, 100, 10.0, 51),
        (9.99, 100, 10.0, 100),
        (10.0, 100, 10.0, 100),
        (50.0, 100, 10.0, 100),
        (0.0, 100, 0.0, 100),  # no pace: everything at once
        (3.0, 0, 10.0, 0),
        (-1.0, 10, 10.0, 1),
    ],
)
def test_due_spreads_records_evenly(elapsed: float, total: int, seconds: float, expected: int) -> None:
    assert due(elapsed, total, seconds) == expected


def test_due_never_decreases() -> None:
    counts = [due(t / 10, 37, 5.0) for t in range(0, 60)]
    assert counts == sorted(counts) and counts[-1] == 37


def test_offsets_round_trip_through_their_file(tmp_path: Path) -> None:
    from demo.event_feed import read_offsets, write_offsets

    offsets = {("b", 1): 7, ("a", 0): 0, ("a", 1): 12}
    write_offsets(tmp_path / "x" / "end.json", offsets)
    assert read_offsets(tmp_path / "x" / "end.json") == offsets
