"""``DedupCache``: ids remembered for a TTL of processing time, asked once per batch."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakestream.dedup import DedupCache

T0 = datetime(2024, 6, 1, 4, 0, tzinfo=timezone.utc)


def test_dedup_cache_remembers_for_ttl_of_processing_time() -> None:
    cache = DedupCache(timedelta(minutes=30))
    assert cache.seen("a", T0) is False
    assert cache.seen("a", T0 + timedelta(minutes=29)) is True
    assert cache.seen("b", T0 + timedelta(minutes=29)) is False
    assert cache.seen("a", T0 + timedelta(minutes=30)) is False  # expired: treated as new, re-recorded
    assert cache.seen("a", T0 + timedelta(minutes=31)) is True
    assert len(cache) == 2  # "b" and the new "a"
    cache.seen("c", T0 + timedelta(hours=5))
    assert len(cache) == 1  # expired ids are evicted as processing time advances


def test_dedup_cache_bounds_memory() -> None:
    cache = DedupCache(timedelta(days=1), max_entries=2)
    for i, eid in enumerate("abc"):
        assert not cache.seen(eid, T0 + timedelta(seconds=i))
    assert len(cache) == 2
    assert cache.seen("c", T0) and cache.seen("b", T0) and not cache.seen("a", T0)


def _dedup_reference(
    calls: list[tuple[list[str], datetime]], ttl: timedelta, max_entries: int | None
) -> tuple[list[bool], int]:
    """The de-dup rule record by record, on a plain list in recency order (the oracle)."""
    entries: list[list[Any]] = []  # [id, expires at], oldest first
    fresh: list[bool] = []
    for ids, now in calls:
        while entries and entries[0][1] <= now:  # expired ids are swept at each call
            entries.pop(0)
        for event_id in ids:
            hit = next((e for e in entries if e[0] == event_id), None)
            if hit is not None and hit[1] > now:
                fresh.append(False)
                continue
            if hit is not None:
                entries.remove(hit)
            entries.append([event_id, now + ttl])
            if max_entries is not None and len(entries) > max_entries:
                entries.pop(0)
            fresh.append(True)
    return fresh, len(entries)


@settings(max_examples=1000, deadline=None)
@given(
    calls=st.lists(
        st.tuples(
            st.lists(st.sampled_from("abcd"), max_size=6),
            st.integers(min_value=-4, max_value=4),  # minutes; negative steps: the clock went back
        ),
        max_size=10,
    ),
    ttl_minutes=st.integers(min_value=1, max_value=4),
    max_entries=st.one_of(st.none(), st.integers(min_value=1, max_value=4)),
)
def test_dedup_first_seen_per_batch_equals_the_rule_record_by_record(
    calls: list[tuple[list[str], int]], ttl_minutes: int, max_entries: int | None
) -> None:
    ttl = timedelta(minutes=ttl_minutes)
    timed, now = [], T0
    for ids, step in calls:
        now += timedelta(minutes=step)
        timed.append((ids, now))
    cache = DedupCache(ttl, max_entries=max_entries)
    got = [flag for ids, at in timed for flag in cache.first_seen(ids, at)]
    want, size = _dedup_reference(timed, ttl, max_entries)
    assert got == want
    assert len(cache) == size


def test_dedup_cache_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="ttl: must be positive"):
        DedupCache(timedelta(0))
    with pytest.raises(ValueError, match="max_entries: must be positive"):
        DedupCache(timedelta(1), max_entries=0)
