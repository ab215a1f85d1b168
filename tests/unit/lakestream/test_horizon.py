"""The event-time horizon rule: quiet partitions hold nothing back, and a run seeded from it starts there."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakestream.horizon import horizon_of
from lakestream.progress import recorded_watermarks

OOO = timedelta(minutes=5)
QUIET = timedelta(hours=1)


def ms(hh_mm: str) -> int:
    h, m = map(int, hh_mm.split(":"))
    return int(datetime(2024, 6, 1, h, m, tzinfo=timezone.utc).timestamp() * 1000)


def test_a_quiet_partition_does_not_hold_the_horizon_and_is_raised_to_it_at_the_next_start() -> None:
    # The case: behaviour carried one event at 04:30, every other partition ran to 14:45.
    maxima = {"orders/0": ms("14:45"), "orders/1": ms("14:40"), "behaviour/0": ms("04:30")}
    h = horizon_of(maxima, OOO, QUIET)
    assert h is not None
    assert h.quiet == {"behaviour/0": ms("04:30")}
    assert h.watermark_ms == ms("14:35") - 1
    assert h.seeds(maxima) == {**maxima, "behaviour/0": ms("14:40")}
    # Partitions the horizon does not know (no record) are left as they are.
    assert h.seeds({"logistics/3": ms("01:00")}) == {"logistics/3": ms("01:00")}


def test_exactly_quiet_after_behind_still_holds_the_horizon() -> None:
    maxima = {"a/0": ms("14:45"), "a/1": ms("13:45")}
    h = horizon_of(maxima, OOO, QUIET)
    assert h is not None and not h.quiet and h.watermark_ms == ms("13:40") - 1
    h = horizon_of({**maxima, "a/1": ms("13:45") - 1}, OOO, QUIET)
    assert h is not None and h.quiet == {"a/1": ms("13:45") - 1} and h.watermark_ms == ms("14:40") - 1


def test_nothing_recorded_has_no_horizon_and_quiet_after_must_be_positive() -> None:
    assert horizon_of({}, OOO, QUIET) is None
    with pytest.raises(ValueError, match="quiet_after"):
        horizon_of({"a/0": 1}, OOO, timedelta(0))


def test_recorded_watermarks_are_the_newest_per_partition_over_every_writer() -> None:
    apps = {
        "ingest/bronze/order_events:progress:watermark/orders/0": 50,
        "old-name/bronze/order_events:progress:watermark/orders/0": 70,
        "ingest/bronze/order_events:progress:watermark/pay/1": 10,
        "ingest/bronze/order_events:progress:kafka/orders/0": 999,
        "ingest/bronze/order_events:0123abcd:3": 4,
    }
    assert recorded_watermarks(apps) == {"orders/0": 70, "pay/1": 10}


maxima_st = st.dictionaries(
    st.sampled_from([f"t/{i}" for i in range(6)]), st.integers(0, 10 * 3_600_000), min_size=1
)


@given(maxima_st, st.integers(1, 5 * 3_600_000))
def test_a_run_seeded_from_the_horizon_starts_with_its_lowest_watermark_exactly_there(
    maxima: dict[str, int], quiet_ms: int
) -> None:
    h = horizon_of(maxima, OOO, timedelta(milliseconds=quiet_ms))
    assert h is not None
    seeds = h.seeds(maxima)
    bound = OOO // timedelta(milliseconds=1)
    assert min(seeds.values()) - bound - 1 == h.watermark_ms
    # Never below the rule without quiet partitions, never above the newest partition's own watermark.
    assert min(maxima.values()) - bound - 1 <= h.watermark_ms <= max(maxima.values()) - bound - 1
    assert set(h.active) | set(h.quiet) == set(maxima) and max(maxima, key=maxima.__getitem__) in h.active


@given(maxima_st, st.sampled_from([f"t/{i}" for i in range(6)]), st.integers(0, 10 * 3_600_000))
def test_a_partition_that_advances_from_its_raised_seed_never_moves_the_horizon_back(
    maxima: dict[str, int], key: str, newer: int
) -> None:
    """What ingest records after a start from the seeds is at least the seed: the horizon only rises.

    (A partition with no record yet is not seeded: its first events may be older; DESIGN.md section 9.)
    """
    h = horizon_of(maxima, OOO, QUIET)
    assert h is not None
    seeds = h.seeds(maxima)
    key = key if key in seeds else min(seeds)
    after = {**seeds, key: max(seeds[key], newer)}
    later = horizon_of(after, OOO, QUIET)
    assert later is not None and later.watermark_ms >= h.watermark_ms
