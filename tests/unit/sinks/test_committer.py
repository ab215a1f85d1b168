"""The committer on its own: staged manifests of several subtasks into one Delta commit, the txn check,
and the retry/conflict path driven through ``CommitHooks`` by real concurrent commits."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakestream.merge_spec import MergeSpec
from sinks.committer import CommitHooks, DeltaCommitter
from sinks.sink_errors import CommitConflictError, StagedFileMissingError
from sinks.stager import Stager
from sinks.staging import Manifest, StagingArea
from sinks.table_bootstrap import open_table
from sinks.table_spec import TableSpec, WriteMode
from sinks.writer_metrics import WriterMetrics
from storage.retry_policy import RetryPolicy
from storage.table_files import LocalTableFiles
from tests.support.delta_tables import (
    commits_with_app,
    staging_leftovers,
    table_version,
    txn_version,
)

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.01)


class Setup:
    """One table, its staging area, and stagers for any (run, subtask) slot."""

    def __init__(self, table: Path, mode: WriteMode = "append") -> None:
        merge = MergeSpec(keys=("id",)) if mode != "append" else None
        self.table = table
        self.spec = TableSpec(table_uri=str(table), schema=SCHEMA, mode=mode, merge=merge)
        self.staging = StagingArea(LocalTableFiles(table), "job")
        open_table(self.spec, log_name="job")

    def stage(self, subtask: int, n: int, rows: list[tuple[int, str]], run: str = "run-1") -> Manifest:
        stager = Stager(self.spec, self.staging, run_id=run, subtask=subtask, metrics=WriterMetrics())
        stager.write(pa.RecordBatch.from_pylist([{"id": i, "v": v} for i, v in rows], schema=SCHEMA))
        manifest = stager.prepare(n)
        assert manifest is not None
        return manifest

    def committer(self, hooks: CommitHooks | None = None, retry: RetryPolicy = FAST_RETRY) -> DeltaCommitter:
        dt = DeltaTable(str(self.table))
        return DeltaCommitter(dt, self.spec, self.staging, retry=retry, metrics=WriterMetrics(), hooks=hooks)

    def rows(self) -> list[tuple[int, str]]:
        data = DeltaTable(str(self.table)).to_pyarrow_table().sort_by("id")
        return list(zip(data["id"].to_pylist(), data["v"].to_pylist(), strict=True))


class Recorder(CommitHooks):
    """Records each attempt (number, snapshot version, time); attempts in ``alter_on`` race an ALTER."""

    def __init__(self, alter_on: Sequence[int] = ()) -> None:
        self.alter_on = set(alter_on)
        self.attempts: list[tuple[int, int, float]] = []

    def before_attempt(self, attempt: int, snapshot: DeltaTable) -> None:
        self.attempts.append((attempt, snapshot.version(), time.monotonic()))
        if attempt in self.alter_on:  # a metadata change: a conflict delta-rs cannot resolve itself
            DeltaTable(snapshot.table_uri).alter.set_table_properties({"delta.appendOnly": "false"})


def test_several_subtasks_manifests_go_into_one_commit_with_one_txn_action_per_app_id(tmp_path: Path) -> None:
    s = Setup(tmp_path / "t")
    staged = [
        s.stage(0, 1, [(1, "a")]),
        s.stage(0, 2, [(2, "b")]),
        s.stage(1, 2, [(3, "c")]),
        s.stage(2, 1, [(4, "d")], run="old"),
    ]
    committer = s.committer()
    result = committer.commit(staged, 2)
    expected = {"job:old:2": 1, "job:run-1:0": 2, "job:run-1:1": 2}
    assert result.committed and result.rows == 4 and result.files == 4 and result.app_versions == expected
    assert table_version(s.table) == 1 == result.table_version
    assert {app: txn_version(s.table, app) for app in expected} == expected
    assert all(commits_with_app(s.table, app) == 1 for app in expected)
    [last] = DeltaTable(str(s.table)).history(1)
    assert last["lakestream.appVersions"] == expected
    assert s.rows() == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    assert staging_leftovers(s.table) == []
    assert committer.metrics.commits == 1 and committer.metrics.rows_committed == 4


def test_one_merge_carries_several_subtasks_sources_and_ties_go_to_the_higher_subtask(tmp_path: Path) -> None:
    s = Setup(tmp_path / "kv", mode="upsert")
    staged = [s.stage(1, 1, [(1, "from 1"), (2, "b")]), s.stage(0, 1, [(1, "from 0"), (3, "c")])]
    result = s.committer().commit(staged, 1)
    assert result.committed and table_version(s.table) == 1
    assert txn_version(s.table, "job:run-1:0") == txn_version(s.table, "job:run-1:1") == 1
    assert s.rows() == [(1, "from 1"), (2, "b"), (3, "c")]
    assert staging_leftovers(s.table) == []  # the merge sources went with the manifests


def test_work_the_table_already_holds_is_only_cleaned_up(tmp_path: Path) -> None:
    s = Setup(tmp_path / "t")
    m = s.stage(0, 1, [(1, "a")])
    assert s.committer().commit([m], 1).committed
    s.staging.write(m)  # the manifest again, as a crash between the commit and the cleanup leaves it
    again = s.committer()
    result = again.commit([m], 1)
    assert not result.committed and again.metrics.already_committed == 1
    assert table_version(s.table) == 1 and commits_with_app(s.table, "job:run-1:0") == 1
    assert s.rows() == [(1, "a")] and staging_leftovers(s.table) == []


def test_a_conflict_is_replanned_on_a_fresh_snapshot_after_the_backoff(tmp_path: Path) -> None:
    s = Setup(tmp_path / "t")
    m = s.stage(0, 1, [(1, "a")])
    hooks = Recorder(alter_on=[0])
    retry = RetryPolicy(max_attempts=3, initial_backoff_s=0.2, jitter=0)
    committer = s.committer(hooks, retry)
    result = committer.commit([m], 1)
    (first, v0, t0), (second, v1, t1) = hooks.attempts
    assert (first, second) == (0, 1)
    assert v1 == v0 + 1  # the retry was planned on the snapshot that has the concurrent ALTER
    assert t1 - t0 >= retry.backoff_s(1)
    assert result.committed and result.retries == 1 and committer.metrics.commit_retries == 1
    assert txn_version(s.table, "job:run-1:0") == 1 and s.rows() == [(1, "a")]


def test_conflicts_on_every_attempt_end_in_commit_conflict_error_with_the_work_kept(tmp_path: Path) -> None:
    s = Setup(tmp_path / "t")
    staged = [s.stage(1, 1, [(1, "a")]), s.stage(0, 1, [(2, "b")])]
    hooks = Recorder(alter_on=range(3))
    committer = s.committer(hooks)
    with pytest.raises(CommitConflictError, match="after 3 attempts") as info:
        committer.commit(staged, 1)
    assert [a for a, _, _ in hooks.attempts] == [0, 1, 2]
    assert info.value.app_ids == ("job:run-1:0", "job:run-1:1") and info.value.checkpoint_id == 1
    assert committer.metrics.commit_retries == 3 and committer.metrics.commits == 0
    assert txn_version(s.table, "job:run-1:0") is None and len(staging_leftovers(s.table)) == 2
    assert s.committer().commit(staged, 1).committed  # once the interference stops
    assert s.rows() == [(1, "a"), (2, "b")]


def test_a_missing_staged_file_fails_before_any_attempt(tmp_path: Path) -> None:
    s = Setup(tmp_path / "t")
    m = s.stage(0, 1, [(1, "a")])
    (s.table / m.files[0].path).unlink()
    hooks = Recorder()
    with pytest.raises(StagedFileMissingError) as info:
        s.committer(hooks).commit([m], 1)
    assert info.value.path == str(s.table / m.files[0].path) and hooks.attempts == []
    assert table_version(s.table) == 0


def test_cleanup_follows_the_commit(tmp_path: Path) -> None:
    s = Setup(tmp_path / "t")
    m = s.stage(0, 1, [(1, "a")])
    seen: list[tuple[int | None, int]] = []

    class Check(CommitHooks):
        def before_cleanup(self, manifests: Sequence[Manifest]) -> None:
            seen.append((txn_version(s.table, "job:run-1:0"), len(staging_leftovers(s.table))))

    s.committer(Check()).commit([m], 1)
    assert seen == [(1, 1)]  # committed, manifest still there; then cleaned up
    assert staging_leftovers(s.table) == []
