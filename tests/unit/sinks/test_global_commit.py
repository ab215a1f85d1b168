"""Global commit mode: writer subtasks stage and emit committables, one committer commits each checkpoint.

Flink-free: 1-3 ``TwoPhaseDeltaWriter(commit_mode="global")`` subtasks and one ``GlobalCommitter`` follow
marker sequences on a real silver-shaped Delta table. A crash drops every object of the attempt (Flink
restarts the whole job: writers and committer share one pipelined region) and a new attempt gets
OPEN(r) for the checkpoint Flink restores. Expectations come from ``MergeSpec.fold_rows``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakestream.silver import SILVER_MERGE, SILVER_SCHEMA
from sinks.committable import Committable
from sinks.committer import CommitHooks
from sinks.global_committer import GlobalCommitter
from sinks.sink_errors import CommittableMissingError, MarkerOrderError
from sinks.staging import Manifest, StagingArea
from sinks.table_spec import TableSpec
from sinks.writer import EOI_CHECKPOINT_ID, TwoPhaseDeltaWriter
from sinks.writer_metrics import CommitResult
from storage.delta_log import COUNTERS_KEY
from storage.retry_policy import RetryPolicy
from storage.table_files import LocalTableFiles
from tests.support.delta_tables import (
    SimulatedCrash,
    assert_no_orphans,
    assert_same_rows,
    commits_with_app,
    open_writer,
    snapshot_rows,
    staging_leftovers,
    table_options,
    table_uri,
    table_version,
    txn_version,
)
from tests.support.silver_rows import change

SPEC = SILVER_MERGE
FAST_RETRY = RetryPolicy(max_attempts=5, initial_backoff_s=0.001, max_backoff_s=0.01)
Rows = list[dict[str, Any]]


def app(subtask: int, run: str = "run-1") -> str:
    return f"job:{run}:{subtask}"


class Attempt:
    """One task attempt of the job: ``parallelism`` writer subtasks and the global committer.

    Committables go from the writers to the committer when ``deliver`` says so (records in flight are
    lost with the attempt); ``applied`` is what the table must hold once the staged checkpoints commit.
    """

    def __init__(
        self,
        table: Path,
        *,
        restored: int | None,
        parallelism: int,
        run_id: str = "run-1",
        committer_hooks: CommitHooks | None = None,
    ) -> None:
        self.table = table
        self.writers: list[TwoPhaseDeltaWriter] = [
            open_writer(
                table,
                restored=restored,
                run_id=run_id,
                subtask=i,
                parallelism=parallelism,
                schema=SILVER_SCHEMA,
                mode="merge",
                merge=SPEC,
                retry=FAST_RETRY,
                commit_mode="global",
            )
            for i in range(parallelism)
        ]
        self.committer = GlobalCommitter(
            spec=TableSpec(
                table_uri=table_uri(table),
                schema=SILVER_SCHEMA,
                mode="merge",
                merge=SPEC,
                storage_options=table_options(table),
            ),
            app_prefix="job",
            retry=FAST_RETRY,
            commit_hooks=committer_hooks,
        )
        self.committer.open()
        #: (checkpoint, subtask) -> rows staged for it
        self.staged: dict[tuple[int, int], Rows] = {}
        self._buffers: dict[int, Rows] = {i: [] for i in range(parallelism)}

    def write(self, subtask: int, rows: Rows) -> None:
        self.writers[subtask].write(pa.RecordBatch.from_pylist(rows, schema=SILVER_SCHEMA))
        self._buffers[subtask] += rows

    def precommit(
        self,
        n: int,
        counters: Mapping[int, Mapping[str, int]] | None = None,
        deliver: Sequence[int] | None = None,
    ) -> list[Committable]:
        """PRECOMMIT(n) at every subtask; the committables of ``deliver`` (default: all) reach the
        committer."""
        emitted = []
        for i, w in enumerate(self.writers):
            w.prepare(n, (counters or {}).get(i))
            self._keep(n, i)
            for c in w.take_committables():
                emitted.append(c)
                if deliver is None or i in deliver:
                    self.committer.add(c)
        return emitted

    def commit(self, n: int) -> CommitResult:
        """COMMIT(n) at every subtask (a no-op there) and at the committer."""
        for w in self.writers:
            assert not w.commit(n).committed
        return self.committer.commit(n)

    def end_subtask(self, i: int, counters: Mapping[str, int] | None = None) -> int | None:
        """END_OF_INPUT at subtask ``i``; its committable goes to the committer. Its checkpoint id."""
        w = self.writers[i]
        w.end_of_input(counters)
        [*cs] = w.take_committables()
        for c in cs:
            self.committer.add(c)
        cid = cs[0].checkpoint_id if cs else None
        if cid is not None:
            self._keep(cid, i)
        return cid

    def end(self, counters: Mapping[int, Mapping[str, int]] | None = None) -> CommitResult:
        for i in range(len(self.writers)):
            self.end_subtask(i, (counters or {}).get(i))
        return self.committer.end_of_input()

    def _keep(self, n: int, i: int) -> None:
        if self._buffers[i]:
            self.staged[(n, i)] = self._buffers[i]
            self._buffers[i] = []


class History:
    """What the table must hold: rows of committed checkpoints in (checkpoint, subtask) order."""

    def __init__(self) -> None:
        self.rows: Rows = []

    def add(self, attempt: Attempt, up_to: int) -> None:
        for key in sorted(k for k in attempt.staged if k[0] <= up_to):
            self.rows += attempt.staged.pop(key)


def assert_silver(table: Path, rows: Rows) -> None:
    expected = pa.Table.from_pylist(list(SPEC.fold_rows(rows, SILVER_SCHEMA).values()), schema=SILVER_SCHEMA)
    assert_same_rows(snapshot_rows(table, SILVER_SCHEMA, ["order_id"]), expected.sort_by("order_id"))


def orders(subtask: int, n: int, parallelism: int, count: int = 2, first: int = 0) -> Rows:
    """Rows of checkpoint ``n`` for orders keyed to ``subtask`` (as a keyBy would route them)."""
    return [
        change(f"o{k * parallelism + subtask}", f"e{n}-{subtask}-{k}", n, status=f"s{n}", address=f"a{k}")
        for k in range(first, first + count)
    ]


def last_commit(table: Path) -> dict[str, Any]:
    [entry] = DeltaTable(str(table)).history(1)
    return entry


def counters_in_history(table: Path) -> dict[str, int]:
    """``lakestream.counters`` summed over every commit of the table."""
    total: dict[str, int] = {}
    for entry in DeltaTable(str(table)).history():
        for name, value in (entry.get(COUNTERS_KEY) or {}).items():
            total[name] = total.get(name, 0) + int(value)
    return dict(sorted(total.items()))


class CrashBeforeAttempt(CommitHooks):
    """Kills the committer right before the Delta commit, once ``armed``."""

    armed = True

    def before_attempt(self, attempt: int, snapshot: DeltaTable) -> None:
        if self.armed:
            raise SimulatedCrash("committer killed right before its Delta commit")


class CrashBeforeCleanup(CommitHooks):
    """Kills the committer after the Delta commit landed, before the cleanup, once ``armed``."""

    armed = True

    def before_cleanup(self, manifests: Sequence[Manifest]) -> None:
        if self.armed:
            raise SimulatedCrash("committer killed after its Delta commit, before the cleanup")


# ---------------------------------------------------------------- the normal path


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_one_delta_commit_per_checkpoint_carries_every_subtasks_txn_action(
    tmp_path: Path, parallelism: int
) -> None:
    t = tmp_path / "silver"
    job = Attempt(t, restored=None, parallelism=parallelism)
    history = History()
    for n in (1, 2, 3):
        # With several subtasks, subtask 0 has nothing in checkpoint 2.
        busy = [i for i in range(parallelism) if not (n == 2 and i == 0 and parallelism > 1)]
        for i in busy:
            job.write(i, orders(i, n, parallelism))
        emitted = job.precommit(n)
        assert [c.subtask for c in emitted] == busy and {c.checkpoint_id for c in emitted} == {n}
        assert table_version(t) == n - 1  # staged only: nothing in the log before COMMIT(n)
        result = job.commit(n)
        history.add(job, n)
        assert table_version(t) == n  # exactly one commit for the whole checkpoint
        expected = {app(i): n for i in busy}
        assert result.committed and result.app_versions == expected
        entry = last_commit(t)
        assert entry["operation"] == "MERGE" and entry["lakestream.appVersions"] == expected
    assert_silver(t, history.rows)
    assert txn_version(t, app(0)) == 3
    idle_once = 0 if parallelism > 1 else None
    assert [commits_with_app(t, app(i)) for i in range(parallelism)] == [
        2 if i == idle_once else 3 for i in range(parallelism)
    ]
    assert all(w.metrics.commits == 0 for w in job.writers)  # the subtasks never commit
    assert job.committer.metrics.commits == 3 and job.committer.metrics.staged_rows == 0
    assert_no_orphans(t)


def test_a_commit_is_one_merge_in_checkpoint_then_subtask_order(tmp_path: Path) -> None:
    t = tmp_path / "silver"
    job = Attempt(t, restored=None, parallelism=2)
    # Orders in two subtasks (possible right after a rescale) with tied event times: the MERGE source
    # is concatenated in (checkpoint, subtask) order, so the later of those wins each tie.
    job.write(1, [change("o1", "e1", 5, status="c1 s1"), change("o2", "e2", 5, status="c1 s1")])
    job.write(0, [change("o1", "e3", 5, status="c1 s0")])
    job.precommit(1)
    job.write(0, [change("o2", "e4", 5, status="c2 s0")])
    job.precommit(2)
    job.commit(2)
    assert table_version(t) == 1
    got = {r["order_id"]: r["status"] for r in snapshot_rows(t, SILVER_SCHEMA, ["order_id"]).to_pylist()}
    assert got == {"o1": "c1 s1", "o2": "c2 s0"}


def test_skipped_commits_are_covered_by_the_next_one_and_late_ones_do_nothing(tmp_path: Path) -> None:
    t = tmp_path / "silver"
    job = Attempt(t, restored=None, parallelism=2)
    history = History()
    for n in (1, 2, 3):
        for i in range(2):
            job.write(i, orders(i, n, 2))
        job.precommit(n)
    result = job.commit(2)  # COMMIT(1) was subsumed
    history.add(job, 2)
    assert result.committed and result.app_versions == {app(0): 2, app(1): 2}
    assert table_version(t) == 1
    assert_silver(t, history.rows)
    assert not job.commit(1).committed and table_version(t) == 1  # the late COMMIT(1)
    job.commit(3)
    history.add(job, 3)
    assert not job.commit(3).committed  # delivered twice
    assert table_version(t) == 2
    assert_silver(t, history.rows)
    assert_no_orphans(t)


# ---------------------------------------------------------------- crashes


def staged_checkpoints_1_to_3(
    t: Path, hooks: CrashBeforeAttempt | CrashBeforeCleanup | None = None
) -> tuple[Attempt, History]:
    """Checkpoint 1 committed; 2 staged, delivered and completed; 3 staged, never completed.

    ``hooks`` are armed after checkpoint 1's commit.
    """
    if hooks is not None:
        hooks.armed = False
    job = Attempt(t, restored=None, parallelism=2, committer_hooks=hooks)
    history = History()
    for n in (1, 2, 3):
        for i in range(2):
            job.write(i, orders(i, n, 2))
        job.precommit(n)
        if n == 1:
            job.commit(1)
            history.add(job, 1)
    if hooks is not None:
        hooks.armed = True
    return job, history


def test_committer_crash_before_its_commit_is_recovered_by_the_subtasks_open(sink_table: Path) -> None:
    t = sink_table
    job, history = staged_checkpoints_1_to_3(t, CrashBeforeAttempt())
    with pytest.raises(SimulatedCrash):
        job.commit(2)  # checkpoint 2 completed; the committer died before its Delta commit
    lost = job.staged.pop((3, 0)), job.staged.pop((3, 1))
    history.add(job, 2)
    version = table_version(t)

    again = Attempt(t, restored=2, parallelism=2)
    # Each subtask's OPEN(2) committed its own checkpoint 2 (one commit each) and aborted its 3.
    assert table_version(t) == version + 2
    assert {txn_version(t, app(i)) for i in (0, 1)} == {2}
    assert all(commits_with_app(t, app(i)) == 2 for i in (0, 1))
    assert sum(w.metrics.aborted_manifests for w in again.writers) == 2
    assert_silver(t, history.rows)
    assert_no_orphans(t)
    assert again.committer.pending == []  # the new committer recovers nothing itself

    for i in (0, 1):  # the source replays checkpoint 3's input
        again.write(i, lost[i])
    again.precommit(4)
    again.commit(4)
    history.add(again, 4)
    assert_silver(t, history.rows)
    assert all(commits_with_app(t, app(i)) == 3 for i in (0, 1))
    assert_no_orphans(t)


def test_committer_crash_after_its_commit_does_not_commit_twice(sink_table: Path) -> None:
    t = sink_table
    job, history = staged_checkpoints_1_to_3(t, CrashBeforeCleanup())
    with pytest.raises(SimulatedCrash):
        job.commit(2)
    history.add(job, 2)
    version = table_version(t)
    assert {txn_version(t, app(i)) for i in (0, 1)} == {2}

    again = Attempt(t, restored=2, parallelism=2)
    assert table_version(t) == version  # OPEN(2) found checkpoint 2 in the table: cleanup only
    assert sum(w.metrics.already_committed for w in again.writers) == 2
    assert all(commits_with_app(t, app(i)) == 2 for i in (0, 1))
    assert_silver(t, history.rows)
    assert_no_orphans(t)


def test_crash_before_the_checkpoint_completes_aborts_what_the_committer_collected(sink_table: Path) -> None:
    t = sink_table
    job, history = staged_checkpoints_1_to_3(t)
    assert len(job.committer.pending) == 4  # checkpoints 2 and 3 of both subtasks
    Attempt(t, restored=1, parallelism=2)  # the job failed before checkpoint 2 completed
    assert table_version(t) == 1
    assert_silver(t, history.rows)
    assert_no_orphans(t)


def test_subtask_crash_after_precommit(sink_table: Path) -> None:
    t = sink_table
    job = Attempt(t, restored=None, parallelism=2)
    history = History()
    for i in range(2):
        job.write(i, orders(i, 1, 2))
    job.precommit(1)
    job.commit(1)
    history.add(job, 1)
    for i in range(2):
        job.write(i, orders(i, 2, 2))
    # Subtask 1 staged checkpoint 2 and died before its committable left it: checkpoint 2 fails.
    [_, lost] = job.precommit(2, deliver=[0])
    assert (t / lost.manifest_path).is_file()
    Attempt(t, restored=1, parallelism=2)
    assert table_version(t) == 1 and not (t / lost.manifest_path).exists()
    assert_silver(t, history.rows)
    assert_no_orphans(t)

    # Subtask 1 dies after checkpoint 2 completed, before the committer got COMMIT(2).
    again = Attempt(t, restored=1, parallelism=2)
    for i in range(2):
        again.write(i, orders(i, 2, 2))
    again.precommit(2)
    history.add(again, 2)
    Attempt(t, restored=2, parallelism=2)  # both subtasks' OPEN(2) commit their own checkpoint 2
    assert {txn_version(t, app(i)) for i in (0, 1)} == {2}
    assert all(commits_with_app(t, app(i)) == 2 for i in (0, 1))
    assert_silver(t, history.rows)
    assert_no_orphans(t)


# ---------------------------------------------------------------- rescaling


def test_rescale_2_to_1(sink_table: Path) -> None:
    t = sink_table
    job, history = staged_checkpoints_1_to_3(t, CrashBeforeAttempt())
    with pytest.raises(SimulatedCrash):
        job.commit(2)
    lost = job.staged.pop((3, 0)) + job.staged.pop((3, 1))
    history.add(job, 2)
    version = table_version(t)

    single = Attempt(t, restored=2, parallelism=1)  # subtask 0 owns slots 0 and 1
    assert table_version(t) == version + 1  # both slots' checkpoint 2 in one commit, their own app ids
    assert last_commit(t)["lakestream.appVersions"] == {app(0): 2, app(1): 2}
    assert single.writers[0].metrics.aborted_manifests == 2
    assert_silver(t, history.rows)
    assert_no_orphans(t)

    single.write(0, lost)
    single.precommit(4)
    single.commit(4)
    history.add(single, 4)
    assert last_commit(t)["lakestream.appVersions"] == {app(0): 4}
    assert txn_version(t, app(1)) == 2
    assert_silver(t, history.rows)
    assert_no_orphans(t)


def test_rescale_1_to_2(tmp_path: Path) -> None:
    t = tmp_path / "silver"
    job = Attempt(t, restored=None, parallelism=1, committer_hooks=CrashBeforeAttempt())
    history = History()
    job.write(0, orders(0, 1, 1, count=4))
    job.precommit(1)
    with pytest.raises(SimulatedCrash):
        job.commit(1)
    history.add(job, 1)

    wide = Attempt(t, restored=1, parallelism=2)
    assert table_version(t) == 1 and txn_version(t, app(0)) == 1 and txn_version(t, app(1)) is None
    assert_silver(t, history.rows)
    for i in range(2):
        wide.write(i, orders(i, 2, 2))
    wide.precommit(2)
    wide.commit(2)
    history.add(wide, 2)
    assert table_version(t) == 2
    assert last_commit(t)["lakestream.appVersions"] == {app(0): 2, app(1): 2}
    assert_silver(t, history.rows)
    assert_no_orphans(t)


# ---------------------------------------------------------------- end of input


def test_end_of_input_commits_everything_once_and_a_late_restore_stages_nothing(tmp_path: Path) -> None:
    t = tmp_path / "silver"
    job = Attempt(t, restored=None, parallelism=2)
    history = History()
    for i in range(2):
        job.write(i, orders(i, 1, 2))
    job.precommit(1)
    for i in range(2):
        job.write(i, orders(i, 2, 2))
    job.precommit(2)  # checkpoint 2 never completes before the input ends
    for i in range(2):
        job.write(i, orders(i, 3, 2))
    result = job.end()
    history.add(job, 10)
    assert result.committed and result.app_versions == {app(0): EOI_CHECKPOINT_ID, app(1): EOI_CHECKPOINT_ID}
    assert table_version(t) == 1  # checkpoints 1, 2 and the rest: one commit
    assert_silver(t, history.rows)
    assert job.precommit(3) == [] and not job.commit(3).committed  # the final checkpoint: nothing left
    with pytest.raises(MarkerOrderError, match="after END_OF_INPUT"):
        job.committer.add(_fake_committable(t))
    assert_no_orphans(t)

    late = Attempt(t, restored=1, parallelism=2)  # a crash before the job finished: replay after 1
    for i in range(2):
        late.write(i, orders(i, 2, 2) + orders(i, 3, 2))
    assert late.precommit(5) == [] and late.end() == CommitResult(False, EOI_CHECKPOINT_ID)
    assert table_version(t) == 1
    assert_silver(t, history.rows)
    assert_no_orphans(t)


def _fake_committable(t: Path) -> Committable:
    return Committable(str(t), "job", "run-1", 0, 99, "_lakestream/manifests/job/run-1/0/x.json")


def test_a_subtask_that_ended_early_belongs_to_every_later_checkpoint(tmp_path: Path) -> None:
    t = tmp_path / "silver"
    job = Attempt(t, restored=None, parallelism=2, committer_hooks=CrashBeforeAttempt())
    history = History()
    for i in range(2):
        job.write(i, orders(i, 1, 2))
    job.precommit(1)
    job.write(0, orders(0, 2, 2))
    # Subtask 0's input ends after PRECOMMIT(1): the rest is staged as its checkpoint 2, which every
    # checkpoint from 2 on holds (subtask 0's state there is "ended"), checkpoint 1 not.
    assert job.end_subtask(0) == 2
    job.write(1, orders(1, 2, 2))
    job.precommit(2)  # only subtask 1 stages: subtask 0 has ended
    assert sorted((m.subtask, m.checkpoint_id) for m in job.committer.pending) == [
        (0, 1),
        (0, 2),
        (1, 1),
        (1, 2),
    ]
    history.add(job, 2)
    # Checkpoint 2 completed, the committer died before committing it (and 1).
    with pytest.raises(SimulatedCrash):
        job.commit(2)

    again = Attempt(t, restored=2, parallelism=2)  # OPEN(2) commits subtask 0's end staging too
    assert {txn_version(t, app(i)) for i in (0, 1)} == {2}
    assert_silver(t, history.rows)
    assert_no_orphans(t)
    assert again.end_subtask(0) is None  # restored as ended: no input, nothing staged


def test_an_early_end_restored_from_before_it_is_staged_again(tmp_path: Path) -> None:
    t = tmp_path / "silver"
    job = Attempt(t, restored=None, parallelism=2)
    history = History()
    for i in range(2):
        job.write(i, orders(i, 1, 2))
    job.precommit(1)
    job.commit(1)
    history.add(job, 1)
    job.write(0, orders(0, 2, 2))
    assert job.end_subtask(0) == 2
    job.commit(1)  # a late COMMIT(1) must not take the end staging, which belongs to checkpoint 2
    assert txn_version(t, app(0)) == 1

    again = Attempt(t, restored=1, parallelism=2)  # checkpoint 2 never completed: aborted, replayed
    assert_silver(t, history.rows)
    assert_no_orphans(t)
    again.write(0, orders(0, 2, 2))
    again.write(1, orders(1, 2, 2))
    result = again.end()
    history.add(again, 10)
    assert result.app_versions == {app(0): EOI_CHECKPOINT_ID, app(1): EOI_CHECKPOINT_ID}
    assert_silver(t, history.rows)
    assert_no_orphans(t)


# ---------------------------------------------------------------- counters


def test_counters_are_recorded_exactly_once_across_retries_crashes_and_recovery(sink_table: Path) -> None:
    t = sink_table

    class ConflictOnce(CommitHooks):
        """A concurrent ALTER before the first attempt of every commit: each one is retried."""

        def before_attempt(self, attempt: int, snapshot: DeltaTable) -> None:
            if attempt == 0:
                table = DeltaTable(snapshot.table_uri, storage_options=table_options(t))
                table.alter.set_table_properties({"delta.appendOnly": "false"})

    def counts(n: int, i: int) -> dict[str, int]:
        return {"events_duplicate": n + i, "silver_changes": 10 * n + i, "events_late": i}

    job = Attempt(t, restored=None, parallelism=2, committer_hooks=ConflictOnce())
    recorded: dict[str, int] = {}

    def record(*keys: tuple[int, int]) -> None:
        for n, i in keys:
            for name, v in counts(n, i).items():
                recorded[name] = recorded.get(name, 0) + v

    for n in (1, 2):
        for i in range(2):
            job.write(i, orders(i, n, 2))
        job.precommit(n, counters={i: counts(n, i) for i in range(2)})
    result = job.commit(2)  # COMMIT(1) skipped; one conflict, retried
    record((1, 0), (1, 1), (2, 0), (2, 1))
    assert result.retries == 1 and result.counters == recorded
    assert last_commit(t)[COUNTERS_KEY] == recorded
    assert counters_in_history(t) == recorded

    # Checkpoint 3 has counts but no silver rows (all duplicates): still recorded, by a commit of its own.
    job.precommit(3, counters={0: counts(3, 0), 1: counts(3, 1)})
    assert all(len(m.files) == 0 for m in job.committer.pending)
    version = table_version(t)
    job.commit(3)
    record((3, 0), (3, 1))
    assert table_version(t) == version + 2  # the ALTER and the counters-only commit
    assert last_commit(t)["operation"] == "WRITE"
    assert counters_in_history(t) == recorded and txn_version(t, app(1)) == 3

    # A committer that dies before committing 4: its counts wait in the manifests.
    doomed = Attempt(t, restored=3, parallelism=2, committer_hooks=CrashBeforeAttempt())
    for i in range(2):
        doomed.write(i, orders(i, 4, 2))
    doomed.precommit(4, counters={i: counts(4, i) for i in range(2)})
    doomed.precommit(14, counters={0: counts(14, 0)})  # never completes: never counted
    with pytest.raises(SimulatedCrash):
        doomed.commit(4)
    assert counters_in_history(t) == recorded
    # OPEN(4) commits checkpoint 4 (a commit per subtask, each with its own counts) and aborts 14; then
    # a committer that dies after committing 5, before its cleanup.
    doomed = Attempt(t, restored=4, parallelism=2, committer_hooks=CrashBeforeCleanup())
    record((4, 0), (4, 1))
    assert counters_in_history(t) == recorded
    doomed.precommit(5, counters={i: counts(5, i) for i in range(2)})
    with pytest.raises(SimulatedCrash):
        doomed.commit(5)
    record((5, 0), (5, 1))
    Attempt(t, restored=5, parallelism=2)  # OPEN(5) only cleans up
    assert counters_in_history(t) == recorded
    # (not assert_no_orphans: the MERGE attempts that lost to the ALTER left their output files behind)
    assert staging_leftovers(t) == []


def test_counters_go_through_the_subtask_commit_path_too(tmp_path: Path) -> None:
    t = tmp_path / "silver"
    w = open_writer(t, restored=None, schema=SILVER_SCHEMA, mode="merge", merge=SPEC)
    w.write(pa.RecordBatch.from_pylist(orders(0, 1, 1), schema=SILVER_SCHEMA))
    w.prepare(1, counters={"silver_changes": 2})
    w.prepare(2, counters={"silver_changes": 0, "events_duplicate": 4})  # counters only
    assert w.prepare(3, counters={"events_duplicate": 0}) is None  # all zero and no rows: nothing staged
    result = w.commit(3)
    assert result.counters == {"events_duplicate": 4, "silver_changes": 2}
    w.write(pa.RecordBatch.from_pylist(orders(0, 4, 1), schema=SILVER_SCHEMA))
    w.end_of_input(counters={"silver_changes": 2})
    assert counters_in_history(t) == {"events_duplicate": 4, "silver_changes": 4}
    with pytest.raises(ValueError, match="must be an int"):
        open_writer(t, restored=None, run_id="run-2", schema=SILVER_SCHEMA, mode="merge", merge=SPEC).prepare(
            1,
            counters={"x": 1.5},  # type: ignore[dict-item]
        )


def test_manifests_without_counters_still_load(tmp_path: Path) -> None:
    import json

    t = tmp_path / "silver"
    w = open_writer(t, restored=None, schema=SILVER_SCHEMA, mode="merge", merge=SPEC)
    w.write(pa.RecordBatch.from_pylist(orders(0, 1, 1), schema=SILVER_SCHEMA))
    m = w.prepare(1, counters={"silver_changes": 2})
    assert m is not None
    path = t / StagingArea(LocalTableFiles(t), "job").manifest_path("run-1", 0, 1)
    doc = json.loads(path.read_text())
    assert doc["counters"] == {"silver_changes": 2}
    del doc["counters"]  # what a version before the counters wrote
    path.write_text(json.dumps(doc))
    assert Manifest.from_json(path.read_text()).counters == {}
    open_writer(t, restored=1, schema=SILVER_SCHEMA, mode="merge", merge=SPEC)  # OPEN(1) commits it
    assert txn_version(t, app(0)) == 1 and COUNTERS_KEY not in last_commit(t)
    assert_no_orphans(t)


# ---------------------------------------------------------------- concurrent writers and misuse


class CompactBeforeFirstAttempt(CommitHooks):
    """A compaction rewrites the files the MERGE reads, between its snapshot and its commit."""

    def __init__(self) -> None:
        self.compacted = 0

    def before_attempt(self, attempt: int, snapshot: DeltaTable) -> None:
        if attempt == 0 and snapshot.version() >= 2:
            self.compacted += DeltaTable(snapshot.table_uri).optimize.compact()["numFilesRemoved"]


def test_a_conflict_with_a_concurrent_compaction_is_replanned(tmp_path: Path) -> None:
    t = tmp_path / "silver"
    hooks = CompactBeforeFirstAttempt()
    job = Attempt(t, restored=None, parallelism=2, committer_hooks=hooks)
    history = History()
    for n in (1, 2, 3):
        for i in range(2):
            # New orders in 1 and 2 (a file each); 3 updates those of 1 (its MERGE reads their file).
            job.write(i, orders(i, n, 2, first=10 * (n == 2), count=2 + (n == 3)))
        job.precommit(n, counters={i: {"silver_changes": 1} for i in range(2)})
        result = job.commit(n)
        history.add(job, n)
    assert hooks.compacted >= 2
    assert result.committed and result.retries == 1 and job.committer.metrics.commit_retries == 1
    assert result.app_versions == {app(0): 3, app(1): 3}
    assert [h["operation"] for h in DeltaTable(str(t)).history(2)] == ["MERGE", "OPTIMIZE"]
    assert all(commits_with_app(t, app(i)) == 3 for i in (0, 1))
    assert counters_in_history(t) == {"silver_changes": 6}
    assert_silver(t, history.rows)
    assert staging_leftovers(t) == []


def test_the_committer_refuses_what_is_not_its_own(tmp_path: Path) -> None:
    t = tmp_path / "silver"
    job = Attempt(t, restored=None, parallelism=1)
    job.write(0, orders(0, 1, 1))
    [c] = job.precommit(1, deliver=[])
    with pytest.raises(ValueError, match="wire each table"):
        job.committer.add(c._replace(app_prefix="other"))
    with pytest.raises(ValueError, match="not the prepared manifest"):
        job.committer.add(c._replace(checkpoint_id=7))  # the path names checkpoint 1's manifest
    job.committer.add(c)
    job.committer.add(c)  # delivered twice: collected once
    assert len(job.committer.pending) == 1
    with pytest.raises(CommittableMissingError, match="another job"):
        job.committer.add(_fake_committable(t))
    job.commit(1)
    job.committer.add(c)  # its manifest is gone, but the table holds it: nothing to do
    assert job.committer.pending == []
    fresh = GlobalCommitter(
        spec=TableSpec(table_uri=str(t), schema=SILVER_SCHEMA, mode="merge", merge=SPEC), app_prefix="job"
    )
    with pytest.raises(MarkerOrderError, match="before OPEN"):
        fresh.add(c)
