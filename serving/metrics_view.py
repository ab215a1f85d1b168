"""What the serving side shows of the gold metrics: one row per window and the day's running totals.

Pure functions over gold rows, shared by ``lakestream query metrics`` and ``lakestream serve`` so that
the command line, the JSON API and the page agree. The rule (DESIGN.md section 12): each window is
served by its batch row when the batch layer has the window, else by its realtime row; every served
row keeps its ``layer`` and ``data_time``. Running totals add up per UTC day from the day's first window;
``active_users`` is per window only (users active in two windows would be counted twice), so it has no
running total.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from lakestream.errors import FAILED, LakestreamError
from lakestream.gold import LAYER_BATCH, LAYER_REALTIME
from lakestream.time import EPOCH

BATCH = LAYER_BATCH
REALTIME = LAYER_REALTIME
LAYERS = (BATCH, REALTIME)


class GoldDataError(LakestreamError, ValueError):
    """The gold rows break the table's contract (unknown layer, two rows of one layer for a window)."""

    exit_code = FAILED
    preface = "the gold table breaks its contract: "


@dataclass(frozen=True, slots=True)
class GoldRow:
    """One row of the gold table ``gold/order_metrics_5m`` (times UTC-aware, ``gmv`` in yuan)."""

    window_start: datetime
    window_end: datetime
    events: int
    orders_created: int
    payments: int
    gmv: Decimal
    active_users: int
    layer: str
    data_time: datetime | None
    source_version: int | None
    updated_at: datetime | None


@dataclass(frozen=True, slots=True)
class DayTotals:
    """Cumulative sums of the additive metrics from the UTC day's first window through one window."""

    events: int = 0
    orders_created: int = 0
    payments: int = 0
    gmv: Decimal = Decimal("0.00")

    def plus(self, row: GoldRow) -> DayTotals:
        """These totals with ``row``'s metrics added."""
        return DayTotals(
            self.events + row.events,
            self.orders_created + row.orders_created,
            self.payments + row.payments,
            self.gmv + row.gmv,
        )


@dataclass(frozen=True, slots=True)
class ServedWindow:
    """A served gold row with its day's running totals through it."""

    row: GoldRow
    day: DayTotals


@dataclass(frozen=True, slots=True)
class EmptyWindow:
    """A window of the range that has no gold row (no events reached either layer for it)."""

    window_start: datetime
    window_end: datetime
    day: DayTotals


def select_windows(rows: Iterable[GoldRow]) -> list[GoldRow]:
    """One row per ``window_start``, sorted by it: the batch row if there is one, else the realtime row.

    Two rows of the same layer for one window, or a layer other than batch/realtime, break the gold
    table's contract and raise :class:`GoldDataError` naming the window: numbers picked silently
    from duplicates would not be trustworthy.
    """
    chosen: dict[datetime, GoldRow] = {}
    for row in rows:
        if row.layer not in LAYERS:
            raise GoldDataError(
                f"window {row.window_start.isoformat()}: layer {row.layer!r} is neither "
                f"{BATCH!r} nor {REALTIME!r}"
            )
        other = chosen.get(row.window_start)
        if other is None:
            chosen[row.window_start] = row
        elif other.layer == row.layer:
            raise GoldDataError(
                f"window {row.window_start.isoformat()} has two {row.layer} rows; the gold table holds at "
                "most one row per window"
            )
        elif row.layer == BATCH:
            chosen[row.window_start] = row
    return [chosen[start] for start in sorted(chosen)]


def batch_through(selected: Sequence[GoldRow]) -> datetime | None:
    """The end of the newest batch window among ``selected``: every window after it is realtime.

    Windows before it are batch, except windows the batch layer has no row for (it read no events
    there) that the realtime layer filled afterwards; those stay labelled realtime.
    """
    ends = [row.window_end for row in selected if row.layer == BATCH]
    return max(ends) if ends else None


def _day(when: datetime) -> tuple[int, int, int]:
    utc = when.astimezone(timezone.utc)
    return utc.year, utc.month, utc.day


def running_totals(selected: Sequence[GoldRow]) -> list[ServedWindow]:
    """Each row with its UTC day's running totals; ``selected`` sorted by window, from the day's start.

    Totals restart at each UTC day (of ``window_start``); a day's totals count only the rows given, so
    pass the rows from midnight on (:func:`serve_range` does).
    """
    out: list[ServedWindow] = []
    totals = DayTotals()
    day: tuple[int, int, int] | None = None
    for row in selected:
        if _day(row.window_start) != day:
            day, totals = _day(row.window_start), DayTotals()
        totals = totals.plus(row)
        out.append(ServedWindow(row, totals))
    return out


def in_range(served: Sequence[ServedWindow], start: datetime, end: datetime) -> list[ServedWindow]:
    """The served windows with ``start <= window_start < end`` (``served`` sorted by window)."""
    keys = [s.row.window_start for s in served]
    return list(served[bisect.bisect_left(keys, start) : bisect.bisect_left(keys, end)])


def serve_range(rows: Iterable[GoldRow], start: datetime, end: datetime) -> list[ServedWindow]:
    """The windows of ``[start, end)`` as served, with running totals counted from each day's midnight.

    ``rows`` must include the rows from the UTC midnight before ``start`` (earlier ones do no harm).
    """
    return in_range(running_totals(select_windows(rows)), start, end)


def check_window(rows: Iterable[GoldRow], window: timedelta) -> None:
    """Every row spans exactly ``window`` (``gold.window``); else :class:`GoldDataError` naming one."""
    for row in rows:
        if row.window_end - row.window_start != window:
            raise GoldDataError(
                f"window {row.window_start.isoformat()} lasts {row.window_end - row.window_start}, but "
                f"gold.window is {window}: set gold.window to the table's window"
            )


def with_empty_windows(
    served: Sequence[ServedWindow], start: datetime, end: datetime, window: timedelta
) -> list[ServedWindow | EmptyWindow]:
    """Every window of ``[start, end)`` (tumbling, aligned to the epoch): served ones and empty ones.

    An empty window carries its day's totals so far, unchanged by it; so that they count the day from
    midnight, ``served`` may (and should) include the served windows of the day before ``start``.
    """
    if window <= timedelta(0):
        raise ValueError(f"window must be positive, got {window}")
    rows = [s for s in served if s.row.window_start < end]
    starts = {s.row.window_start for s in rows}
    offset = (start - EPOCH) % window
    t = start if not offset else start - offset + window
    slots: list[tuple[datetime, ServedWindow | None]] = [(s.row.window_start, s) for s in rows]
    while t < end:
        if t not in starts:
            slots.append((t, None))
        t += window
    slots.sort(key=lambda slot: slot[0])
    out: list[ServedWindow | EmptyWindow] = []
    totals, day = DayTotals(), None
    for when, s in slots:
        if _day(when) != day:
            totals, day = DayTotals(), _day(when)
        item: ServedWindow | EmptyWindow
        if s is not None:
            totals, item = s.day, s
        else:
            item = EmptyWindow(when, when + window, totals)
        if when >= start:
            out.append(item)
    return out
