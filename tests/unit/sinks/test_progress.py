"""Progress values in the sink's own commits: recorded with the rows they cover, exactly, across crashes.

A table's progress (txn actions ``<app prefix>:progress:<key>``) is what the next run of a job that ended
by itself starts from, so it must describe exactly the rows committed: never ahead (rows would be
skipped), never behind (rows would be written twice).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakestream.progress import (
    PROGRESS_KEY,
    Progress,
    kafka_key,
    kafka_offsets_of,
    progress_app_id,
    read_progress,
)
from sinks.writer import EOI_CHECKPOINT_ID
from tests.support.delta_tables import commits_with_app, open_writer, table_version, txn_version

SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())])


def records(topic: str, partition: int, offsets: range) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_pydict(
        {"topic": [topic] * n, "partition": [partition] * n, "offset": list(offsets)}, schema=SCHEMA
    )


def progress(table: Path, *keys: str) -> dict[str, int]:
    return read_progress(DeltaTable(str(table)), "job", keys)


def test_progress_is_a_txn_action_of_the_commit_with_the_rows(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = open_writer(t, restored=None, schema=SCHEMA)
    w.write(records("a", 0, range(0, 5)))
    w.prepare(1, progress={kafka_key("a", 0): 5})
    assert progress(t, kafka_key("a", 0)) == {}  # staged only: nothing recorded yet
    result = w.commit(1)
    assert result.progress == {"kafka/a/0": 5}
    assert progress(t, kafka_key("a", 0)) == {"kafka/a/0": 5}
    assert txn_version(t, progress_app_id("job", "kafka/a/0")) == 5
    newest = DeltaTable(str(t)).history(1)[0]
    assert newest[PROGRESS_KEY] == {"kafka/a/0": 5}  # also readable, next to the rows' commit


def test_a_commit_of_several_checkpoints_records_the_latest_value_per_key(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = open_writer(t, restored=None, schema=SCHEMA)
    w.write(records("a", 0, range(0, 3)))
    w.prepare(1, progress={"kafka/a/0": 3, "kafka/a/1": 7})
    w.write(records("a", 0, range(3, 4)))
    w.prepare(2, progress={"kafka/a/0": 4})
    assert w.commit(2).progress == {"kafka/a/0": 4, "kafka/a/1": 7}  # COMMIT(1) was subsumed
    assert progress(t, "kafka/a/0", "kafka/a/1") == {"kafka/a/0": 4, "kafka/a/1": 7}


def test_progress_without_rows_still_commits_and_nothing_at_all_commits_nothing(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = open_writer(t, restored=None, schema=SCHEMA)
    before = table_version(t)
    assert w.prepare(1) is None  # no rows, no progress: no manifest, no commit
    manifest = w.prepare(2, progress={"delta/version": 9})
    assert manifest is not None and not manifest.files
    w.commit(2)
    assert table_version(t) == before + 1
    assert DeltaTable(str(t)).to_pyarrow_table().num_rows == 0
    assert progress(t, "delta/version") == {"delta/version": 9}


def test_a_crash_before_the_commit_leaves_the_old_progress_and_open_commits_the_new(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = open_writer(t, restored=None, schema=SCHEMA)
    w.write(records("a", 0, range(0, 2)))
    w.prepare(1, progress={"kafka/a/0": 2})
    w.commit(1)
    w.write(records("a", 0, range(2, 6)))
    w.prepare(2, progress={"kafka/a/0": 6})
    w.write(records("a", 0, range(6, 9)))
    w.prepare(3, progress={"kafka/a/0": 9})
    del w  # checkpoint 2 completed, 3 did not; no COMMIT reached the writer
    assert progress(t, "kafka/a/0") == {"kafka/a/0": 2}  # behind nothing, ahead of nothing

    open_writer(t, restored=2, schema=SCHEMA)  # OPEN(2) commits checkpoint 2, aborts 3
    assert progress(t, "kafka/a/0") == {"kafka/a/0": 6}
    assert DeltaTable(str(t)).to_pyarrow_table().num_rows == 6


def test_an_already_committed_manifest_does_not_record_its_progress_again(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = open_writer(t, restored=None, schema=SCHEMA)
    w.write(records("a", 0, range(3)))
    w.prepare(1, progress={"kafka/a/0": 3})
    w.commit(1)
    version = table_version(t)
    assert not w.commit(1).committed
    assert table_version(t) == version and commits_with_app(t, "job:run-1:0") == 1


def test_end_of_input_records_the_end(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = open_writer(t, restored=None, schema=SCHEMA)
    w.write(records("a", 0, range(4)))
    result = w.end_of_input(progress={"kafka/a/0": 4})
    assert result.committed and result.progress == {"kafka/a/0": 4}
    assert txn_version(t, "job:run-1:0") == EOI_CHECKPOINT_ID
    assert progress(t, "kafka/a/0") == {"kafka/a/0": 4}


def test_progress_values_are_checked() -> None:
    for bad in ({"k": -1}, {"k": True}, {"": 1}, {"a b": 1}, {"k": 2**63}):
        with pytest.raises(ValueError, match="progress"):
            Progress(bad)
    assert Progress({"k": 0}).values == {"k": 0}
    assert not isinstance(Progress(), tuple)  # a sink tells it from a row by its type


def test_kafka_offsets_of_rows_is_the_next_offset_per_partition() -> None:
    batch = pa.Table.from_batches([records("a", 0, range(5, 9)), records("b", 3, range(0, 1))])
    assert kafka_offsets_of(batch) == {"kafka/a/0": 9, "kafka/b/3": 1}
    assert kafka_offsets_of(records("a", 0, range(0))) == {}
