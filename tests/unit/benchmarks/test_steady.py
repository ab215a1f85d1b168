"""The steady-state rate of the bench: checkpoint ids from commits and file names, rate between commits."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from benchmarks import report, steady
from benchmarks.steady import EOI_CHECKPOINT_ID, Commit, commit_times, steady_rate
from lakestream.merge_spec import MergeSpec
from sinks.table_spec import TableSpec
from sinks.writer import TwoPhaseDeltaWriter

B, S = "bronze/order_events", "silver/orders"


def test_file_checkpoint_reads_the_sinks_file_names() -> None:
    assert steady.file_checkpoint("source=a/part-00001-abc-c12.snappy.parquet") == 12
    assert steady.file_checkpoint(f"part-00000-x-c{EOI_CHECKPOINT_ID}.snappy.parquet") == EOI_CHECKPOINT_ID
    assert steady.file_checkpoint("part-00000-c12/other.parquet") is None
    assert steady.file_checkpoint("0-abc.parquet") is None


def test_commit_time_is_the_last_table_and_needs_every_subtask() -> None:
    commits = [
        Commit(B, 10.0, {"b:0": 1}),
        Commit(B, 10.5, {"b:1": 1}),
        Commit(S, 11.0, {"s:0": 1}),
        Commit(B, 20.0, {"b:0": 2}),
        # subtask 1 of bronze never committed 2 on its own: it caught up in one commit with 3
        Commit(S, 21.0, {"s:0": 2}),
        Commit(B, 30.0, {"b:0": 3}),
        Commit(B, 30.2, {"b:1": 3}),
        Commit(S, 31.5, {"s:0": 3}),
        Commit("late/order_events", 31.9, {"l:0": 3}),
        Commit(B, 35.0, {"b:0": EOI_CHECKPOINT_ID, "b:1": EOI_CHECKPOINT_ID}),
    ]
    assert commit_times(commits, required=(B, S)) == {1: 11.0, 3: 31.9}


def test_a_required_table_without_commits_makes_no_checkpoint() -> None:
    assert commit_times([Commit(B, 1.0, {"b:0": 1})], required=(B, S)) == {}


def test_steady_rate_counts_the_checkpoints_after_the_first() -> None:
    times = {1: 11.0, 2: 21.0, 4: 36.0}
    events = {1: 999, 2: 500, 3: 100, 4: 400, EOI_CHECKPOINT_ID: 7}
    assert steady_rate(times, events) == {
        "from_checkpoint": 1,
        "to_checkpoint": 4,
        "events": 1000,
        "seconds": 25.0,
        "events_per_s": 40,
    }
    assert steady_rate({1: 11.0}, events) is None
    assert steady_rate({}, events) is None


SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


def _writer(root: Path, table: str, subtask: int, mode: str) -> TwoPhaseDeltaWriter:
    w = TwoPhaseDeltaWriter(
        spec=TableSpec(
            table_uri=str(root / table),
            schema=SCHEMA,
            mode=mode,  # type: ignore[arg-type]
            merge=MergeSpec(keys=("k",)) if mode == "merge" else None,
        ),
        app_prefix=f"job/{table}",
    )
    w.open(restored_checkpoint_id=None, run_id="run", subtask=subtask, parallelism=2 if table == B else 1)
    return w


def test_measure_reads_real_tables_written_by_the_sink(tmp_path: Path) -> None:
    bronze = [_writer(tmp_path, B, i, "append") for i in (0, 1)]
    silver = _writer(tmp_path, S, 0, "merge")
    per_checkpoint = {1: (3, 2), 2: (4, 1), 3: (5, 5)}
    for k, counts in per_checkpoint.items():
        for w, n in zip(bronze, counts, strict=True):
            w.write(pa.table({"k": [f"{k}-{j}" for j in range(n)], "v": list(range(n))}, schema=SCHEMA))
            w.prepare(k)
        silver.write(pa.table({"k": [f"k{k}"], "v": [k]}, schema=SCHEMA))
        silver.prepare(k)
        for w in [*bronze, silver]:
            w.commit(k)
    for w in bronze:
        w.write(pa.table({"k": ["end"], "v": [0]}, schema=SCHEMA))
        w.end_of_input()
    silver.end_of_input()

    got = steady.measure(tmp_path)
    assert got is not None
    assert (got["from_checkpoint"], got["to_checkpoint"], got["events"]) == (1, 3, 15)
    times = steady.commit_times(steady.read_commits(tmp_path), required=(B, S))
    assert got["seconds"] == pytest.approx(times[3] - times[1], abs=0.001)
    assert steady.events_by_checkpoint(tmp_path) == {1: 5, 2: 5, 3: 10, EOI_CHECKPOINT_ID: 2}


def test_report_sentence_names_the_spans_and_the_ratio() -> None:
    run = {
        "all_ingested": True,
        "steady": {"from_checkpoint": 1, "to_checkpoint": 4, "events": 1_500_000, "seconds": 30.0},
    }
    results = {
        "settings": {"modes": ["process"]},
        "steady": {"events": 2_500_000, "runs": [run]},
        "summary": {
            "lakestream_process_steady": {"median": 50_000.0, "min": 50_000.0, "max": 50_000.0, "n": 1},
            "lakestream_process_steady_all_ingested": True,
        },
    }
    text = "\n".join(report._steady_lines(results, 10_000.0))
    assert "50,000 (50,000–50,000, n=1) events/s (5.00x Spark sustained)" in text
    assert "checkpoints 1->4 1,500,000 events in 30.0 s" in text
    assert "backlog of 2,500,000" in text
    assert report._steady_lines({"settings": {"modes": ["process"]}, "summary": {}}, None) == []
