"""Exactly-once two-phase-commit writer for Delta tables, driven by Flink checkpoint markers.

The writer is plain Python. A Flink wrapper (``udfs/delta_sink.py``) feeds it from in-band markers that a
Java operator emits per subtask, in order with the data: ``OPEN(r, run_id, subtask, parallelism)``, data,
``PRECOMMIT(n)`` before barrier n leaves, ``COMMIT(n)`` once checkpoint n completed, ``END_OF_INPUT``.

Identity
    app id = ``f"{app_prefix}:{run_id}:{subtask}"``; the Delta txn version of an app id is the checkpoint
    id n of its latest commit. ``run_id`` lives in Flink state: the same after a restore, new on a fresh
    start. So checkpoint ids are only ever compared within one run, where Flink keeps them increasing;
    a fresh start (whose ids restart) gets fresh app ids (the data loss of delta-io/connectors#467 came
    from comparing checkpoint ids the table had seen with ids that meant other data).

Protocol
    1. write(batch): rows are buffered in memory as Arrow record batches. Nothing touches disk.
    2. PRECOMMIT(n): the buffer is staged. Append mode: Parquet files in the table folder (hive-style
       partition folders, one file per partition per checkpoint, split at ``target_file_size``), with
       the Delta statistics of each file. Merge/upsert: one pre-reduced MERGE source file (Arrow IPC) under
       ``_lakestream/staging``. A manifest (app id, n, files, sizes, rows, partition values, stats) is
       written durably (temp + fsync + rename) as ``pending`` before the first file and ``prepared``
       after the last one. Nothing is in the Delta log yet. An empty checkpoint stages nothing.
    3. COMMIT(n): ONE Delta commit carries every prepared manifest <= n of this writer, plus one txn
       action per app id (version = its highest n in the commit). Append: ``add`` actions of the staged
       files. Merge: the staged sources are concatenated in checkpoint order, pre-reduced per key with
       the MERGE's own guard (``lakestream.merge_spec``) and applied by ONE MERGE that carries the txn
       actions (its files split at ``target_file_size``, the table property ``delta.targetFileSize``).
       Then the manifests (and merge sources) are deleted. A COMMIT for a subsumed checkpoint may never
       come: COMMIT(n) includes everything <= n. Repeated or late COMMITs find nothing to do.
    4. Before every commit attempt the snapshot is refreshed and manifests whose app id already has
       txn version >= n are treated as committed (only cleaned up): delta-rs does not refuse a commit
       whose txn version is already recorded (delta-io/delta-rs#2580), so this check is ours. It is
       race free because delta-rs fails a commit with ConcurrentTransaction when a commit that landed
       after our snapshot carries one of our app ids; the retry then re-runs the check.
    5. OPEN(r): the writer resolves every manifest it owns (below). Already committed (txn >= n):
       clean up. Same run, prepared, n <= r: part of completed checkpoint r, so commit them (one commit).
       Same run, n > r: staged after checkpoint r, the source replays them: abort (delete files and
       manifest). Other run ids of this app prefix: orphans of a previous run: abort. Pending manifests
       never finished PRECOMMIT, so no completed checkpoint includes them: abort. OPEN(None) (fresh
       start) aborts everything it owns. Afterwards leftover merge sources and torn temp files of owned
       slots are swept. Restoring a run from a checkpoint older than its own txn version, or a fresh
       start reusing a run id that has commits, is refused (``RestoreBehindTableError``): the replayed
       checkpoint ids would name different data.
    6. Ownership: subtask i owns the manifests of slots (run, j) with ``j % parallelism == i``. With
       unchanged parallelism that is its own slot plus dead runs' slots j; after a rescale from p_old to
       p, the old slots j >= p are adopted by ``j % p``. Every old slot has exactly one owner, so every
       orphan is resolved by exactly one subtask and no two subtasks race on a manifest. Adopted
       manifests are committed with THEIR app ids (one Delta commit may carry several txn actions), so
       the already-committed check (4) keeps working for them after any further crash or rescale, and
       a new subtask i < p never reuses an app id with a lower version: its checkpoints after the
       restore are above r, and everything of slot i up to r was resolved before it stages anything.
    7. Nothing is committed twice: a manifest is committed only when the table says its app id has not
       reached its n, and that check is repeated on every attempt. Nothing is orphaned: every staged
       file is named by a manifest written before the file; every manifest is resolved by exactly one
       owner at the next OPEN; a COMMIT that fails leaves the manifests for the next COMMIT or OPEN.
    8. END_OF_INPUT: everything buffered and staged is committed at once under checkpoint id
       ``EOI_CHECKPOINT_ID`` (2**63-1, Flink's own end-of-input marker). A restore of the same run after
       that (from a checkpoint before the end) replays input that is already in the table, so the
       writer then stages nothing more; this is exact for bounded sources with fixed end positions.

Concurrent writers
    Other jobs, OPTIMIZE/compaction and VACUUM may run against the table. Appends are blind, and
    delta-rs retries them itself across a concurrent compaction. Conflicts it cannot resolve
    (a MERGE whose files were rewritten, a concurrent commit carrying one of our app ids, metadata
    changes) raise ``CommitFailedError``; the commit is then re-planned from a fresh snapshot (re-run
    the txn check, re-run the MERGE) with exponential backoff (``RetryPolicy``), and after the last
    attempt ``CommitConflictError`` is raised with the staged work left in place. A staged file that
    vanished (VACUUM in full mode with a short retention) fails with ``StagedFileMissingError`` naming
    the file: committing it would reference a missing file. Keep vacuum retention above the checkpoint
    interval. One running instance per app prefix: two jobs sharing a prefix abort each other's work.

Limits
    A fresh start aborts the previous run's staged work, even of a checkpoint that completed but was
    never committed; so a fresh start must take its source positions from what the table holds (or
    replay from the beginning), not from Kafka offsets committed on checkpoint completion.
    Staging needs a local table path (object stores: not yet). Parallel MERGE subtasks on one table
    conflict with each other and serialize through retries; for rows of one key in different subtasks'
    sources of the same checkpoint (only after a rescale), ties are broken by subtask order.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction

from lakestream.merge_reduce import reduce_guarded, reduce_latest
from lakestream.merge_spec import MergeSpec
from sinks.delta_files import file_stats, partition_dir, partition_value
from sinks.errors import (
    BatchSchemaError,
    CommitConflictError,
    KeyNullError,
    MarkerOrderError,
    RestoreBehindTableError,
    StagedFileMissingError,
    TableSchemaError,
    UnsupportedTableUriError,
)
from sinks.retry_policy import RetryPolicy
from sinks.staging import (
    Manifest,
    ManifestKind,
    StagedFile,
    StagingArea,
    app_id_for,
    fsync_dir,
    new_token,
    now_ms,
)
from sinks.writer_metrics import CommitResult, WriterMetrics

log = logging.getLogger(__name__)

WriteMode = Literal["append", "merge", "upsert"]
#: Checkpoint id of the END_OF_INPUT commit (Flink's ``CommittableMessage.EOI`` is Long.MAX_VALUE too).
EOI_CHECKPOINT_ID = 2**63 - 1
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
#: Table property delta-rs' MERGE splits its output files by (it has no per-call setting).
TARGET_FILE_SIZE_PROPERTY = "delta.targetFileSize"
#: File name suffix of staged MERGE sources (Arrow IPC file format).
MERGE_SOURCE_SUFFIX = ".arrow"


def local_table_root(table_uri: str) -> Path:
    """Local folder of a table URI; the staging area needs POSIX rename and fsync semantics."""
    parsed = urlparse(table_uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path)).absolute()
    if parsed.scheme and len(parsed.scheme) > 1:  # one letter: a Windows drive, not a scheme
        raise UnsupportedTableUriError(
            f"table_uri {table_uri!r}: staging needs a local path, {parsed.scheme}:// is not supported yet. "
            "Fix: use a local path or file:// URI."
        )
    return Path(table_uri).absolute()


class TwoPhaseDeltaWriter:
    """One subtask's exactly-once writer for one Delta table (protocol in the module docstring)."""

    def __init__(
        self,
        *,
        table_uri: str,
        app_prefix: str,
        schema: pa.Schema,
        mode: WriteMode = "append",
        partition_by: Sequence[str] | None = None,
        merge: MergeSpec | None = None,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
        storage_options: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        if mode not in ("append", "merge", "upsert"):
            raise ValueError(f"mode must be 'append', 'merge' or 'upsert', got {mode!r}")
        if not app_prefix:
            raise ValueError("app_prefix is empty: it names the Delta txn app ids, give it a stable value")
        partition_by = list(partition_by or [])
        missing = [c for c in partition_by if c not in schema.names]
        if missing:
            raise ValueError(f"partition_by names columns the schema does not have: {', '.join(missing)}")
        if mode == "append" and merge is not None:
            raise ValueError("merge= is only used by mode='merge' or 'upsert'; drop it for mode='append'")
        if mode in ("merge", "upsert"):
            if merge is None:
                raise ValueError(f"mode={mode!r} needs merge=MergeSpec(keys=...) to know the key columns")
            merge.validate(schema)
            if mode == "upsert" and (merge.guarded or merge.greatest):
                raise ValueError(
                    "mode='upsert' replaces whole rows and ignores guards: use mode='merge' for a MergeSpec "
                    "with guarded/greatest columns, or MergeSpec(keys=...) alone for upsert"
                )
        if target_file_size < 1:
            raise ValueError(f"target_file_size must be positive bytes, got {target_file_size}")
        self.table_uri = table_uri
        self.app_prefix = app_prefix
        self.schema = schema
        self.mode: WriteMode = mode
        self.partition_by = partition_by
        self.merge_spec = merge
        self.target_file_size = target_file_size
        self.storage_options = dict(storage_options) if storage_options else None
        self.retry = retry or RetryPolicy()
        self.metrics = WriterMetrics()
        self._root = local_table_root(table_uri)
        self._staging = StagingArea(self._root, app_prefix)
        self._data_schema = pa.schema([f for f in schema if f.name not in set(partition_by)])
        self._rng = random.Random()
        self._table: DeltaTable | None = None
        self._buffer: list[pa.RecordBatch] = []
        self._staged: list[Manifest] = []
        self._last_prepared: int | None = None
        self._run_id = ""
        self._subtask = -1
        self._parallelism = 0
        self._opened = False
        self._closed = False
        self._ended = False
        #: Set when a restore finds this run's end-of-input commit already in the table.
        self._input_already_committed = False

    # ------------------------------------------------------------------ markers

    @property
    def app_id(self) -> str:
        """Delta txn app id of this subtask (valid after ``open``)."""
        return app_id_for(self.app_prefix, self._run_id, self._subtask)

    def open(
        self, *, restored_checkpoint_id: int | None, run_id: str, subtask: int, parallelism: int
    ) -> CommitResult:
        """OPEN marker: resolve staged work left by earlier attempts, then accept data."""
        if self._opened:
            raise MarkerOrderError("OPEN arrived twice for one writer; create a new writer per task attempt")
        if parallelism < 1 or not 0 <= subtask < parallelism:
            raise ValueError(
                f"subtask {subtask} / parallelism {parallelism}: need 0 <= subtask < parallelism"
            )
        if not run_id:
            raise ValueError("run_id is empty: it must be a stable id kept in Flink state")
        r = restored_checkpoint_id
        self._run_id, self._subtask, self._parallelism = run_id, subtask, parallelism
        dt = self._ensure_table()
        if self.mode != "append" and subtask == 0:
            dt = self._ensure_merge_file_size(dt)
        own_version = dt.transaction_version(self.app_id)
        if own_version is not None and (r is None or own_version > r):
            if own_version != EOI_CHECKPOINT_ID:
                raise RestoreBehindTableError(
                    app_id=self.app_id, restored_checkpoint_id=r, committed_version=own_version
                )
            log.warning(
                "%s: restored from checkpoint %s after this run's end-of-input commit; the replayed input is "
                "already in the table and will not be staged again",
                self.app_id,
                r,
            )
            self._input_already_committed = True

        to_commit: list[Manifest] = []
        to_abort: list[Manifest] = []
        to_clean: list[Manifest] = []
        for m in self._staging.list_all():
            if m.subtask % parallelism != subtask:
                continue  # another subtask's slot
            if m.state == "pending":
                to_abort.append(m)
            elif _is_committed(dt, m):
                to_clean.append(m)
            elif r is not None and m.run_id == run_id and m.checkpoint_id <= r:
                to_commit.append(m)
            else:
                to_abort.append(m)
        self._opened = True
        self._last_prepared = r
        result = CommitResult(committed=False, checkpoint_id=r if r is not None else 0)
        if to_commit:
            assert r is not None
            log.info("%s: committing %d manifest(s) of checkpoint <= %d", self.app_id, len(to_commit), r)
            result = self._commit(to_commit, r)
        for m in to_clean:
            self._cleanup(m)
            self.metrics.already_committed += 1
        for m in to_abort:
            log.info("%s: aborting staged checkpoint %d of %s", self.app_id, m.checkpoint_id, m.app_id)
            self._staging.delete_staged_files(m)
            self._staging.delete(m)
            self.metrics.aborted_manifests += 1
        self._sweep_owned()
        return result

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Buffer rows of the current checkpoint (data records between markers)."""
        self._require_open("write")
        if self._ended:
            raise MarkerOrderError("data arrived after END_OF_INPUT")
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        for b in batches:
            if b.num_rows == 0:
                continue
            b = self._conform(b)
            if self.merge_spec is not None:
                for key in self.merge_spec.keys:
                    if b.column(key).null_count:
                        raise KeyNullError(
                            f"key column {key!r} has {b.column(key).null_count} null(s) in a {self.mode} "
                            "batch; such rows can never match a target row. Fix: filter or repair them "
                            "upstream."
                        )
            self._buffer.append(b)
            self.metrics.buffered_rows += b.num_rows

    def prepare(self, checkpoint_id: int) -> Manifest | None:
        """PRECOMMIT(n): stage the buffer durably for checkpoint n; nothing enters the Delta log."""
        self._require_open("PRECOMMIT")
        if self._ended or self._input_already_committed:
            self._discard_buffer()
            return None
        if self._last_prepared is not None and checkpoint_id <= self._last_prepared:
            raise MarkerOrderError(
                f"PRECOMMIT({checkpoint_id}) after checkpoint {self._last_prepared}: checkpoint ids must "
                "increase within a task attempt"
            )
        self._last_prepared = checkpoint_id
        if not self._buffer:
            return None
        table = pa.Table.from_batches(self._buffer, schema=self.schema)
        self._buffer = []
        self.metrics.buffered_rows = 0
        if self.mode == "append":
            manifest = self._stage_append(table, checkpoint_id)
        else:
            manifest = self._stage_merge_source(table, checkpoint_id)
        self._staged.append(manifest)
        self._update_staged_metrics()
        return manifest

    def commit(self, checkpoint_id: int) -> CommitResult:
        """COMMIT(n): checkpoint n completed, so everything staged up to n goes into one Delta commit."""
        self._require_open("COMMIT")
        todo = [m for m in self._staged if m.checkpoint_id <= checkpoint_id]
        if not todo:
            return CommitResult(committed=False, checkpoint_id=checkpoint_id)
        result = self._commit(todo, checkpoint_id)
        done = {id(m) for m in todo}
        self._staged = [m for m in self._staged if id(m) not in done]
        self._update_staged_metrics()
        return result

    def end_of_input(self) -> CommitResult:
        """END_OF_INPUT: the bounded input ended; commit everything now (see protocol step 8)."""
        self._require_open("END_OF_INPUT")
        if self._ended or self._input_already_committed:
            self._discard_buffer()
            self._ended = True
            return CommitResult(committed=False, checkpoint_id=EOI_CHECKPOINT_ID)
        self.prepare(EOI_CHECKPOINT_ID)
        result = self.commit(EOI_CHECKPOINT_ID)
        self._ended = True
        return result

    def close(self) -> None:
        """Drop buffered rows; staged work stays on disk for the next OPEN to commit or abort."""
        self._discard_buffer()
        self._closed = True
        self._table = None

    # ------------------------------------------------------------------ staging

    def _write_pending(
        self, checkpoint_id: int, kind: ManifestKind, staging_dirs: tuple[str, ...]
    ) -> Manifest:
        """The ``pending`` manifest, durable before the first staged file, so no file is ever unowned."""
        pending = Manifest(
            app_prefix=self.app_prefix,
            run_id=self._run_id,
            subtask=self._subtask,
            checkpoint_id=checkpoint_id,
            state="pending",
            kind=kind,
            token=new_token(),
            staging_dirs=staging_dirs,
            created_ms=now_ms(),
        )
        self._staging.write(pending)
        return pending

    def _stage_append(self, table: pa.Table, checkpoint_id: int) -> Manifest:
        groups = self._partition_groups(table)
        pending = self._write_pending(
            checkpoint_id, "data_files", tuple(sorted({rel or "." for _, rel, _ in groups}))
        )
        token = pending.token
        files: list[StagedFile] = []
        for values, rel_dir, part in groups:
            data = part.drop_columns(self.partition_by) if self.partition_by else part
            files.extend(self._write_data_files(data, rel_dir, values, token, checkpoint_id, len(files)))
        prepared = replace(pending, state="prepared", files=tuple(files))
        self._staging.write(prepared)
        return prepared

    def _partition_groups(self, table: pa.Table) -> list[tuple[dict[str, str | None], str, pa.Table]]:
        if not self.partition_by:
            return [({}, "", table)]
        # Sort by the partition columns once and cut the runs: no per-row Python objects (the list
        # aggregation this replaces turned every row index into a Python int on the barrier path).
        parts = table.select(self.partition_by)
        order = pc.sort_indices(parts, sort_keys=[(c, "ascending") for c in self.partition_by])
        ordered = table.take(order)
        keys = parts.take(order)
        n = ordered.num_rows
        change = np.zeros(n, dtype=bool)
        change[0] = True
        for col in keys.columns:
            prev, cur = col.slice(0, n - 1), col.slice(1)
            same = pc.or_(
                pc.fill_null(pc.equal(cur, prev), False), pc.and_(pc.is_null(cur), pc.is_null(prev))
            )
            change[1:] |= ~np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
        starts = np.flatnonzero(change).tolist()
        out = []
        for start, end in zip(starts, [*starts[1:], n], strict=True):
            first = keys.slice(start, 1).to_pylist()[0]
            values = {c: partition_value(first[c]) for c in self.partition_by}
            out.append((values, partition_dir(self.partition_by, values), ordered.slice(start, end - start)))
        return out

    def _write_data_files(
        self,
        data: pa.Table,
        rel_dir: str,
        values: dict[str, str | None],
        token: str,
        checkpoint_id: int,
        first_index: int,
    ) -> list[StagedFile]:
        folder = self._root / rel_dir if rel_dir else self._root
        folder.mkdir(parents=True, exist_ok=True)
        row_bytes = max(1, data.nbytes // max(1, data.num_rows))
        # Arrow bytes overestimate Parquet bytes, so slices of a quarter target keep files near the target.
        slice_rows = max(1, min(1_000_000, (self.target_file_size // 4) // row_bytes))
        out: list[StagedFile] = []
        offset = 0
        while offset < data.num_rows:
            name = f"part-{first_index + len(out):05d}-{token}-c{checkpoint_id}.snappy.parquet"
            path = folder / name
            start = offset
            with open(path, "wb") as fh:
                pw = pq.ParquetWriter(fh, data.schema, compression="snappy")
                while offset < data.num_rows:
                    pw.write_table(data.slice(offset, slice_rows))
                    offset = min(data.num_rows, offset + slice_rows)
                    if fh.tell() >= self.target_file_size:
                        break
                pw.close()
                fh.flush()
                os.fsync(fh.fileno())
            chunk = data.slice(start, offset - start)
            st = path.stat()
            out.append(
                StagedFile(
                    path=self._staging.relative(path),
                    size_bytes=st.st_size,
                    num_rows=chunk.num_rows,
                    partition_values=dict(values),
                    stats=file_stats(chunk),
                    modification_time_ms=int(st.st_mtime * 1000),
                )
            )
        fsync_dir(folder)
        return out

    def _stage_merge_source(self, table: pa.Table, checkpoint_id: int) -> Manifest:
        folder = self._staging.merge_source_dir(self._run_id, self._subtask)
        pending = self._write_pending(checkpoint_id, "merge_source", (self._staging.relative(folder),))
        token = pending.token
        reduced = self._reduce(table)
        folder.mkdir(parents=True, exist_ok=True)
        # Arrow IPC, not Parquet: the source never enters the table and is read back once at COMMIT;
        # IPC writes about 6x faster (100k silver rows: 0.03 s vs 0.17 s) and reads at memory speed,
        # and both sit on the path from the checkpoint barrier to visible rows. Twice the bytes.
        path = folder / f"{checkpoint_id:020d}-{token}{MERGE_SOURCE_SUFFIX}"
        with open(path, "wb") as fh:
            with pa.ipc.new_file(fh, reduced.schema) as ipc_writer:
                ipc_writer.write_table(reduced)
            fh.flush()
            os.fsync(fh.fileno())
        fsync_dir(folder)
        st = path.stat()
        staged = StagedFile(
            path=self._staging.relative(path),
            size_bytes=st.st_size,
            num_rows=table.num_rows,
            modification_time_ms=int(st.st_mtime * 1000),
        )
        prepared = replace(pending, state="prepared", files=(staged,))
        self._staging.write(prepared)
        return prepared

    def _reduce(self, table: pa.Table) -> pa.Table:
        assert self.merge_spec is not None
        if self.mode == "upsert":
            return reduce_latest(table, self.merge_spec.keys)
        return reduce_guarded(table, self.merge_spec)

    # ------------------------------------------------------------------ commit

    def _before_commit_attempt(self, attempt: int) -> None:
        """Called right before each Delta commit attempt, after the txn check (a seam for tests/tracing)."""

    def _commit(self, manifests: list[Manifest], checkpoint_id: int) -> CommitResult:
        started = time.monotonic()
        retries = 0
        committed: list[Manifest] = []
        files_added = 0
        while True:
            dt = self._refresh()
            pending = [m for m in manifests if not _is_committed(dt, m)]
            if not pending:
                break
            self._check_staged_files(pending)
            versions: dict[str, int] = {}
            for m in pending:
                versions[m.app_id] = max(versions.get(m.app_id, -1), m.checkpoint_id)
            props = CommitProperties(
                app_transactions=[Transaction(app_id, v) for app_id, v in sorted(versions.items())],
                custom_metadata={"lakestream.appVersions": dict(sorted(versions.items()))},
            )
            self._before_commit_attempt(retries)
            try:
                if self.mode == "append":
                    actions: list[AddAction | RemoveAction] = [
                        _add_action(f) for m in pending for f in m.files
                    ]
                    dt.create_write_transaction(
                        actions,
                        mode="append",
                        schema=self.schema,
                        partition_by=self.partition_by or None,
                        commit_properties=props,
                    )
                    files_added = len(actions)
                else:
                    files_added = self._run_merge(dt, pending, props)
            except CommitFailedError as exc:
                retries += 1
                self.metrics.commit_retries += 1
                if retries >= self.retry.max_attempts:
                    raise CommitConflictError(
                        app_ids=sorted(versions),
                        checkpoint_id=checkpoint_id,
                        attempts=retries,
                        cause=str(exc),
                    ) from exc
                delay = self.retry.backoff_s(retries, self._rng)
                log.info(
                    "%s: commit of checkpoint %d conflicted (%s); retry %d in %.3fs",
                    self.app_id,
                    checkpoint_id,
                    str(exc).splitlines()[0],
                    retries,
                    delay,
                )
                time.sleep(delay)
                continue
            committed = pending
            break
        latency = time.monotonic() - started
        for m in manifests:
            self._cleanup(m)
        skipped = len(manifests) - len(committed)
        self.metrics.already_committed += skipped
        if not committed:
            log.info("%s: checkpoint %d was already committed; cleaned up", self.app_id, checkpoint_id)
            return CommitResult(committed=False, checkpoint_id=checkpoint_id, retries=retries)
        rows = sum(m.num_rows for m in committed)
        size = sum(m.size_bytes for m in committed)
        self.metrics.commits += 1
        self.metrics.rows_committed += rows
        self.metrics.files_committed += files_added
        self.metrics.bytes_committed += size
        self.metrics.last_commit_latency_s = latency
        self.metrics.max_commit_latency_s = max(self.metrics.max_commit_latency_s, latency)
        versions = {}
        for m in committed:
            versions[m.app_id] = max(versions.get(m.app_id, -1), m.checkpoint_id)
        table_version = self._refresh().version()
        result = CommitResult(
            committed=True,
            checkpoint_id=checkpoint_id,
            rows=rows,
            files=files_added,
            bytes=size,
            retries=retries,
            latency_s=latency,
            table_version=table_version,
            app_versions=versions,
        )
        log.info("%s: %s", self.app_id, result)
        return result

    def _run_merge(self, dt: DeltaTable, manifests: list[Manifest], props: CommitProperties) -> int:
        assert self.merge_spec is not None
        ordered = sorted(manifests, key=lambda m: (m.checkpoint_id, m.subtask))
        parts = [_read_merge_source(self._root / f.path, self.schema) for m in ordered for f in m.files]
        # Each staged file is already reduced; only several of them (a commit that catches up on
        # earlier checkpoints) can hold a key twice.
        source = parts[0] if len(parts) == 1 else self._reduce(pa.concat_tables(parts))
        spec = self.merge_spec
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
            commit_properties=props,
        )
        if self.mode == "upsert":
            merger = merger.when_matched_update_all()
        else:
            merger = merger.when_matched_update(spec.update_expressions(self.schema, "s", "t"))
        metrics = merger.when_not_matched_insert_all().execute()
        return int(metrics.get("num_target_files_added", 0))

    def _check_staged_files(self, manifests: list[Manifest]) -> None:
        for m in manifests:
            for f in m.files:
                if not (self._root / f.path).is_file():
                    raise StagedFileMissingError(
                        path=str(self._root / f.path), app_id=m.app_id, checkpoint_id=m.checkpoint_id
                    )

    def _cleanup(self, manifest: Manifest) -> None:
        """After a commit: the data files belong to the table now; merge sources and manifest go."""
        if manifest.kind == "merge_source":
            self._staging.delete_staged_files(manifest)
        self._staging.delete(manifest)

    def _sweep_owned(self) -> None:
        """Leftovers of owned slots with no manifest any more (merge sources, torn manifest temps)."""
        for root in (self._staging.manifest_root, self._staging.staging_root):
            if not root.is_dir():
                continue
            for run_dir in root.iterdir():
                if not run_dir.is_dir():
                    continue
                for sub_dir in run_dir.iterdir():
                    if not sub_dir.is_dir() or not sub_dir.name.isdigit():
                        continue
                    if int(sub_dir.name) % self._parallelism != self._subtask:
                        continue
                    for p in sub_dir.iterdir():
                        leftover = root == self._staging.staging_root or p.name.endswith(".tmp")
                        if p.is_file() and leftover:
                            log.info("%s: removing leftover %s", self.app_id, p)
                            p.unlink(missing_ok=True)
        self._staging.remove_empty_run_dirs(keep_run_id=self._run_id)

    # ------------------------------------------------------------------ table

    def _ensure_table(self) -> DeltaTable:
        try:
            dt = DeltaTable(self.table_uri, storage_options=self.storage_options)
        except TableNotFoundError:
            try:
                DeltaTable.create(
                    self.table_uri,
                    schema=self.schema,
                    partition_by=self.partition_by or None,
                    mode="ignore",
                    storage_options=self.storage_options,
                    configuration=(
                        None
                        if self.mode == "append"
                        else {TARGET_FILE_SIZE_PROPERTY: str(self.target_file_size)}
                    ),
                )
            except DeltaError as exc:  # another subtask won the creation race
                log.info("%s: table creation raced (%s); opening it", self.app_prefix, exc)
            dt = DeltaTable(self.table_uri, storage_options=self.storage_options)
        self._check_table(dt)
        self._table = dt
        return dt

    def _ensure_merge_file_size(self, dt: DeltaTable) -> DeltaTable:
        """Give a merge/upsert table our ``target_file_size`` as ``delta.targetFileSize`` (subtask 0).

        A MERGE is copy-on-write: it rewrites every file holding a matched key, and delta-rs writes its
        output at ``delta.targetFileSize`` (100 MB when unset). Files of that size made each silver MERGE
        rewrite one big file on one core; several smaller ones are scanned and written in parallel.
        Tables created by this writer get the property at creation; an existing table whose value
        differs gets it here. It only shapes files, so a conflicting concurrent commit is logged and the
        next OPEN tries again.
        """
        want = str(self.target_file_size)
        have = dt.metadata().configuration.get(TARGET_FILE_SIZE_PROPERTY)
        if have == want:
            return dt
        try:
            dt.alter.set_table_properties({TARGET_FILE_SIZE_PROPERTY: want})
        except CommitFailedError as exc:
            log.warning("%s: could not set %s=%s (%s)", self.app_prefix, TARGET_FILE_SIZE_PROPERTY, want, exc)
            return dt
        log.info("%s: set %s=%s (was %s)", self.app_prefix, TARGET_FILE_SIZE_PROPERTY, want, have)
        return self._refresh()

    def _check_table(self, dt: DeltaTable) -> None:
        want = _field_types(DeltaSchema.from_arrow(self.schema).to_json())
        have = _field_types(dt.schema().to_json())
        if want != have:
            diff = sorted(set(want.items()) ^ set(have.items()))
            raise TableSchemaError(
                f"table {self.table_uri} has columns {have} but the writer was configured with {want} "
                f"(differing: {diff}). Fix: align the writer schema with the table, or migrate the table."
            )
        parts = list(dt.metadata().partition_columns)
        if parts != self.partition_by:
            raise TableSchemaError(
                f"table {self.table_uri} is partitioned by {parts} but the writer by {self.partition_by}. "
                "Fix: configure partition_by as the table has it."
            )

    def _refresh(self) -> DeltaTable:
        if self._table is None:
            self._table = DeltaTable(self.table_uri, storage_options=self.storage_options)
        else:
            self._table.update_incremental()
        return self._table

    # ------------------------------------------------------------------ helpers

    def _require_open(self, what: str) -> None:
        if self._closed:
            raise MarkerOrderError(f"{what} after close()")
        if not self._opened:
            raise MarkerOrderError(f"{what} before OPEN: the OPEN marker must come first")

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if batch.schema.names != self.schema.names:
            missing = [n for n in self.schema.names if n not in batch.schema.names]
            extra = [n for n in batch.schema.names if n not in self.schema.names]
            raise BatchSchemaError(
                f"batch columns {batch.schema.names} differ from the writer schema {self.schema.names} "
                f"(missing: {missing}, unexpected: {extra}, or a different order). Fix: build batches "
                "with the writer's schema."
            )
        if batch.schema.equals(self.schema, check_metadata=False):
            return batch
        try:
            return batch.cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            bad = [
                f"{f.name}: {f.type} -> {batch.schema.field(f.name).type}"
                for f in self.schema
                if f.type != batch.schema.field(f.name).type
            ]
            raise BatchSchemaError(
                f"batch types cannot be cast safely to the writer schema ({'; '.join(bad)}): {exc}"
            ) from exc

    def _discard_buffer(self) -> None:
        self._buffer = []
        self.metrics.buffered_rows = 0

    def _update_staged_metrics(self) -> None:
        self.metrics.staged_rows = sum(m.num_rows for m in self._staged)
        self.metrics.staged_files = sum(len(m.files) for m in self._staged)
        self.metrics.staged_bytes = sum(m.size_bytes for m in self._staged)


def _read_merge_source(path: Path, schema: pa.Schema) -> pa.Table:
    """A staged MERGE source: Arrow IPC, or Parquet when staged by a version before IPC staging."""
    if path.suffix == ".parquet":
        return pq.read_table(path, schema=schema)
    with pa.OSFile(str(path), "rb") as fh:
        return pa.ipc.open_file(fh).read_all().cast(schema)


def _is_committed(dt: DeltaTable, manifest: Manifest) -> bool:
    version = dt.transaction_version(manifest.app_id)
    return version is not None and version >= manifest.checkpoint_id


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


def _field_types(schema_json: str) -> dict[str, str]:
    doc = json.loads(schema_json)
    return {f["name"]: json.dumps(f["type"], sort_keys=True) for f in doc["fields"]}


__all__ = [
    "EOI_CHECKPOINT_ID",
    "TwoPhaseDeltaWriter",
    "WriteMode",
    "local_table_root",
]
