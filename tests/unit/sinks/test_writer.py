"""Two-phase Delta writer, append mode: the crash matrix, rescaling, markers, files and statistics.

Every crash is simulated the way Flink experiences it: the writer object is dropped (or a commit hook or
an unwritable folder stops it mid-step) and a new writer gets OPEN(r) for the checkpoint Flink restores.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from sinks.committer import CommitHooks
from sinks.sink_errors import (
    BatchSchemaError,
    MarkerOrderError,
    RestoreBehindTableError,
    TableSchemaError,
)
from sinks.staging import Manifest
from sinks.writer import EOI_CHECKPOINT_ID, TwoPhaseDeltaWriter
from tests.support.delta_tables import (
    SimulatedCrash,
    assert_no_orphans,
    assert_same_rows,
    commits_with_app,
    expected_rows,
    new_writer,
    open_writer,
    snapshot_rows,
    staging_leftovers,
    table_version,
    txn_version,
)

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("p", pa.string())])
KEYS = ["id"]


def batch(ids: range | list[int], p: str = "a") -> pa.RecordBatch:
    ids = list(ids)
    return pa.RecordBatch.from_pylist([{"id": i, "v": f"v{i}", "p": p} for i in ids], schema=SCHEMA)


def rows(ids: range | list[int], p: str = "a") -> list[dict[str, Any]]:
    return [{"id": i, "v": f"v{i}", "p": p} for i in ids]


def assert_table(table: Path, expected: list[dict[str, Any]]) -> None:
    assert_same_rows(snapshot_rows(table, SCHEMA, KEYS), expected_rows(SCHEMA, expected, KEYS))


def writer(table: Path, restored: int | None, **kw: Any) -> TwoPhaseDeltaWriter:
    kw.setdefault("schema", SCHEMA)
    return open_writer(table, restored=restored, **kw)


APP = "job:run-1:0"


# ---------------------------------------------------------------- the normal path


def test_prepare_stages_outside_the_log_and_commit_makes_it_visible(sink_table: Path) -> None:
    t = sink_table
    w = writer(t, None)
    w.write(batch(range(5)))
    manifest = w.prepare(1)
    assert manifest is not None and manifest.state == "prepared"
    # Staged: the file is on disk, the manifest is durable, the log has nothing yet.
    assert table_version(t) == 0 and DeltaTable(str(t)).to_pyarrow_table().num_rows == 0
    assert all((t / f.path).is_file() for f in manifest.files)
    assert len(staging_leftovers(t)) == 1
    assert w.metrics.staged_rows == 5 and w.metrics.staged_files == 1

    result = w.commit(1)
    assert result.committed and result.rows == 5 and result.app_versions == {APP: 1}
    assert_table(t, rows(range(5)))
    assert txn_version(t, APP) == 1
    assert w.metrics.rows_committed == 5 and w.metrics.commits == 1 and w.metrics.staged_rows == 0
    assert_no_orphans(t)


def test_empty_checkpoint_writes_nothing(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = writer(t, None)
    assert w.prepare(1) is None
    assert not w.commit(1).committed
    assert table_version(t) == 0 and staging_leftovers(t) == []


# ---------------------------------------------------------------- crash at every step


def test_crash_after_staging_before_the_checkpoint_aborts(sink_table: Path) -> None:
    t = sink_table
    w = writer(t, None)
    w.write(batch(range(3)))
    w.prepare(1)
    w.commit(1)
    w.write(batch(range(3, 6)))
    staged = w.prepare(2)
    assert staged is not None
    del w  # crash: checkpoint 2 never completed

    w2 = writer(t, 1)
    assert not any((t / f.path).exists() for f in staged.files)
    assert w2.metrics.aborted_manifests == 1
    assert_table(t, rows(range(3)))
    assert txn_version(t, APP) == 1
    assert_no_orphans(t)

    # The source replays rows 3..5 into the next checkpoint (ids continue after the failed 2).
    w2.write(batch(range(3, 6)))
    w2.prepare(3)
    w2.commit(3)
    assert_table(t, rows(range(6)))
    assert txn_version(t, APP) == 3
    assert_no_orphans(t)


def test_crash_after_the_checkpoint_before_the_commit_commits_once_on_open(sink_table: Path) -> None:
    t = sink_table
    w = writer(t, None)
    w.write(batch(range(4)))
    w.prepare(1)
    del w  # checkpoint 1 completed, COMMIT(1) never reached the writer

    w2 = writer(t, 1)
    assert_table(t, rows(range(4)))
    assert txn_version(t, APP) == 1
    assert commits_with_app(t, APP) == 1
    version = table_version(t)
    assert not w2.commit(1).committed  # the late COMMIT(1) of the restored attempt
    assert table_version(t) == version
    assert_no_orphans(t)


class CrashBeforeCleanup(CommitHooks):
    def before_cleanup(self, manifests: Sequence[Manifest]) -> None:
        raise SimulatedCrash("killed after the Delta commit, before the manifests were deleted")


def test_crash_after_the_commit_before_cleanup_does_not_commit_twice(sink_table: Path) -> None:
    t = sink_table
    w = writer(t, None, commit_hooks=CrashBeforeCleanup())
    w.write(batch(range(4)))
    w.prepare(1)
    with pytest.raises(SimulatedCrash):
        w.commit(1)
    assert txn_version(t, APP) == 1 and len(staging_leftovers(t)) == 1
    version = table_version(t)

    w2 = writer(t, 1)
    assert table_version(t) == version  # no second commit
    assert w2.metrics.already_committed == 1
    assert commits_with_app(t, APP) == 1
    assert_table(t, rows(range(4)))
    assert_no_orphans(t)


def test_commit_delivered_twice_commits_once(sink_table: Path) -> None:
    t = sink_table
    w = writer(t, None)
    w.write(batch(range(2)))
    w.prepare(1)
    assert w.commit(1).committed
    version = table_version(t)
    assert not w.commit(1).committed
    assert table_version(t) == version
    assert_table(t, rows(range(2)))
    assert commits_with_app(t, APP) == 1


def test_skipped_commit_is_covered_by_the_next_one(sink_table: Path) -> None:
    t = sink_table
    w = writer(t, None)
    w.write(batch(range(2)))
    w.prepare(1)
    w.write(batch(range(2, 5)))
    w.prepare(2)
    result = w.commit(2)  # COMMIT(1) was subsumed and never delivered
    assert result.rows == 5 and result.files == 2
    assert commits_with_app(t, APP) == 1
    assert txn_version(t, APP) == 2
    assert not w.commit(1).committed  # and if it shows up late, nothing happens
    assert_table(t, rows(range(5)))
    assert_no_orphans(t)


def test_open_commits_manifests_up_to_r_and_aborts_newer_ones(sink_table: Path) -> None:
    t = sink_table
    w = writer(t, None)
    for n, ids in ((1, range(0, 2)), (2, range(2, 4)), (3, range(4, 6))):
        w.write(batch(ids))
        newest = w.prepare(n)
    assert newest is not None
    del w  # checkpoint 2 completed; 3 did not

    w2 = writer(t, 2)
    assert_table(t, rows(range(4)))
    assert txn_version(t, APP) == 2
    assert commits_with_app(t, APP) == 1  # manifests 1 and 2 went into ONE commit
    assert not any((t / f.path).exists() for f in newest.files)
    assert w2.metrics.aborted_manifests == 1
    assert_no_orphans(t)


def test_crash_halfway_through_prepare_leaves_nothing(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = writer(t, None, partition_by=["p"])
    w.write(batch(range(3), p="a"))
    w.write(batch(range(3, 6), p="b"))
    (t / "p=b").write_text("")  # the second partition's folder cannot be created: PRECOMMIT dies there
    with pytest.raises(FileExistsError):
        w.prepare(1)
    (t / "p=b").unlink()
    assert len(list((t / "p=a").glob("*.parquet"))) == 1  # the first partition's file was written
    [manifest] = [p for p in staging_leftovers(t) if p.suffix == ".json"]
    assert json.loads(manifest.read_text())["state"] == "pending"
    writer(t, None, run_id="run-2", partition_by=["p"])
    assert_table(t, [])
    assert_no_orphans(t)


def test_fresh_start_aborts_the_previous_runs_staged_files(sink_table: Path) -> None:
    t = sink_table
    old = [writer(t, None, run_id="old", subtask=i, parallelism=2) for i in range(2)]
    for i, w in enumerate(old):
        w.write(batch(range(10 * i, 10 * i + 3)))
        w.prepare(1)
        w.commit(1)
        w.write(batch(range(10 * i + 3, 10 * i + 5)))
        w.prepare(2)
    del old, w  # job cancelled; restarted WITHOUT state (fresh start: new run id)

    new = [writer(t, None, run_id="new", subtask=i, parallelism=2) for i in range(2)]
    assert sum(w.metrics.aborted_manifests for w in new) == 2
    assert_table(t, rows([0, 1, 2, 10, 11, 12]))
    assert_no_orphans(t)
    assert not (t / "_lakestream" / "manifests" / "job" / "old").exists()  # dead run's folders tidied
    for i, w in enumerate(new):
        w.write(batch([100 + i]))
        w.prepare(1)  # the fresh run's checkpoint ids restart at 1: new app ids, no clash
        w.commit(1)
    assert_table(t, rows([0, 1, 2, 10, 11, 12, 100, 101]))
    assert txn_version(t, "job:new:0") == 1 and txn_version(t, "job:old:1") == 1


def test_fresh_start_after_commit_before_cleanup_keeps_the_committed_files(sink_table: Path) -> None:
    t = sink_table
    w = writer(t, None, run_id="old", commit_hooks=CrashBeforeCleanup())
    w.write(batch([1, 2]))
    w.prepare(1)
    with pytest.raises(SimulatedCrash):
        w.commit(1)
    fresh = writer(t, None, run_id="new")  # the old run's manifest is committed: clean up, never abort
    assert fresh.metrics.already_committed == 1 and fresh.metrics.aborted_manifests == 0
    assert_table(t, rows([1, 2]))
    assert_no_orphans(t)


def test_fresh_start_does_not_touch_the_current_runs_other_subtasks(sink_table: Path) -> None:
    t = sink_table
    fast = writer(t, None, run_id="r", subtask=1, parallelism=2)
    fast.write(batch([1]))
    fast.prepare(1)
    writer(t, None, run_id="r", subtask=0, parallelism=2)  # slow subtask opens later
    fast.commit(1)
    assert_table(t, rows([1]))


def test_restore_from_an_older_checkpoint_than_the_table_is_refused(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = writer(t, None)
    w.write(batch([1]))
    w.prepare(5)
    w.commit(5)
    with pytest.raises(RestoreBehindTableError, match="checkpoint 5 or later"):
        writer(t, 3)
    with pytest.raises(RestoreBehindTableError, match="fresh start must use a new run id"):
        writer(t, None)  # a fresh start whose checkpoint ids restart at 1 under the same app id


# ---------------------------------------------------------------- rescaling


def _stage(writers: list[TwoPhaseDeltaWriter], n: int, base: int) -> list[int]:
    ids = []
    for i, w in enumerate(writers):
        chunk = [base + 10 * i, base + 10 * i + 1]
        w.write(batch(chunk))
        w.prepare(n)
        ids += chunk
    return ids


def test_parallelism_3_to_2_adopts_the_removed_subtasks_manifests(sink_table: Path) -> None:
    t = sink_table
    old = [writer(t, None, subtask=i, parallelism=3) for i in range(3)]
    ids1 = _stage(old, 1, 0)
    for w in old:
        w.commit(1)
    ids2 = _stage(old, 2, 100)  # checkpoint 2 completes, nobody got COMMIT(2)
    _stage(old, 3, 200)  # checkpoint 3 never completes
    del old, w

    new = [writer(t, 2, subtask=i, parallelism=2) for i in range(2)]
    # Subtask 0 committed slot 2's manifest with slot 2's app id, in its own commit.
    assert {txn_version(t, f"job:run-1:{j}") for j in range(3)} == {2}
    assert commits_with_app(t, "job:run-1:2") == 2  # checkpoint 1 by itself, checkpoint 2 by subtask 0
    assert_table(t, rows(ids1 + ids2))
    assert_no_orphans(t)
    assert sum(w.metrics.aborted_manifests for w in new) == 3

    ids4 = _stage(new, 4, 400)
    for w in new:
        w.commit(4)
    assert_table(t, rows(ids1 + ids2 + ids4))
    assert_no_orphans(t)


def test_parallelism_2_to_3_new_subtask_starts_clean(sink_table: Path) -> None:
    t = sink_table
    old = [writer(t, None, subtask=i, parallelism=2) for i in range(2)]
    ids1 = _stage(old, 1, 0)
    del old

    new = [writer(t, 1, subtask=i, parallelism=3) for i in range(3)]
    assert_table(t, rows(ids1))
    assert txn_version(t, "job:run-1:2") is None
    ids2 = _stage(new, 2, 100)
    for w in new:
        w.commit(2)
    assert_table(t, rows(ids1 + ids2))
    assert {txn_version(t, f"job:run-1:{j}") for j in range(3)} == {2}
    assert_no_orphans(t)


def test_rescale_after_a_crash_between_commit_and_cleanup(sink_table: Path) -> None:
    t = sink_table
    doomed = writer(t, None, subtask=2, parallelism=3, commit_hooks=CrashBeforeCleanup())
    doomed.write(batch([7]))
    doomed.prepare(1)
    with pytest.raises(SimulatedCrash):
        doomed.commit(1)
    new = [writer(t, 1, subtask=i, parallelism=2) for i in range(2)]
    assert new[0].metrics.already_committed == 1
    assert commits_with_app(t, "job:run-1:2") == 1
    assert_table(t, rows([7]))
    assert_no_orphans(t)


# ---------------------------------------------------------------- end of input


def test_end_of_input_commits_everything_and_a_late_restore_replays_nothing(sink_table: Path) -> None:
    t = sink_table
    w = writer(t, None)
    w.write(batch([1, 2]))
    w.prepare(1)
    w.write(batch([3]))
    result = w.end_of_input()
    assert result.committed and result.rows == 3
    assert txn_version(t, APP) == EOI_CHECKPOINT_ID
    assert not w.prepare(2) and not w.commit(2).committed  # the final checkpoint's markers are no-ops
    assert_no_orphans(t)

    w2 = writer(t, 1)  # crash before the job finished: restore from checkpoint 1 replays [3]
    w2.write(batch([3]))
    w2.prepare(2)
    w2.commit(2)
    assert_table(t, rows([1, 2, 3]))
    assert_no_orphans(t)


# ---------------------------------------------------------------- files, partitions, statistics


def test_partitioned_files_are_split_by_size_and_carry_statistics(sink_table: Path) -> None:
    t = sink_table
    w = writer(t, None, partition_by=["p"], target_file_size=4096)
    w.write(batch(range(0, 2000), p="a"))
    w.write(batch(range(2000, 2010), p="b c/d"))
    w.write(pa.RecordBatch.from_pylist([{"id": 5000, "v": None, "p": None}], schema=SCHEMA))
    manifest = w.prepare(1)
    assert manifest is not None
    w.commit(1)

    expected = rows(range(0, 2000), "a") + rows(range(2000, 2010), "b c/d")
    expected.append({"id": 5000, "v": None, "p": None})
    assert_table(t, expected)
    assert_no_orphans(t)
    dt = DeltaTable(str(t))
    adds = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    by_part: dict[str | None, list[dict[str, Any]]] = {}
    for a in adds:
        by_part.setdefault(a["partition.p"], []).append(a)
    assert len(by_part["a"]) > 1  # split at the target size
    assert len(by_part["b c/d"]) == 1 and len(by_part[None]) == 1
    assert sum(a["num_records"] for a in adds) == 2011
    for a in adds:
        assert a["null_count.id"] == 0
        f = next(f for f in manifest.files if Path(f.path).name == Path(a["path"]).name)
        data = pq.read_table(t / f.path)
        assert "p" not in data.column_names  # partition values live in the folder and the log
        assert (a["min.id"], a["max.id"]) == (min(data["id"].to_pylist()), max(data["id"].to_pylist()))
    folders = {Path(f.path).parent.name for f in manifest.files}
    assert folders == {"p=a", "p=b%20c%2Fd", "p=__HIVE_DEFAULT_PARTITION__"}
    # Readers prune with the stats and partition values we wrote.
    assert dt.to_pyarrow_table(filters=[("p", "=", "b c/d")]).num_rows == 10
    assert DeltaTable(str(t)).to_pyarrow_table(filters=[("id", ">=", 1990), ("id", "<", 2000)]).num_rows == 10


def test_statistics_json_is_what_delta_readers_expect(tmp_path: Path) -> None:
    import datetime as dt

    schema = pa.schema([("k", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("d", pa.date32())])
    t = tmp_path / "t"
    w = open_writer(t, restored=None, schema=schema)
    utc = dt.timezone.utc
    w.write(
        pa.RecordBatch.from_pylist(
            [
                {
                    "k": 1,
                    "ts": dt.datetime(2024, 1, 1, 0, 0, 0, 999_999, tzinfo=utc),
                    "d": dt.date(2024, 1, 1),
                },
                {"k": None, "ts": dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=utc), "d": None},
            ],
            schema=schema,
        )
    )
    manifest = w.prepare(1)
    assert manifest is not None
    stats = json.loads(manifest.files[0].stats)
    assert stats == {
        "numRecords": 2,
        "minValues": {"k": 1, "ts": "2024-01-01T00:00:00.000Z", "d": "2024-01-01"},
        # Milliseconds only: the max is rounded UP so no reader skips a file that matches.
        "maxValues": {"k": 1, "ts": "2024-01-01T00:00:01.000Z", "d": "2024-01-01"},
        "nullCount": {"k": 1, "ts": 0, "d": 1},
    }


# ---------------------------------------------------------------- misuse


def test_markers_out_of_order_are_refused(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = new_writer(t, schema=SCHEMA)
    with pytest.raises(MarkerOrderError, match="before OPEN"):
        w.write(batch([1]))
    w.open(restored_checkpoint_id=None, run_id="r", subtask=0, parallelism=1)
    w.prepare(3)
    with pytest.raises(MarkerOrderError, match="must increase"):
        w.prepare(3)
    with pytest.raises(MarkerOrderError, match="OPEN arrived twice"):
        w.open(restored_checkpoint_id=None, run_id="r", subtask=0, parallelism=1)


def test_batches_must_match_the_schema(tmp_path: Path) -> None:
    w = writer(tmp_path / "t", None)
    with pytest.raises(BatchSchemaError, match="missing: \\['p'\\]"):
        w.write(pa.RecordBatch.from_pylist([{"id": 1, "v": "x"}]))
    w.write(
        pa.RecordBatch.from_pylist(
            [{"id": 1, "v": "x", "p": "a"}],
            schema=pa.schema([("id", pa.int32()), ("v", pa.string()), ("p", pa.string())]),
        )
    )  # safe cast int32 -> int64
    with pytest.raises(BatchSchemaError, match="id: int64 -> string"):
        w.write(pa.RecordBatch.from_pylist([{"id": "x", "v": "x", "p": "a"}]))


def test_existing_table_with_another_schema_is_refused(tmp_path: Path) -> None:
    t = tmp_path / "t"
    write_deltalake(str(t), pa.table({"id": pa.array([1], pa.int64()), "other": ["x"]}))
    with pytest.raises(TableSchemaError, match="other"):
        writer(t, None)
    with pytest.raises(TableSchemaError, match="partitioned by"):
        writer(tmp_path / "t2", None)  # creates it unpartitioned
        writer(tmp_path / "t2", None, partition_by=["p"], run_id="run-2")
