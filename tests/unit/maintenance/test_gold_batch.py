"""The staged-rows check of a backfill, and the command-line times and threshold."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from batch.backfill import check_rows, first_open_window, range_predicate
from cli.cmd_batch import parse_threshold
from lakestream.config import ConfigError
from lakestream.gold import GOLD_INPUT_SCHEMA, GOLD_SCHEMA, GoldSettings, aggregate, gold_rows

UTC = timezone.utc
T1 = datetime(2024, 6, 1, 4, tzinfo=UTC)
T2 = T1 + timedelta(minutes=20)
S = GoldSettings()


def _good() -> pa.Table:
    metrics = aggregate(pa.Table.from_pylist([], schema=GOLD_INPUT_SCHEMA), S, over=(T1, T2))
    return gold_rows(metrics, layer="batch", data_time=T1, source_version=4, updated_at=T2)


def _with(table: pa.Table, name: str, values: list[object]) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


def test_good_rows_pass() -> None:
    assert check_rows(_good(), T1, T2, S) == []


def test_each_broken_rule_is_named() -> None:
    good = _good()
    missing = good.slice(0, 3)
    assert "1 missing" in check_rows(missing, T1, T2, S)[0]
    doubled = pa.concat_tables([good, good.slice(0, 1)]).sort_by("window_start")
    assert "1 more than once" in " ".join(check_rows(doubled, T1, T2, S))
    negative = _with(good, "events", [0, -1, 0, 0])
    assert "events: negative value -1" in check_rows(negative, T1, T2, S)
    refund = _with(good, "gmv", [Decimal("-1.00"), Decimal(0), Decimal(0), Decimal(0)])
    assert check_rows(refund, T1, T2, S) == []
    ends = _with(good, "window_end", [T2] * 4)
    assert any("window_end" in p for p in check_rows(ends, T1, T2, S))
    layer = _with(good, "layer", ["batch", "realtime", "batch", "batch"])
    assert any("layer" in p for p in check_rows(layer, T1, T2, S))
    nulls = good.set_column(
        good.schema.get_field_index("data_time"),
        pa.field("data_time", GOLD_SCHEMA.field("data_time").type),
        pc.if_else(pa.array([True, False, True, True]), good["data_time"], None),
    )
    assert any("data_time: 1 null" in p for p in check_rows(nulls, T1, T2, S))


def test_threshold_on_the_command_line() -> None:
    assert parse_threshold(None) is None
    assert parse_threshold("0.5") == Decimal("0.5")
    for bad in ("-1", "abc", "nan", "inf"):
        with pytest.raises(ConfigError, match="--threshold"):
            parse_threshold(bad)


def test_range_predicate_spells_utc_times() -> None:
    assert range_predicate("window_start", T1, T2) == (
        "window_start >= '2024-06-01T04:00:00Z' AND window_start < '2024-06-01T04:20:00Z'"
    )


@pytest.mark.parametrize(
    ("watermark", "first_open"),
    [
        # 04:35 - 10 min lateness = 04:25: the window 04:25-04:30 has not passed its end + lateness.
        (datetime(2024, 6, 1, 4, 35, tzinfo=timezone.utc), datetime(2024, 6, 1, 4, 25, tzinfo=timezone.utc)),
        # On a boundary: 04:30 + 10 min = 04:40 passed exactly, so 04:30-04:35 is still open, 04:25 closed.
        (datetime(2024, 6, 1, 4, 40, tzinfo=timezone.utc), datetime(2024, 6, 1, 4, 30, tzinfo=timezone.utc)),
        (
            datetime(1969, 12, 31, 23, 59, tzinfo=timezone.utc),
            datetime(1969, 12, 31, 23, 45, tzinfo=timezone.utc),
        ),
    ],
)
def test_the_first_open_window_is_the_one_whose_end_plus_lateness_is_not_passed(
    watermark: datetime, first_open: datetime
) -> None:
    settings = GoldSettings(window=timedelta(minutes=5), allowed_lateness=timedelta(minutes=10))
    assert first_open_window(watermark, settings) == first_open
    assert first_open + settings.window + settings.allowed_lateness > watermark
    assert first_open + settings.allowed_lateness <= watermark  # the window before it is closed
