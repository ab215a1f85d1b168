"""The reconciliation rules: comparison (missing windows are zeros), contiguous fixes, the fix budget."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from lakestream.gold import METRIC_NAMES
from lakestream.reconcile_rules import Difference, compare, contiguous_runs, fix_allowed, fixes_on

UTC = timezone.utc
T0 = datetime(2024, 6, 1, tzinfo=UTC)
W = timedelta(minutes=5)


def _row(i: int, **metrics: Any) -> dict[str, Any]:
    base: dict[str, Any] = {name: 0 for name in METRIC_NAMES}
    base["gmv"] = Decimal("0.00")
    base.update(metrics)
    return {"window_start": T0 + i * W, "window_end": T0 + (i + 1) * W, **base}


def test_equal_windows_have_no_difference_and_other_gold_windows_are_ignored() -> None:
    recomputed = [_row(0, events=3, gmv=Decimal("1.50")), _row(1)]
    gold = [_row(0, events=3, gmv=Decimal("1.5")), _row(1), _row(7, events=99)]
    assert compare(gold, recomputed) == []


def test_a_missing_gold_window_counts_as_zeros() -> None:
    recomputed = [_row(0, events=2, active_users=1), _row(1)]
    diffs = compare([_row(1)], recomputed)
    assert diffs == [
        Difference(T0, T0 + W, "events", Decimal(0), Decimal(2)),
        Difference(T0, T0 + W, "active_users", Decimal(0), Decimal(1)),
    ]
    assert diffs[0].difference == 2
    # an empty recomputed window missing from gold is no difference
    assert compare([], [_row(3)]) == []


def test_differences_are_per_metric_and_signed_and_the_threshold_is_absolute() -> None:
    (d,) = compare([_row(0, gmv=Decimal("10.00"))], [_row(0, gmv=Decimal("9.25"))])
    assert (d.metric, d.gold, d.recomputed, d.difference) == (
        "gmv",
        Decimal("10.00"),
        Decimal("9.25"),
        Decimal("-0.75"),
    )
    assert d.exceeds(Decimal(0)) and d.exceeds(Decimal("0.74"))
    assert not d.exceeds(Decimal("0.75"))


@given(st.lists(st.integers(0, 40), max_size=30))
def test_contiguous_runs_cover_exactly_the_windows_with_the_fewest_ranges(indexes: list[int]) -> None:
    starts = [T0 + i * W for i in indexes]
    runs = contiguous_runs(starts, W)
    covered = [s + k * W for s, e in runs for k in range((e - s) // W)]
    assert covered == sorted(set(starts))
    # fewest: no two runs touch
    assert all(a[1] < b[0] for a, b in zip(runs, runs[1:], strict=False))


def test_contiguous_runs_example() -> None:
    starts = [T0 + 3 * W, T0, T0 + W, T0 + 5 * W, T0 + W]
    assert contiguous_runs(starts, W) == [
        (T0, T0 + 2 * W),
        (T0 + 3 * W, T0 + 4 * W),
        (T0 + 5 * W, T0 + 6 * W),
    ]


def test_fix_budget_counts_distinct_fix_runs_per_utc_day() -> None:
    now = datetime(2024, 6, 2, 0, 30, tzinfo=UTC)
    yesterday = datetime(2024, 6, 1, 23, 59, tzinfo=UTC)
    runs = [("a", now - timedelta(minutes=10)), ("a", now - timedelta(minutes=10)), ("b", yesterday)]
    assert fixes_on(now.date(), runs) == 1
    assert fix_allowed(now, runs, 2)
    assert not fix_allowed(now, runs + [("c", now)], 2)
    assert not fix_allowed(now, [], 0)
    # the UTC day, not the local one: 07:30 in Shanghai on 2 June is still 1 June 23:30 UTC
    shanghai = timezone(timedelta(hours=8))
    local = datetime(2024, 6, 2, 7, 30, tzinfo=shanghai)
    assert fixes_on(datetime(2024, 6, 1).date(), [("d", local)]) == 1
