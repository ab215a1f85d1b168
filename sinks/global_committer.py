"""The global committer of one table: every subtask's staged work of a checkpoint in ONE Delta commit.

Writer subtasks in global-commit mode stage at PRECOMMIT(n) and emit a ``Committable`` instead of
committing (``sinks.writer``), so p subtasks do not race p MERGEs. One ``GlobalCommitter`` collects them
and at COMMIT(n) commits every one <= n through ``sinks.committer.DeltaCommitter``; at END_OF_INPUT the
rest, under ``EOI_CHECKPOINT_ID``. It keeps no state: what a crashed attempt left staged is resolved by
the writer subtasks' OPEN (DESIGN.md section 3).
"""

from __future__ import annotations

import logging

from sinks.committable import Committable
from sinks.committer import CommitHooks, DeltaCommitter
from sinks.ownership import EOI_CHECKPOINT_ID
from sinks.sink_errors import CommittableMissingError, MarkerOrderError
from sinks.staging import Manifest, StagingArea, app_id_for
from sinks.table_bootstrap import open_table
from sinks.table_spec import TableSpec
from sinks.writer_metrics import CommitResult, WriterMetrics
from storage.retry_policy import RetryPolicy
from storage.table_files import root_uri

log = logging.getLogger(__name__)


class GlobalCommitter:
    """Commits the committables of one table's writer subtasks (see the module docstring).

    Takes the ``TableSpec`` and app prefix its ``TwoPhaseDeltaWriter``s take: one spec for both sides.
    """

    def __init__(
        self,
        *,
        spec: TableSpec,
        app_prefix: str,
        retry: RetryPolicy | None = None,
        commit_hooks: CommitHooks | None = None,
    ) -> None:
        if not app_prefix:
            raise ValueError("app_prefix is empty: it must be the writers' app prefix")
        self.spec = spec
        self.app_prefix = app_prefix
        self.retry = retry or RetryPolicy()
        self.metrics = WriterMetrics()
        self._hooks = commit_hooks
        self._staging = StagingArea.of_table(spec.table_uri, app_prefix, spec.storage_options)
        self._committer: DeltaCommitter | None = None
        #: Collected, not yet committed: (run id, subtask, checkpoint) -> its prepared manifest.
        self._pending: dict[tuple[str, int, int], Manifest] = {}
        self._ended = False
        self._closed = False

    def open(self) -> None:
        """OPEN: open (or create) the table. Nothing to recover: the writer subtasks' OPEN does that."""
        if self._committer is not None:
            raise MarkerOrderError("OPEN arrived twice for one committer; create a new one per task attempt")
        self._staging.files.check_conditional_writes()
        dt = open_table(self.spec, log_name=self.app_prefix)
        self._committer = DeltaCommitter(
            dt,
            self.spec,
            self._staging,
            retry=self.retry,
            metrics=self.metrics,
            hooks=self._hooks,
            log_name=f"{self.app_prefix} (global committer)",
        )

    def add(self, committable: Committable) -> None:
        """DATA: one subtask's prepared manifest, to commit once its checkpoint completes."""
        committer = self._require_open("a committable")
        if self._ended:
            raise MarkerOrderError("a committable arrived after END_OF_INPUT")
        c = committable
        if c.app_prefix != self.app_prefix or root_uri(c.table_uri) != self._staging.table_uri:
            raise ValueError(
                f"committable of {c.app_prefix!r} at {c.table_uri} reached the committer of "
                f"{self.app_prefix!r} at {self.spec.table_uri}: wire each table's writers to its committer"
            )
        if c.key in self._pending:
            return
        manifest = self._staging.read(c.manifest_path)
        if manifest is None:
            app_id = app_id_for(c.app_prefix, c.run_id, c.subtask)
            version = committer.txn_version(committer.snapshot(), app_id)
            if version is not None and version >= c.checkpoint_id:
                log.info("%s: checkpoint %d of %s is committed", self.app_prefix, c.checkpoint_id, app_id)
                return
            raise CommittableMissingError(
                manifest_path=c.manifest_path, app_id=app_id, checkpoint_id=c.checkpoint_id
            )
        if manifest.state != "prepared" or not c.matches(manifest):
            raise ValueError(f"{c.manifest_path} is not the prepared manifest the committable names: {c}")
        self._pending[c.key] = manifest
        self._update_staged_metrics()

    def commit(self, checkpoint_id: int) -> CommitResult:
        """COMMIT(n): every collected committable <= n into one Delta commit (skipped COMMITs included)."""
        committer = self._require_open("COMMIT")
        return self._commit(committer, checkpoint_id, txn_version=None)

    def end_of_input(self) -> CommitResult:
        """END_OF_INPUT (every writer subtask ended): all collected work, recorded as the input's end."""
        committer = self._require_open("END_OF_INPUT")
        if self._ended:
            return CommitResult(committed=False, checkpoint_id=EOI_CHECKPOINT_ID)
        result = self._commit(committer, EOI_CHECKPOINT_ID, txn_version=EOI_CHECKPOINT_ID)
        self._ended = True
        return result

    def close(self) -> None:
        """Forget the collected committables; their manifests stay for the writers' next OPEN."""
        self._pending = {}
        self._committer = None
        self._closed = True

    @property
    def pending(self) -> list[Manifest]:
        """Collected manifests not committed yet, in commit order (checkpoint, subtask)."""
        return sorted(self._pending.values(), key=lambda m: (m.checkpoint_id, m.subtask, m.run_id))

    def _commit(
        self, committer: DeltaCommitter, checkpoint_id: int, *, txn_version: int | None
    ) -> CommitResult:
        todo = [m for m in self.pending if m.checkpoint_id <= checkpoint_id]
        if not todo:
            return CommitResult(committed=False, checkpoint_id=checkpoint_id)
        result = committer.commit(todo, checkpoint_id, txn_version=txn_version)
        for m in todo:
            del self._pending[(m.run_id, m.subtask, m.checkpoint_id)]
        self._update_staged_metrics()
        return result

    def _require_open(self, what: str) -> DeltaCommitter:
        if self._closed:
            raise MarkerOrderError(f"{what} after close()")
        if self._committer is None:
            raise MarkerOrderError(f"{what} before OPEN: the OPEN marker must come first")
        return self._committer

    def _update_staged_metrics(self) -> None:
        pending = self._pending.values()
        self.metrics.staged_rows = sum(m.num_rows for m in pending)
        self.metrics.staged_files = sum(len(m.files) for m in pending)
        self.metrics.staged_bytes = sum(m.size_bytes for m in pending)
