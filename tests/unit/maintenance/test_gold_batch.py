"""The staged-rows check of a backfill, and the command-line times and threshold."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from flink_jobs.gold_batch import parse_threshold, parse_time
from lakestream.config import ConfigError
from lakestream.gold import GOLD_INPUT_SCHEMA, GOLD_SCHEMA, GoldSettings, aggregate, gold_rows
from maintenance.gold_batch import check_rows, range_predicate

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


def test_times_on_the_command_line() -> None:
    assert parse_time("2024-06-01", "--from") == datetime(2024, 6, 1, tzinfo=UTC)
    assert parse_time("2024-06-01T04:00:00Z", "--from") == T1
    assert parse_time("2024-06-01T04:00", "--from") == T1
    assert parse_time("2024-06-01T12:00:00+08:00", "--to") == T1
    with pytest.raises(ConfigError, match=r"--to '1 June'.*2024-06-01T04:00:00Z.*no offset: UTC"):
        parse_time("1 June", "--to")


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
