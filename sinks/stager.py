"""The writer side of the sink: buffer Arrow batches, and at PRECOMMIT(n) stage them as a manifest.

Append mode stages Parquet data files in the table's partition folders (with the statistics their
``add`` actions will carry); merge/upsert mode stages one pre-reduced Arrow IPC MERGE source under
``_lakestream/staging``. Either way the manifest is durable as ``pending`` before the first file and
``prepared`` after the last, so a crash at any point leaves nothing unowned (DESIGN.md section 3).
Nothing here touches the Delta log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc
import pyarrow.parquet as pq

from lakestream.progress import checked_progress
from sinks.delta_files import file_stats, partition_dir, partition_value
from sinks.sink_errors import BatchSchemaError, KeyNullError
from sinks.staging import (
    Manifest,
    ManifestKind,
    StagedFile,
    StagingArea,
    new_token,
    now_ms,
)
from sinks.table_spec import TableSpec
from sinks.writer_metrics import WriterMetrics
from storage.parquet_encoding import pyarrow_options

#: File name suffix of staged MERGE sources (Arrow IPC file format).
MERGE_SOURCE_SUFFIX = ".arrow"
#: How MERGE sources are written; readers need nothing (compression is recorded per buffer).
MERGE_SOURCE_IPC = pa.ipc.IpcWriteOptions(compression="zstd")


class Stager:
    """One subtask's buffer and PRECOMMIT staging for one table (one run, one slot)."""

    def __init__(
        self,
        spec: TableSpec,
        staging: StagingArea,
        *,
        run_id: str,
        subtask: int,
        metrics: WriterMetrics,
    ) -> None:
        self.spec = spec
        self.run_id = run_id
        self.subtask = subtask
        self.metrics = metrics
        self._staging = staging
        self._files = staging.files
        self._buffer: list[pa.RecordBatch] = []

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Buffer rows in memory, conformed to the table schema; merge keys must not be null."""
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        merge = self.spec.merge
        for b in batches:
            if b.num_rows == 0:
                continue
            b = conform(b, self.spec.schema)
            if merge is not None:
                for key in merge.keys:
                    if b.column(key).null_count:
                        raise KeyNullError(
                            f"key column {key!r} has {b.column(key).null_count} null(s) in a "
                            f"{self.spec.mode} batch; such rows can never match a target row. Fix: filter "
                            "or repair them upstream."
                        )
            self._buffer.append(b)
            self.metrics.buffered_rows += b.num_rows

    def discard(self) -> None:
        """Drop the buffered rows (after END_OF_INPUT, at close, or when they are in the table already)."""
        self._buffer = []
        self.metrics.buffered_rows = 0

    def prepare(
        self,
        checkpoint_id: int,
        counters: Mapping[str, int] | None = None,
        progress: Mapping[str, int] | None = None,
    ) -> Manifest | None:
        """PRECOMMIT(n): stage the buffer durably for checkpoint n, with ``counters`` and ``progress``.

        ``None`` when nothing was buffered, no counter is non-zero and there is no progress. Counters or
        progress without rows still make a manifest (without files), so that their checkpoint's commit
        records them too: a source that moved past input without rows must say so.
        """
        notes = _Notes(checked_counters(counters), checked_progress(progress))
        if not self._buffer:
            if not any(notes.counters.values()) and not notes.progress:
                return None
            return self._stage_without_rows(checkpoint_id, notes)
        table = pa.Table.from_batches(self._buffer, schema=self.spec.schema)
        self.discard()
        if self.spec.mode == "append":
            return self._stage_append(table, checkpoint_id, notes)
        return self._stage_merge_source(table, checkpoint_id, notes)

    def _write_pending(
        self,
        checkpoint_id: int,
        kind: ManifestKind,
        staging_dirs: tuple[str, ...],
        notes: _Notes,
    ) -> Manifest:
        """The ``pending`` manifest, durable before the first staged file, so no file is ever unowned."""
        pending = Manifest(
            app_prefix=self._staging.app_prefix,
            run_id=self.run_id,
            subtask=self.subtask,
            checkpoint_id=checkpoint_id,
            state="pending",
            kind=kind,
            token=new_token(),
            staging_dirs=staging_dirs,
            created_ms=now_ms(),
            counters=notes.counters,
            progress=notes.progress,
        )
        self._staging.write(pending)
        return pending

    def _stage_without_rows(self, checkpoint_id: int, notes: _Notes) -> Manifest:
        kind: ManifestKind = "data_files" if self.spec.mode == "append" else "merge_source"
        prepared = Manifest(
            app_prefix=self._staging.app_prefix,
            run_id=self.run_id,
            subtask=self.subtask,
            checkpoint_id=checkpoint_id,
            state="prepared",  # no file to own, so no pending step
            kind=kind,
            token=new_token(),
            staging_dirs=(),
            created_ms=now_ms(),
            counters=notes.counters,
            progress=notes.progress,
        )
        self._staging.write(prepared)
        return prepared

    def _stage_append(self, table: pa.Table, checkpoint_id: int, notes: _Notes) -> Manifest:
        partition_by = list(self.spec.partition_by)
        groups = partition_groups(table, partition_by)
        pending = self._write_pending(
            checkpoint_id, "data_files", tuple(sorted({rel or "." for _, rel, _ in groups})), notes
        )
        token = pending.token
        files: list[StagedFile] = []
        for values, rel_dir, part in groups:
            data = part.drop_columns(partition_by) if partition_by else part
            files.extend(self._write_data_files(data, rel_dir, values, token, checkpoint_id, len(files)))
        prepared = replace(pending, state="prepared", files=tuple(files))
        self._staging.write(prepared)
        return prepared

    def _write_data_files(
        self,
        data: pa.Table,
        rel_dir: str,
        values: dict[str, str | None],
        token: str,
        checkpoint_id: int,
        first_index: int,
    ) -> list[StagedFile]:
        target = self.spec.target_file_size
        row_bytes = max(1, data.nbytes // max(1, data.num_rows))
        # Arrow bytes overestimate Parquet bytes, so slices of a quarter target keep files near the target.
        slice_rows = max(1, min(1_000_000, (target // 4) // row_bytes))
        out: list[StagedFile] = []
        offset = 0
        while offset < data.num_rows:
            name = f"part-{first_index + len(out):05d}-{token}-c{checkpoint_id}.snappy.parquet"
            path = f"{rel_dir}/{name}" if rel_dir else name
            start = offset
            with self._files.output(path) as fh:
                pw = pq.ParquetWriter(fh, data.schema, **pyarrow_options(data.schema.names))
                while offset < data.num_rows:
                    pw.write_table(data.slice(offset, slice_rows))
                    offset = min(data.num_rows, offset + slice_rows)
                    if fh.tell() >= target:
                        break
                pw.close()
            chunk = data.slice(start, offset - start)
            out.append(self._staged(path, chunk.num_rows, values, file_stats(chunk)))
        return out

    def _staged(
        self, path: str, num_rows: int, values: dict[str, str | None] | None = None, stats: str = ""
    ) -> StagedFile:
        """What the manifest records of a file just written at ``path``."""
        info = self._files.info(path)
        if info is None:
            raise FileNotFoundError(f"{self._files.uri}/{path}: staged a moment ago and gone")
        return StagedFile(
            path=path,
            size_bytes=info.size,
            num_rows=num_rows,
            partition_values=dict(values or {}),
            stats=stats,
            modification_time_ms=info.modified_ms,
        )

    def _stage_merge_source(self, table: pa.Table, checkpoint_id: int, notes: _Notes) -> Manifest:
        folder = self._staging.merge_source_dir(self.run_id, self.subtask)
        pending = self._write_pending(checkpoint_id, "merge_source", (folder,), notes)
        reduced = self.spec.pre_reduce(table)
        # Arrow IPC, not Parquet: the source never enters the table and is read back once at COMMIT,
        # and both sit on the path from the checkpoint barrier to visible rows. zstd buffers: a third of
        # the bytes to write and, on an object store, to upload and fetch again.
        path = f"{folder}/{checkpoint_id:020d}-{pending.token}{MERGE_SOURCE_SUFFIX}"
        with self._files.output(path) as fh:
            with pa.ipc.new_file(fh, reduced.schema, options=MERGE_SOURCE_IPC) as ipc_writer:
                ipc_writer.write_table(reduced)
        staged = self._staged(path, table.num_rows)
        prepared = replace(pending, state="prepared", files=(staged,))
        self._staging.write(prepared)
        return prepared


class _Notes(NamedTuple):
    """What a manifest records besides its files: the checkpoint's counters and progress."""

    counters: dict[str, int]
    progress: dict[str, int]


def checked_counters(counters: Mapping[str, int] | None) -> dict[str, int]:
    """``counters`` as a plain dict of name -> int, refusing anything a commit could not add up."""
    out: dict[str, int] = {}
    for name, value in (counters or {}).items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"counter names must be non-empty strings, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"counter {name!r} must be an int, got {value!r}")
        out[name] = value
    return out


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` in ``schema``: same column names in the same order, types cast only where safe."""
    if batch.schema.names != schema.names:
        missing = [n for n in schema.names if n not in batch.schema.names]
        extra = [n for n in batch.schema.names if n not in schema.names]
        raise BatchSchemaError(
            f"batch columns {batch.schema.names} differ from the writer schema {schema.names} "
            f"(missing: {missing}, unexpected: {extra}, or a different order). Fix: build batches "
            "with the writer's schema."
        )
    if batch.schema.equals(schema, check_metadata=False):
        return batch
    try:
        return batch.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        bad = [
            f"{f.name}: {f.type} -> {batch.schema.field(f.name).type}"
            for f in schema
            if f.type != batch.schema.field(f.name).type
        ]
        raise BatchSchemaError(
            f"batch types cannot be cast safely to the writer schema ({'; '.join(bad)}): {exc}"
        ) from exc


def partition_groups(
    table: pa.Table, partition_by: list[str]
) -> list[tuple[dict[str, str | None], str, pa.Table]]:
    """Rows per partition: (serialized partition values, hive-style folder, rows), in partition order.

    Rows keep their order within a partition. A batch whose partition columns hold one value each (a
    per-partition Kafka batch is one source) joins its group as it is, without a copy; only batches
    that mix partitions are sorted and cut.
    """
    if not partition_by:
        return [({}, "", table)]
    pieces: dict[tuple[object, ...], list[pa.Table]] = {}
    for batch in table.to_batches():
        if batch.num_rows == 0:
            continue
        part = pa.Table.from_batches([batch])
        if all(pc.count_distinct(batch.column(c), mode="all").as_py() == 1 for c in partition_by):
            key = tuple(batch.column(c)[0].as_py() for c in partition_by)
            pieces.setdefault(key, []).append(part)
            continue
        for key, rows in _sorted_runs(part, partition_by):
            pieces.setdefault(key, []).append(rows)
    out = []
    for key in sorted(pieces, key=_nulls_last):
        values = {c: partition_value(v) for c, v in zip(partition_by, key, strict=True)}
        out.append((values, partition_dir(partition_by, values), pa.concat_tables(pieces[key])))
    return out


def _nulls_last(key: tuple[object, ...]) -> tuple[tuple[bool, object], ...]:
    """Sort key of partition values: ascending, nulls after every value (Arrow's sort order)."""
    return tuple((v is None, 0 if v is None else v) for v in key)


def _sorted_runs(table: pa.Table, partition_by: list[str]) -> list[tuple[tuple[object, ...], pa.Table]]:
    """(partition values, rows) per partition of a table that mixes them: one stable sort, cut at changes."""
    parts = table.select(partition_by)
    order = pc.sort_indices(parts, sort_keys=[(c, "ascending") for c in partition_by])
    ordered = table.take(order)
    keys = parts.take(order)
    n = ordered.num_rows
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for col in keys.columns:
        prev, cur = col.slice(0, n - 1), col.slice(1)
        same = pc.or_(pc.fill_null(pc.equal(cur, prev), False), pc.and_(pc.is_null(cur), pc.is_null(prev)))
        change[1:] |= ~np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
    starts = np.flatnonzero(change).tolist()
    out = []
    for start, end in zip(starts, [*starts[1:], n], strict=True):
        first = keys.slice(start, 1).to_pylist()[0]
        out.append((tuple(first[c] for c in partition_by), ordered.slice(start, end - start)))
    return out
