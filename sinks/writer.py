"""Exactly-once two-phase-commit writer for one Delta table, driven by Flink checkpoint markers.

``TwoPhaseDeltaWriter`` is what one sink subtask (``sinks.flink.delta_sink``) calls on each marker (OPEN,
data, PRECOMMIT(n), COMMIT(n), END_OF_INPUT). It only sequences the parts along Flink's Sink V2 seams:
``sinks.stager``, ``sinks.committer``, ``sinks.ownership`` and ``sinks.table_bootstrap``. With
``commit_mode="global"`` it stages and recovers alike but hands its committables to the one
``sinks.global_committer.GlobalCommitter`` instead of committing. Protocol: DESIGN.md section 3.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pyarrow as pa

from sinks.committable import COMMIT_MODES, CommitMode, Committable
from sinks.committer import CommitHooks, DeltaCommitter
from sinks.ownership import EOI_CHECKPOINT_ID, Ownership, plan_open, sweep_leftovers
from sinks.sink_errors import MarkerOrderError
from sinks.stager import Stager
from sinks.staging import Manifest, StagingArea, app_id_for
from sinks.table_bootstrap import ensure_merge_file_size, open_table
from sinks.table_spec import TableSpec, WriteMode
from sinks.writer_metrics import CommitResult, WriterMetrics
from storage.retry_policy import RetryPolicy

log = logging.getLogger(__name__)


class TwoPhaseDeltaWriter:
    """One subtask's exactly-once writer for one Delta table (see the module docstring)."""

    def __init__(
        self,
        *,
        spec: TableSpec,
        app_prefix: str,
        retry: RetryPolicy | None = None,
        commit_hooks: CommitHooks | None = None,
        commit_mode: CommitMode = "subtask",
    ) -> None:
        if not app_prefix:
            raise ValueError("app_prefix is empty: it names the Delta txn app ids, give it a stable value")
        if commit_mode not in COMMIT_MODES:
            raise ValueError(f"commit_mode must be one of {', '.join(COMMIT_MODES)}, got {commit_mode!r}")
        self.spec = spec
        self.app_prefix = app_prefix
        self.commit_mode: CommitMode = commit_mode
        self.retry = retry or RetryPolicy()
        self.metrics = WriterMetrics()
        self._hooks = commit_hooks
        self._staging = StagingArea.of_table(spec.table_uri, app_prefix, spec.storage_options)
        self._ownership: Ownership | None = None
        self._stager: Stager | None = None
        self._committer: DeltaCommitter | None = None
        #: Prepared manifests waiting for COMMIT(n), oldest first (subtask commit mode).
        self._staged: list[Manifest] = []
        #: Prepared manifests not yet handed to the global committer (global commit mode).
        self._committables: list[Committable] = []
        self._last_prepared: int | None = None
        self._closed = False
        self._ended = False
        #: Set when a restore finds this run's end-of-input commit already in the table.
        self._input_already_committed = False

    @property
    def app_id(self) -> str:
        """Delta txn app id of this subtask (valid after ``open``)."""
        if self._ownership is None:
            return app_id_for(self.app_prefix, "", -1)
        return self._ownership.app_id

    def open(
        self, *, restored_checkpoint_id: int | None, run_id: str, subtask: int, parallelism: int
    ) -> CommitResult:
        """OPEN marker: resolve staged work left by earlier attempts, then accept data."""
        if self._stager is not None:
            raise MarkerOrderError("OPEN arrived twice for one writer; create a new writer per task attempt")
        if parallelism < 1 or not 0 <= subtask < parallelism:
            raise ValueError(
                f"subtask {subtask} / parallelism {parallelism}: need 0 <= subtask < parallelism"
            )
        if not run_id:
            raise ValueError("run_id is empty: it must be a stable id kept in Flink state")
        r = restored_checkpoint_id
        ownership = self._ownership = Ownership(self.app_prefix, run_id, subtask, parallelism)
        self._staging.files.check_conditional_writes()
        dt = open_table(self.spec, log_name=self.app_prefix)
        if self.spec.mode in ("merge", "upsert") and subtask == 0:
            dt = ensure_merge_file_size(dt, self.spec, log_name=self.app_prefix)
        plan = plan_open(ownership, r, self._staging.list_all(), dt.transaction_version)
        if plan.input_already_committed:
            log.warning(
                "%s: restored from checkpoint %s after this run's end-of-input commit; the replayed input is "
                "already in the table and will not be staged again",
                self.app_id,
                r,
            )
            self._input_already_committed = True
        committer = self._committer = DeltaCommitter(
            dt,
            self.spec,
            self._staging,
            retry=self.retry,
            metrics=self.metrics,
            hooks=self._hooks,
            log_name=self.app_id,
        )
        self._stager = Stager(self.spec, self._staging, run_id=run_id, subtask=subtask, metrics=self.metrics)
        self._last_prepared = r
        result = CommitResult(committed=False, checkpoint_id=r if r is not None else 0)
        if plan.commit:
            assert r is not None
            log.info("%s: committing %d manifest(s) of checkpoint <= %d", self.app_id, len(plan.commit), r)
            result = committer.commit(plan.commit, r)
        for m in plan.clean_up:
            self._staging.discard_committed(m)
            self.metrics.already_committed += 1
        for m in plan.abort:
            log.info("%s: aborting staged checkpoint %d of %s", self.app_id, m.checkpoint_id, m.app_id)
            self._staging.abort(m)
            self.metrics.aborted_manifests += 1
        sweep_leftovers(self._staging, ownership)
        return result

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Buffer rows of the current checkpoint (data records between markers)."""
        stager, _ = self._require_open("write")
        if self._ended:
            raise MarkerOrderError("data arrived after END_OF_INPUT")
        stager.write(batch)

    def prepare(
        self,
        checkpoint_id: int,
        counters: Mapping[str, int] | None = None,
        progress: Mapping[str, int] | None = None,
    ) -> Manifest | None:
        """PRECOMMIT(n): stage the buffer durably for checkpoint n; nothing enters the Delta log.

        ``counters`` (name -> count of this checkpoint) go into the manifest and, summed, into the
        metadata of the Delta commit that takes it, exactly once (``lakestream.counters``). ``progress``
        (key -> where the input stands once these rows are in) becomes txn actions of that commit.
        """
        stager, _ = self._require_open("PRECOMMIT")
        if self._ended or self._input_already_committed:
            stager.discard()
            return None
        if self._last_prepared is not None and checkpoint_id <= self._last_prepared:
            raise MarkerOrderError(
                f"PRECOMMIT({checkpoint_id}) after checkpoint {self._last_prepared}: checkpoint ids must "
                "increase within a task attempt"
            )
        self._last_prepared = checkpoint_id
        manifest = stager.prepare(checkpoint_id, counters, progress)
        if manifest is not None:
            if self.commit_mode == "global":
                self._committables.append(
                    Committable.of(manifest, table_uri=self.spec.table_uri, staging=self._staging)
                )
            else:
                self._staged.append(manifest)
                self._update_staged_metrics()
        return manifest

    def take_committables(self) -> list[Committable]:
        """Global commit mode: the committables prepared since the last call, oldest first."""
        out, self._committables = self._committables, []
        return out

    def commit(self, checkpoint_id: int) -> CommitResult:
        """COMMIT(n): checkpoint n completed, so everything staged up to n goes into one Delta commit.

        In global commit mode a no-op: the global committer commits what this subtask staged.
        """
        _, committer = self._require_open("COMMIT")
        todo = [m for m in self._staged if m.checkpoint_id <= checkpoint_id]
        if not todo:
            return CommitResult(committed=False, checkpoint_id=checkpoint_id)
        result = committer.commit(todo, checkpoint_id)
        self._staged = [m for m in self._staged if m.checkpoint_id > checkpoint_id]
        self._update_staged_metrics()
        return result

    def end_of_input(
        self, counters: Mapping[str, int] | None = None, progress: Mapping[str, int] | None = None
    ) -> CommitResult:
        """END_OF_INPUT: the bounded input ended; commit everything now under ``EOI_CHECKPOINT_ID``.

        In global commit mode the rest is staged instead, as the committable of the checkpoint after the
        last one this subtask prepared (or restored): every checkpoint with a higher id that completes
        holds this subtask's state after its end, and none with a lower id does, so the subtasks' OPEN
        rule (commit <= r, abort > r) stays exact for it. The global committer's end-of-input commit
        records ``EOI_CHECKPOINT_ID``.
        """
        stager, _ = self._require_open("END_OF_INPUT")
        if self._ended or self._input_already_committed:
            stager.discard()
            self._ended = True
            return CommitResult(committed=False, checkpoint_id=EOI_CHECKPOINT_ID)
        if self.commit_mode == "global":
            end_id = (0 if self._last_prepared is None else self._last_prepared) + 1
            self.prepare(end_id, counters, progress)
            self._ended = True
            return CommitResult(committed=False, checkpoint_id=end_id)
        self.prepare(EOI_CHECKPOINT_ID, counters, progress)
        result = self.commit(EOI_CHECKPOINT_ID)
        self._ended = True
        return result

    def close(self) -> None:
        """Drop buffered rows; staged work stays on disk for the next OPEN to commit or abort."""
        if self._stager is not None:
            self._stager.discard()
        self._closed = True
        self._committer = None  # releases the table snapshot

    def _require_open(self, what: str) -> tuple[Stager, DeltaCommitter]:
        if self._closed:
            raise MarkerOrderError(f"{what} after close()")
        if self._stager is None or self._committer is None:
            raise MarkerOrderError(f"{what} before OPEN: the OPEN marker must come first")
        return self._stager, self._committer

    def _update_staged_metrics(self) -> None:
        self.metrics.staged_rows = sum(m.num_rows for m in self._staged)
        self.metrics.staged_files = sum(len(m.files) for m in self._staged)
        self.metrics.staged_bytes = sum(m.size_bytes for m in self._staged)


__all__ = [
    "EOI_CHECKPOINT_ID",
    "CommitHooks",
    "TwoPhaseDeltaWriter",
    "WriteMode",
]
