"""Reconciliation rules: gold against a recompute, window by window and metric by metric; the fix budget.

Pure functions, so the comparison, the grouping of windows into backfills and the daily limit on
fixes are decided the same way wherever they are used (``lakestream reconcile``; DESIGN.md section 11).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from lakestream.gold import METRIC_NAMES

UTC = timezone.utc


@dataclass(frozen=True, slots=True)
class Difference:
    """One metric of one window whose gold value is not the recomputed one."""

    window_start: datetime
    window_end: datetime
    metric: str
    gold: Decimal
    recomputed: Decimal

    @property
    def difference(self) -> Decimal:
        """``recomputed - gold``: positive when gold misses something."""
        return self.recomputed - self.gold

    def exceeds(self, threshold: Decimal) -> bool:
        """Whether ``|difference| > threshold`` (the threshold is absolute, per metric)."""
        return abs(self.difference) > threshold


def compare(
    gold: Iterable[Mapping[str, Any]],
    recomputed: Sequence[Mapping[str, Any]],
    *,
    metrics: Sequence[str] = METRIC_NAMES,
) -> list[Difference]:
    """Every (window, metric) of ``recomputed`` whose value in ``gold`` differs, in window then metric order.

    ``recomputed`` has one row per window of the range; a window missing from ``gold`` counts as zeros.
    Gold rows of other windows are not looked at.
    """
    held = {row["window_start"]: row for row in gold}
    out: list[Difference] = []
    for row in recomputed:
        have = held.get(row["window_start"])
        for metric in metrics:
            want = Decimal(row[metric])
            got = Decimal(have[metric]) if have is not None and have[metric] is not None else Decimal(0)
            if got != want:
                out.append(Difference(row["window_start"], row["window_end"], metric, got, want))
    return out


def contiguous_runs(starts: Iterable[datetime], window: timedelta) -> list[tuple[datetime, datetime]]:
    """Window starts as the fewest ``[start, end)`` ranges of adjacent windows, in order."""
    runs: list[tuple[datetime, datetime]] = []
    for start in sorted(set(starts)):
        if runs and runs[-1][1] == start:
            runs[-1] = (runs[-1][0], start + window)
        else:
            runs.append((start, start + window))
    return runs


def fixes_on(day: date, fix_runs: Iterable[tuple[str, datetime]]) -> int:
    """How many distinct fix runs (run id, run time) ran on UTC ``day``."""
    return len({run_id for run_id, when in fix_runs if when.astimezone(UTC).date() == day})


def fix_allowed(now: datetime, fix_runs: Iterable[tuple[str, datetime]], max_per_day: int) -> bool:
    """Whether one more fix run fits the budget of ``max_per_day`` fix runs on ``now``'s UTC day."""
    return fixes_on(now.astimezone(UTC).date(), fix_runs) < max_per_day
