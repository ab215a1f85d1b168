"""A Delta source offset as progress values (what the change feed's outputs record), and back."""

from __future__ import annotations

import pytest

from sources.offsets import PROGRESS_KEYS, SourceOffset, table_id_code
from sources.source_errors import OffsetMismatchError


@pytest.mark.parametrize(
    "offset",
    [
        SourceOffset(7, table_id="t-1"),
        SourceOffset(5, 3, in_snapshot=True, table_id="t-1"),
        SourceOffset(9, 2, table_id="t-1"),
    ],
)
def test_round_trip(offset: SourceOffset) -> None:
    values = offset.progress()
    assert set(values) == set(PROGRESS_KEYS)
    assert SourceOffset.from_progress(values, table_id="t-1", table_uri="/t") == offset


def test_nothing_recorded_is_none_and_another_table_fails() -> None:
    assert SourceOffset.from_progress({}, table_id="t-1", table_uri="/t") is None
    values = SourceOffset(7, table_id="t-1").progress()
    with pytest.raises(OffsetMismatchError, match="dropped and re-created.*--fresh"):
        SourceOffset.from_progress(values, table_id="t-2", table_uri="/t")
    assert 0 <= table_id_code("t-1") < 2**60 and table_id_code("t-1") != table_id_code("t-2")


def test_an_event_time_ordered_snapshot_is_not_recorded() -> None:
    with pytest.raises(ValueError, match="event-time ordered snapshot"):
        SourceOffset(3, 1, in_snapshot=True, snapshot_order="ts").progress()


def test_describe() -> None:
    assert SourceOffset(7).describe() == "version 7"
    assert SourceOffset(7, 2).describe() == "version 7 at file 2"
    assert SourceOffset(5, in_snapshot=True).describe() == "the initial snapshot of version 5"
    assert SourceOffset(5, 3, in_snapshot=True).describe() == "the initial snapshot of version 5 at file 3"


def test_a_broker_that_does_not_answer_is_a_setup_error_naming_the_setting() -> None:
    from lakestream.config import ConfigError
    from sources.flink.kafka_input import snapshot_end_offsets

    with pytest.raises(ConfigError) as caught:
        snapshot_end_offsets("127.0.0.1:9", ["orders"], timeout=1)
    message = str(caught.value)
    assert "kafka.bootstrap_servers 127.0.0.1:9: no broker answered within 1 s" in message
    assert "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS" in message and "lakestream kafka start" in message
