"""Two-phase Delta writer against concurrent writers: compaction, a racing duplicate commit, metadata
changes, vacuum. The races are real commits by other DeltaTable objects, injected through ``CommitHooks``
at the exact moment between the writer's txn check and its Delta commit."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from sinks.committer import CommitHooks
from sinks.sink_errors import CommitConflictError, StagedFileMissingError
from sinks.writer import TwoPhaseDeltaWriter
from storage.retry_policy import RetryPolicy
from tests.support.delta_tables import (
    assert_no_orphans,
    assert_same_rows,
    commits_with_app,
    expected_rows,
    open_writer,
    snapshot_rows,
    staging_leftovers,
    table_options,
    txn_version,
)

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
APP = "job:run-1:0"
FAST_RETRY = RetryPolicy(max_attempts=4, initial_backoff_s=0.001, max_backoff_s=0.01)


def batch(ids: range | list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"id": i, "v": f"v{i}"} for i in ids], schema=SCHEMA)


def assert_table(table: Path, ids: list[int]) -> None:
    expected = expected_rows(SCHEMA, [{"id": i, "v": f"v{i}"} for i in ids], ["id"])
    assert_same_rows(snapshot_rows(table, SCHEMA, ["id"]), expected)


def writer(table: Path, restored: int | None, **kw: Any) -> TwoPhaseDeltaWriter:
    kw.setdefault("schema", SCHEMA)
    kw.setdefault("retry", FAST_RETRY)
    return open_writer(table, restored=restored, **kw)


def seed_small_files(w: TwoPhaseDeltaWriter, checkpoints: int) -> list[int]:
    ids: list[int] = []
    for n in range(1, checkpoints + 1):
        chunk = [10 * n, 10 * n + 1]
        w.write(batch(chunk))
        w.prepare(n)
        w.commit(n)
        ids += chunk
    return ids


def test_compaction_between_prepare_and_commit(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = writer(t, None)
    ids = seed_small_files(w, 4)
    w.write(batch([100, 101]))
    w.prepare(5)
    metrics = DeltaTable(str(t)).optimize.compact()
    assert metrics["numFilesRemoved"] == 4
    w.commit(5)
    assert_table(t, ids + [100, 101])
    assert txn_version(t, APP) == 5
    DeltaTable(str(t)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert_no_orphans(t)


class CompactRightBeforeCommit(CommitHooks):
    """Another process compacts the table after our snapshot and txn check, before our commit lands."""

    def __init__(self, table: Path) -> None:
        self.options = table_options(table)
        self.compactions = 0
        self.planned_on: list[int] = []

    def before_attempt(self, attempt: int, snapshot: DeltaTable) -> None:
        if attempt == 0:
            self.planned_on.append(snapshot.version())  # the snapshot our commit is planned on
            DeltaTable(snapshot.table_uri, storage_options=self.options).optimize.compact()
            self.compactions += 1


def test_append_racing_a_compaction_commits_exactly_once(sink_table: Path) -> None:
    t = sink_table
    hooks = CompactRightBeforeCommit(t)
    w = writer(t, None, commit_hooks=hooks)
    ids = seed_small_files(w, 3)  # each commit's hook compacted the files before it
    assert hooks.compactions == 3
    assert_table(t, ids)
    assert commits_with_app(t, APP) == 3
    history = list(reversed(DeltaTable(str(t)).history()))
    assert [h["operation"] for h in history] == ["CREATE TABLE", "WRITE", "WRITE", "OPTIMIZE", "WRITE"]
    # The last WRITE was planned on version 2, before the OPTIMIZE (version 3) landed: a real race,
    # which delta-rs resolved itself (a blind append does not conflict with a compaction).
    assert hooks.planned_on == [0, 1, 2]
    assert w.metrics.commit_retries == 0


def test_compaction_thread_running_while_the_writer_commits(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = writer(t, None)
    stop = threading.Event()
    compactions = []

    def compact_forever() -> None:
        while not stop.is_set():
            try:
                compactions.append(DeltaTable(str(t)).optimize.compact()["numFilesRemoved"])
            except CommitFailedError:
                pass  # the compaction lost a race against our appends: its problem, not ours

    thread = threading.Thread(target=compact_forever)
    thread.start()
    try:
        ids = seed_small_files(w, 12)
    finally:
        stop.set()
        thread.join()
    assert compactions  # it really ran alongside
    assert_table(t, ids)
    assert txn_version(t, APP) == 12
    assert commits_with_app(t, APP) == 12


class ZombieCommitsFirst(CommitHooks):
    """Between our txn check and our commit, another attempt of the same subtask commits the same
    checkpoint (a restored task while the old one still runs, or a COMMIT delivered twice concurrently)."""

    def __init__(self, table: Path) -> None:
        self.table = table

    def before_attempt(self, attempt: int, snapshot: DeltaTable) -> None:
        if attempt == 0:
            open_writer(self.table, restored=1, schema=SCHEMA)  # its OPEN(1) commits checkpoint 1


def test_racing_duplicate_commit_is_detected_on_retry_and_not_applied_twice(sink_table: Path) -> None:
    t = sink_table
    w = writer(t, None, commit_hooks=ZombieCommitsFirst(t))
    w.write(batch([1, 2, 3]))
    w.prepare(1)
    result = w.commit(1)
    # Our commit conflicted (ConcurrentTransaction), the retry re-checked the txn version and stopped.
    assert w.metrics.commit_retries == 1
    assert not result.committed and w.metrics.already_committed == 1
    assert commits_with_app(t, APP) == 1
    assert_table(t, [1, 2, 3])
    assert_no_orphans(t)


class MetadataChangesEveryTime(CommitHooks):
    """A concurrent ALTER on every attempt: a conflict no retry can win."""

    def before_attempt(self, attempt: int, snapshot: DeltaTable) -> None:
        DeltaTable(snapshot.table_uri).alter.set_table_properties({"delta.appendOnly": "false"})


def test_retries_exhausted_raise_commit_conflict_error_and_keep_the_staged_work(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = writer(t, None, commit_hooks=MetadataChangesEveryTime())
    w.write(batch([1, 2]))
    w.prepare(1)
    with pytest.raises(CommitConflictError, match="after 4 attempts") as info:
        w.commit(1)
    assert info.value.app_ids == (APP,) and w.metrics.commit_retries == 4
    assert txn_version(t, APP) is None and len(staging_leftovers(t)) == 1
    # The restored task (or the next COMMIT) commits it once the interference stops.
    writer(t, 1)
    assert_table(t, [1, 2])
    assert_no_orphans(t)


def test_vacuumed_staged_file_fails_with_the_file_and_the_cause(tmp_path: Path) -> None:
    t = tmp_path / "t"
    w = writer(t, None)
    w.write(batch([1]))
    staged = w.prepare(1)
    assert staged is not None
    deleted = DeltaTable(str(t)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True
    )
    assert [Path(p).name for p in deleted] == [Path(staged.files[0].path).name]
    with pytest.raises(StagedFileMissingError, match="VACUUM") as info:
        w.commit(1)
    assert staged.files[0].path in info.value.path
    assert txn_version(t, APP) is None  # nothing referencing a missing file was committed
