"""The Delta source's per-poll progress: Spark's SourceProgress definitions, and the gauges over it."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sources.flink.delta_source import SOURCE_GAUGES
from sources.trigger_progress import trigger_progress
from tests.support.delta_source import append, batch, create, poll, reader_for


def test_rates_over_the_trigger_interval_and_the_processing_time() -> None:
    p = trigger_progress(300, started_s=100.0, ended_s=100.5, previous_started_s=98.0)
    assert p.num_input_rows == 300
    assert p.input_rows_per_second == pytest.approx(150.0)  # 300 rows since the poll 2 s before
    assert p.processed_rows_per_second == pytest.approx(600.0)  # 300 rows in 0.5 s


def test_the_first_poll_has_no_input_interval_so_no_input_rate() -> None:
    p = trigger_progress(40, started_s=10.0, ended_s=10.2, previous_started_s=None)
    assert p.input_rows_per_second == 0.0
    assert p.processed_rows_per_second == pytest.approx(200.0)


def test_processing_time_is_floored_at_one_millisecond_as_in_spark() -> None:
    p = trigger_progress(5, started_s=1.0, ended_s=1.0, previous_started_s=0.0)
    assert p.processed_rows_per_second == pytest.approx(5000.0)
    assert p.input_rows_per_second == pytest.approx(5.0)


def test_an_empty_poll_and_a_clock_step_back_report_zero_rates() -> None:
    empty = trigger_progress(0, started_s=5.0, ended_s=5.1, previous_started_s=4.0)
    assert (empty.num_input_rows, empty.input_rows_per_second, empty.processed_rows_per_second) == (0, 0, 0)
    stepped_back = trigger_progress(10, started_s=5.0, ended_s=5.1, previous_started_s=6.0)
    assert stepped_back.input_rows_per_second == 0.0


def test_gauges_of_a_real_poll_report_progress_and_backlog(tmp_path) -> None:
    uri = tmp_path / "t"
    create(uri, batch([1]))
    for i in range(2, 5):
        append(uri, batch([i, i + 100]))
    reader = reader_for(uri, starting_version=0, max_files_per_trigger=1)
    plan, rows = poll(reader, None)
    report = reader.report(plan, rows=len(rows), started=50.0, now=50.25, previous_started=49.0)
    gauges = {name: int(round(read(report))) for name, read in SOURCE_GAUGES.items()}
    adds = pa.table(DeltaTable(str(uri)).get_add_actions(flatten=True)).to_pylist()
    left = [a for a in adds if a["num_records"] == 2]  # versions 1-3, one file each, still to read
    assert gauges == {
        "numInputRows": 1,
        "inputRowsPerSecond": 1,
        "processedRowsPerSecond": 4,
        "numFilesOutstanding": 3,
        "numBytesOutstanding": sum(a["size_bytes"] for a in left),
        "versionsBehind": 3,
        "lastPollRows": 1,
    }
