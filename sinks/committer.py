"""The commit side of the sink: staged manifests (the committables) into ONE Delta commit, exactly once.

Each attempt refreshes the snapshot, skips manifests whose app id already reached their checkpoint
(the txn check delta-rs does not make itself), and commits the rest with one txn action per app id:
appended files, one guarded MERGE, or (changes mode) the rows folded per key into one sequenced file,
together with the manifests' summed counters and their progress values. Conflicts are re-planned
with ``RetryPolicy`` backoff. It keeps no per-subtask state, so manifests of several subtasks and runs
commit alike. Protocol: DESIGN.md section 3; progress: section 9; changes mode: section 13.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from lakestream.freshness import FRESHNESS_KEY, latest_freshness, newest
from lakestream.progress import PROGRESS_KEY, merged, progress_app_id
from sinks.delta_files import file_stats
from sinks.sink_errors import CommitConflictError, StagedFileMissingError
from sinks.staging import Manifest, StagedFile, StagingArea
from sinks.table_spec import TableSpec
from sinks.writer_metrics import CommitResult, WriterMetrics
from storage.delta_log import COUNTERS_KEY, AppVersions, DeltaLog, counter_totals
from storage.parquet_encoding import pyarrow_options, writer_properties
from storage.parquet_read import read_parquet
from storage.retry_policy import RetryPolicy

log = logging.getLogger(__name__)


class CommitHooks:
    """Seams around a commit for tests and tracing; this base class does nothing."""

    def before_attempt(self, attempt: int, snapshot: DeltaTable) -> None:
        """Right before Delta commit attempt ``attempt`` (0 first), after the txn check on ``snapshot``."""

    def before_cleanup(self, manifests: Sequence[Manifest]) -> None:
        """After the commit landed (or was found in the table), before the staged work is deleted."""


@dataclass(frozen=True)
class _CommitPlan:
    """One commit attempt: the manifests the snapshot lacks, their app ids, the commit's txn actions
    and metadata, and (merge, upsert and changes mode) their staged rows folded per key."""

    pending: list[Manifest]
    app_ids: list[str]
    props: CommitProperties
    source: pa.Table | None


@dataclass(frozen=True)
class _Landed:
    """What a commit took: the manifests (none: the table held them all), files added, retries."""

    manifests: list[Manifest]
    files: int
    retries: int


class DeltaCommitter:
    """Commits manifests of one app prefix into one Delta table (see module docstring)."""

    def __init__(
        self,
        table: DeltaTable,
        spec: TableSpec,
        staging: StagingArea,
        *,
        retry: RetryPolicy,
        metrics: WriterMetrics,
        hooks: CommitHooks | None = None,
        log_name: str = "",
    ) -> None:
        self.spec = spec
        self.retry = retry
        self.metrics = metrics
        self.hooks = hooks or CommitHooks()
        self.log_name = log_name or staging.app_prefix
        self._table = table
        self._staging = staging
        self._app_versions = AppVersions(
            DeltaLog(spec.table_uri, storage_options=spec.storage_options, cache_size=0)
        )
        self._files = staging.files
        self._rng = random.Random()
        #: Newest event time the table holds (freshness_column), "" for none; None until first read.
        self._newest_event: str | None = None

    def snapshot(self) -> DeltaTable:
        """The table at its latest version."""
        self._table.update_incremental()
        return self._table

    def txn_version(self, snapshot: DeltaTable, app_id: str) -> int | None:
        """``app_id``'s txn version in ``snapshot`` (one of this committer's snapshots)."""
        return self._app_versions.of(snapshot, app_id)

    def commit(
        self, manifests: Sequence[Manifest], checkpoint_id: int, *, txn_version: int | None = None
    ) -> CommitResult:
        """Commit every manifest the table does not hold yet, under ``checkpoint_id``, then clean up.

        Each app id's txn action records its highest checkpoint in the commit, or ``txn_version`` when
        given (the end-of-input commit records ``EOI_CHECKPOINT_ID``; it must not be below any of them).
        The manifests' counters are added up into the commit's ``lakestream.counters`` metadata.
        Raises ``CommitConflictError`` (staged work kept) when the retries are spent, and
        ``StagedFileMissingError`` when a staged file is gone.
        """
        started = time.monotonic()
        landed = self._commit_with_retries(manifests, checkpoint_id, txn_version)
        latency = time.monotonic() - started
        self.hooks.before_cleanup(manifests)
        for m in manifests:
            self._staging.discard_committed(m)
        self.metrics.already_committed += len(manifests) - len(landed.manifests)
        if not landed.manifests:
            log.info("%s: checkpoint %d was already committed; cleaned up", self.log_name, checkpoint_id)
            return CommitResult(committed=False, checkpoint_id=checkpoint_id, retries=landed.retries)
        return self._report(landed, checkpoint_id, txn_version, latency)

    def _commit_with_retries(
        self, manifests: Sequence[Manifest], checkpoint_id: int, txn_version: int | None
    ) -> _Landed:
        """Plan and write the commit on a fresh snapshot until it lands or the table holds everything;
        a conflict is planned again after the ``RetryPolicy`` backoff, ``CommitConflictError`` at the end."""
        app_ids: list[str] = []  # of the last attempt, for the error

        def attempt(n: int) -> _Landed:
            dt = self.snapshot()
            plan = self._plan(dt, manifests, checkpoint_id, txn_version)
            if plan is None:
                return _Landed([], files=0, retries=n - 1)
            app_ids[:] = plan.app_ids
            self.hooks.before_attempt(n - 1, dt)
            try:
                files = self._write(dt, plan)
            except CommitFailedError:
                self.metrics.commit_retries += 1
                raise
            return _Landed(plan.pending, files=files, retries=n - 1)

        def on_retry(n: int, exc: CommitFailedError, delay: float) -> None:
            log.info(
                "%s: commit of checkpoint %d conflicted (%s); retry %d in %.3fs",
                self.log_name,
                checkpoint_id,
                str(exc).splitlines()[0],
                n,
                delay,
            )

        def exhausted(n: int, exc: CommitFailedError) -> NoReturn:
            raise CommitConflictError(
                app_ids=list(app_ids), checkpoint_id=checkpoint_id, attempts=n, cause=str(exc)
            ) from exc

        return self.retry.run(
            attempt, retry_on=CommitFailedError, exhausted=exhausted, on_retry=on_retry, rng=self._rng
        )

    def _plan(
        self, dt: DeltaTable, manifests: Sequence[Manifest], checkpoint_id: int, txn_version: int | None
    ) -> _CommitPlan | None:
        """What one attempt commits on snapshot ``dt``; None when the table holds every manifest."""
        pending = [m for m in manifests if not m.committed_in(self.txn_version(dt, m.app_id))]
        if not pending:
            return None
        self._check_staged_files(pending)
        versions = app_versions(pending, txn_version)
        progress = latest_progress(pending)
        keyed = self.spec.mode != "append" and any(m.files for m in pending)
        source = self._folded_source(pending) if keyed else None
        metadata: dict[str, Any] = {"lakestream.appVersions": versions}
        counters = counter_totals(pending)
        if counters:
            metadata[COUNTERS_KEY] = counters
        if progress:
            metadata[PROGRESS_KEY] = progress
        if self.spec.freshness_column is not None:
            metadata[FRESHNESS_KEY] = self._freshness(dt, source, checkpoint_id)
        transactions = [Transaction(app_id, v) for app_id, v in versions.items()]
        transactions += [
            Transaction(progress_app_id(self._staging.app_prefix, key), v) for key, v in progress.items()
        ]
        # Changes mode: the commit must land at the version its rows are stamped with, so delta-rs
        # may not move it past a concurrent commit; a conflict is planned (and stamped) again here.
        props = CommitProperties(
            app_transactions=transactions,
            custom_metadata=metadata,
            max_commit_retries=0 if self.spec.mode == "changes" else None,
        )
        return _CommitPlan(pending, list(versions), props, source)

    def _write(self, dt: DeltaTable, plan: _CommitPlan) -> int:
        """The Delta commit of ``plan``: add actions, the changes file, or the MERGE; files added."""
        if plan.source is None:
            # A merge-mode commit of counters only has no source: txn actions and metadata alone.
            return self._append_files(dt, plan.pending, plan.props)
        if self.spec.mode == "changes":
            return self._append_changes(dt, plan.source, plan.props)
        return self._merge(dt, plan.source, plan.props)

    def _report(
        self, landed: _Landed, checkpoint_id: int, txn_version: int | None, latency: float
    ) -> CommitResult:
        """The metrics and result of a commit that landed ``landed``."""
        committed = landed.manifests
        rows = sum(m.num_rows for m in committed)
        size = sum(m.size_bytes for m in committed)
        self.metrics.commits += 1
        self.metrics.rows_committed += rows
        self.metrics.files_committed += landed.files
        self.metrics.bytes_committed += size
        self.metrics.last_commit_latency_s = latency
        self.metrics.max_commit_latency_s = max(self.metrics.max_commit_latency_s, latency)
        result = CommitResult(
            committed=True,
            checkpoint_id=checkpoint_id,
            rows=rows,
            files=landed.files,
            bytes=size,
            retries=landed.retries,
            latency_s=latency,
            table_version=self.snapshot().version(),
            app_versions=app_versions(committed, txn_version),
            counters=counter_totals(committed),
            progress=latest_progress(committed),
        )
        log.info("%s: %s", self.log_name, result)
        return result

    def _folded_source(self, manifests: list[Manifest]) -> pa.Table:
        """The manifests' staged rows as one row per key, folded in (checkpoint, subtask) order."""
        ordered = sorted(manifests, key=lambda m: (m.checkpoint_id, m.subtask))
        parts = [self._read_merge_source(f.path) for m in ordered for f in m.files]
        # Each staged file is already reduced; only several of them (a commit that catches up on
        # earlier checkpoints, or adopts another slot's) can hold a key twice.
        return parts[0] if len(parts) == 1 else self.spec.pre_reduce(pa.concat_tables(parts))

    def _freshness(self, dt: DeltaTable, source: pa.Table | None, checkpoint_id: int) -> dict[str, Any]:
        """``FRESHNESS_KEY`` of this commit: its checkpoint, and the newest event time the table holds."""
        column = self.spec.freshness_column
        assert column is not None
        if self._newest_event is None:  # the first commit of this committer: what the table says
            self._newest_event = latest_freshness(dt.history(limit=50)).get("newest_event_time") or ""
        if source is not None and source.num_rows:
            self._newest_event = newest(pc.max(source[column]).as_py(), self._newest_event or None) or ""
        return {"checkpoint": checkpoint_id, "newest_event_time": self._newest_event or None}

    def _append_files(self, dt: DeltaTable, pending: list[Manifest], props: CommitProperties) -> int:
        """Append mode (or a commit of counters only): the staged files as add actions."""
        actions: list[AddAction | RemoveAction] = [_add_action(f) for m in pending for f in m.files]
        dt.create_write_transaction(
            actions,
            mode="append",
            schema=self.spec.table_schema,
            partition_by=list(self.spec.partition_by) or None,
            commit_properties=props,
        )
        return len(actions)

    def _append_changes(self, dt: DeltaTable, source: pa.Table, props: CommitProperties) -> int:
        """Changes mode: one file of the folded rows, stamped with the version this commit lands at.

        The commit may not be rebased (``max_commit_retries=0``): if another commit took that version
        first, it fails and is re-planned with the next version. So a stamp is its commit's version:
        unique, in commit order (the arrival order merge-on-read needs, DESIGN.md section 13), and a
        reader of version C has every row stamped <= C. A failed attempt's file is deleted; the retry
        writes its own.
        """
        seq_col = self.spec.sequence_column
        assert seq_col is not None
        seq = dt.version() + 1
        rows = source.append_column(
            pa.field(seq_col, pa.int64()), pa.array(np.full(source.num_rows, seq, np.int64))
        )
        name = f"part-00000-{uuid.uuid4().hex}-s{seq}.snappy.parquet"
        with self._files.output(name) as fh:
            pq.write_table(rows, fh, **pyarrow_options(rows.schema.names))
        info = self._files.info(name)
        assert info is not None, name
        action = AddAction(
            path=name,
            size=info.size,
            partition_values={},
            modification_time=info.modified_ms,
            data_change=True,
            stats=file_stats(rows),
        )
        try:
            dt.create_write_transaction(
                [action], mode="append", schema=self.spec.table_schema, commit_properties=props
            )
        except BaseException:
            self._files.delete(name)
            raise
        return 1

    def _merge(self, dt: DeltaTable, source: pa.Table, props: CommitProperties) -> int:
        spec = self.spec.merge
        assert spec is not None
        merger = dt.merge(
            source,
            spec.merge_predicate("s", "t"),
            source_alias="s",
            target_alias="t",
            # The source is in memory anyway. streamed_exec=True (delta-rs' default) reads the source
            # once and so cannot derive the "key BETWEEN min AND max" file filter from it: every MERGE
            # scanned the whole table. With it, files whose key range misses the batch are skipped
            # (measured: new keys into a 1.2M-row table 1.4 s -> 0.35 s, flat instead of growing).
            streamed_exec=False,
            writer_properties=writer_properties(
                self.spec.table_schema.names, bloom_filters=self.spec.bloom_filter_columns
            ),
            commit_properties=props,
        )
        if self.spec.mode == "upsert":
            # Rows another writer owns (MergeSpec.protected) are neither replaced nor inserted again.
            merger = merger.when_matched_update_all(predicate=spec.update_condition("t"))
        else:
            merger = merger.when_matched_update(spec.update_expressions(self.spec.schema, "s", "t"))
        metrics = merger.when_not_matched_insert_all().execute()
        return int(metrics.get("num_target_files_added", 0))

    def _check_staged_files(self, manifests: list[Manifest]) -> None:
        for m in manifests:
            for f in m.files:
                if self._files.info(f.path) is None:
                    raise StagedFileMissingError(
                        path=f"{self._files.uri}/{f.path}", app_id=m.app_id, checkpoint_id=m.checkpoint_id
                    )

    def _read_merge_source(self, path: str) -> pa.Table:
        """A staged MERGE source: Arrow IPC, or Parquet when staged by a version before IPC staging."""
        with self._files.open_input(path) as fh:
            if path.endswith(".parquet"):
                return read_parquet(fh).select(self.spec.schema.names).cast(self.spec.schema)
            return pa.ipc.open_file(fh).read_all().cast(self.spec.schema)


def app_versions(manifests: Sequence[Manifest], txn_version: int | None = None) -> dict[str, int]:
    """The txn version per app id a commit of ``manifests`` records, sorted by id: its highest
    checkpoint, or ``txn_version`` for every app id when given."""
    versions: dict[str, int] = {}
    for m in manifests:
        versions[m.app_id] = max(versions.get(m.app_id, -1), m.checkpoint_id)
    if txn_version is not None:
        if any(v > txn_version for v in versions.values()):
            raise ValueError(f"txn_version {txn_version} is below a checkpoint of the commit: {versions}")
        versions = dict.fromkeys(versions, txn_version)
    return dict(sorted(versions.items()))


def latest_progress(manifests: Sequence[Manifest]) -> dict[str, int]:
    """The progress a commit of ``manifests`` records: per key, the value of the latest checkpoint."""
    ordered = sorted(manifests, key=lambda m: (m.checkpoint_id, m.subtask))
    return merged(m.progress for m in ordered)


def _add_action(f: StagedFile) -> AddAction:
    # The on-disk relative path: delta-rs percent-encodes it into the log's URI form itself.
    return AddAction(
        path=f.path,
        size=f.size_bytes,
        partition_values=f.partition_values,
        modification_time=f.modification_time_ms,
        data_change=True,
        stats=f.stats,
    )
