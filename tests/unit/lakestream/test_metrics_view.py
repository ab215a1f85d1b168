"""The serving rule (batch where the batch layer has the window, else realtime) and the running totals."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serving.metrics_view import (
    BATCH,
    REALTIME,
    DayTotals,
    EmptyWindow,
    GoldDataError,
    ServedWindow,
    batch_through,
    check_window,
    running_totals,
    select_windows,
    serve_range,
    with_empty_windows,
)
from tests.support.gold_tables import WINDOW, at, row

T0 = at("2024-06-01T00:00")


def test_a_batch_row_serves_its_window_whatever_the_order_of_the_rows() -> None:
    rt = row(T0, layer=REALTIME, gmv="5.00")
    b = row(T0, layer=BATCH, gmv="7.00")
    assert select_windows([rt, b]) == [b]
    assert select_windows([b, rt]) == [b]


def test_realtime_serves_windows_the_batch_layer_has_no_row_for_sorted_by_window() -> None:
    b0 = row(T0, layer=BATCH)
    r2 = row(T0 + 2 * WINDOW, layer=REALTIME)
    r1 = row(T0 + WINDOW, layer=REALTIME)
    b2 = row(T0 + 2 * WINDOW, layer=BATCH)
    assert select_windows([r2, r1, b2, b0]) == [b0, r1, b2]


def test_two_rows_of_one_layer_for_a_window_break_the_contract() -> None:
    with pytest.raises(GoldDataError, match="two realtime rows"):
        select_windows([row(T0, gmv="1.00"), row(T0, gmv="2.00")])
    with pytest.raises(GoldDataError, match="two batch rows"):
        select_windows([row(T0, layer=BATCH), row(T0, layer=REALTIME), row(T0, layer=BATCH)])


def test_an_unknown_layer_is_refused_with_the_window() -> None:
    with pytest.raises(GoldDataError, match="2024-06-01T00:00:00\\+00:00: layer 'speed'"):
        select_windows([row(T0, layer="speed")])


def test_batch_through_is_the_end_of_the_newest_batch_window() -> None:
    rows = [row(T0, layer=BATCH), row(T0 + 3 * WINDOW, layer=BATCH), row(T0 + 4 * WINDOW)]
    assert batch_through(rows) == T0 + 4 * WINDOW
    assert batch_through([row(T0)]) is None


def test_running_totals_add_up_per_utc_day_exactly_and_restart_at_midnight() -> None:
    late = at("2024-06-01T23:55")
    rows = [
        row(T0, events=3, orders=1, payments=1, gmv="0.10"),
        row(T0 + WINDOW, events=4, orders=2, payments=0, gmv="0.20", layer=BATCH),
        row(late, events=5, orders=3, payments=2, gmv="1000000.01"),
        row(late + WINDOW, events=1, orders=1, payments=1, gmv="2.50"),
    ]
    served = running_totals(select_windows(rows))
    assert [s.day for s in served] == [
        DayTotals(3, 1, 1, Decimal("0.10")),
        DayTotals(7, 3, 1, Decimal("0.30")),
        DayTotals(12, 6, 3, Decimal("1000000.31")),
        DayTotals(1, 1, 1, Decimal("2.50")),  # 2024-06-02 starts again
    ]
    assert str(served[1].day.gmv) == "0.30"  # exact decimals, no float drift


def test_a_range_starting_mid_day_counts_the_day_from_midnight_and_is_half_open() -> None:
    rows = [row(T0 + i * WINDOW, events=1) for i in range(6)]
    served = serve_range(rows, T0 + 2 * WINDOW, T0 + 4 * WINDOW)
    assert [s.row.window_start for s in served] == [T0 + 2 * WINDOW, T0 + 3 * WINDOW]
    assert [s.day.events for s in served] == [3, 4]


def test_empty_windows_show_zero_and_carry_the_days_totals_so_far() -> None:
    rows = [row(T0, events=2), row(T0 + 3 * WINDOW, events=5)]
    served = running_totals(select_windows(rows))
    items = with_empty_windows(served, T0 + WINDOW, T0 + 5 * WINDOW, WINDOW)
    kinds = [type(i).__name__ for i in items]
    assert kinds == ["EmptyWindow", "EmptyWindow", "ServedWindow", "EmptyWindow"]
    assert [i.day.events for i in items] == [2, 2, 7, 7]
    first = items[0]
    assert isinstance(first, EmptyWindow) and first.window_end - first.window_start == WINDOW


def test_empty_windows_start_on_the_window_grid_and_restart_totals_at_midnight() -> None:
    evening = at("2024-06-01T23:50")
    served = running_totals([row(evening, events=9)])
    items = with_empty_windows(served, at("2024-06-01T23:52"), at("2024-06-02T00:10"), WINDOW)
    assert [(type(i).__name__, i.day.events) for i in items] == [
        ("EmptyWindow", 9),  # 23:55
        ("EmptyWindow", 0),  # 00:00, a new day
        ("EmptyWindow", 0),  # 00:05
    ]
    assert isinstance(items[0], EmptyWindow) and items[0].window_start == at("2024-06-01T23:55")


def test_rows_of_another_window_length_name_gold_window() -> None:
    check_window([row(T0)], WINDOW)
    with pytest.raises(GoldDataError, match="gold.window"):
        check_window([row(T0, window=timedelta(minutes=10))], WINDOW)


layers = st.lists(
    st.tuples(st.integers(0, 600), st.sampled_from([BATCH, REALTIME]), st.integers(0, 10**6)),
    max_size=40,
    unique_by=lambda t: (t[0], t[1]),
)


@given(layers)
def test_every_window_is_served_once_batch_first_and_day_totals_are_the_sums(
    spec: list[tuple[int, str, int]],
) -> None:
    rows = [row(T0 + i * WINDOW, layer=layer, events=n, gmv=f"{n}.01") for i, layer, n in spec]
    served = running_totals(select_windows(rows))
    windows = {i for i, _, _ in spec}
    assert [s.row.window_start for s in served] == [T0 + i * WINDOW for i in sorted(windows)]
    for s in served:
        i = (s.row.window_start - T0) // WINDOW
        has_batch = any(j == i and layer == BATCH for j, layer, _ in spec)
        assert s.row.layer == (BATCH if has_batch else REALTIME)
    by_day: dict[object, list[ServedWindow]] = {}
    for s in served:
        by_day.setdefault(s.row.window_start.date(), []).append(s)
    for day_rows in by_day.values():
        assert day_rows[-1].day.events == sum(s.row.events for s in day_rows)
        assert day_rows[-1].day.gmv == sum((s.row.gmv for s in day_rows), Decimal("0"))
