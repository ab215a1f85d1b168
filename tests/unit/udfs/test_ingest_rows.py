"""Event times of a bronze batch as epoch milliseconds."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lakestream.standard import BRONZE_SCHEMA
from udfs.ingest_rows import epoch_millis, event_millis, string_list

UTC = timezone.utc
_TIME = BRONZE_SCHEMA.field("event_time").type

times = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
) | st.builds(
    lambda us: datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us), st.integers(-5_000, 5_000)
)


@settings(max_examples=200, deadline=None)
@given(st.lists(times, max_size=30))
def test_event_millis_floors_like_epoch_millis(values: list[datetime]) -> None:
    batch = pa.RecordBatch.from_arrays([pa.array(values, _TIME)], names=["event_time"])
    assert event_millis(batch).tolist() == [epoch_millis(v) for v in values]


def test_event_millis_before_1970_floors_towards_the_past() -> None:
    t = datetime(1970, 1, 1, tzinfo=UTC) - timedelta(microseconds=1)
    batch = pa.RecordBatch.from_arrays([pa.array([t], _TIME)], names=["event_time"])
    assert event_millis(batch).tolist() == [-1]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.none() | st.text(max_size=8), max_size=30), st.integers(0, 3))
def test_string_list_is_to_pylist(values: list[str | None], chunks: int) -> None:
    array = pa.array(values, pa.string())
    assert string_list(array) == values
    cut = len(values) * chunks // 4
    chunked = pa.chunked_array([array[:cut], array[cut:]], pa.string())
    assert string_list(chunked) == values
    assert all(type(v) is str for v in string_list(array) if v is not None)
