"""The change feed's Kafka position records: their value and the default topic."""

from __future__ import annotations

import pytest

from flink_jobs.positions_topic import default_positions_topic
from sinks.change_events import parse_position, position_value


def test_value_round_trips() -> None:
    values = {"delta/version": 7, "delta/index": 0, "delta/snapshot": 0, "delta/table": 12}
    assert parse_position(position_value(values)) == values


def test_a_record_of_something_else_is_refused() -> None:
    with pytest.raises(ValueError, match="not a lakestream position record"):
        parse_position('{"id": 1}')


def test_default_topic() -> None:
    assert default_positions_topic("orders.changes") == "orders.changes.lakestream-positions"
