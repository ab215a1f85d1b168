"""The Flink face of the exactly-once Delta sink: markers in, ``sinks.TwoPhaseDeltaWriter`` calls out.

The protocol lives in ``sinks/`` as plain Python (tested without Flink); this module only turns the
in-band marker records of ``CheckpointEpochOperator`` into writer calls, buffers data rows into Arrow
record batches, and publishes the writer's metrics. Keep it thin. A table with
``DeltaSinkSpec(commit="global")`` is staged here and committed by ``sinks.flink.global_commit``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
from pyflink.common import Types
from pyflink.datastream import ProcessFunction, RuntimeContext

from lakestream.progress import Progress, kafka_offsets_of
from runtime.checkpoint_markers import (
    COMMIT,
    DATA,
    END_OF_INPUT,
    KIND_FIELD,
    OPEN,
    PAYLOAD_FIELD,
    PRECOMMIT,
    Marker,
    discard,
    with_checkpoint_markers,
)
from runtime.worker.bundles import skip_sampler_waits
from runtime.worker.memory import keep_freed_pages, return_free_memory

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.datastream import DataStream

    from merge_on_read.fold_schedule import FoldTask
    from sinks.committable import CommitMode, Committable
    from sinks.table_spec import TableSpec
    from sinks.writer import TwoPhaseDeltaWriter
    from sinks.writer_metrics import CommitResult


@dataclass(frozen=True)
class DeltaSinkSpec:
    """Everything a sink subtask needs to write one Delta table; pickled into the Python workers.

    ``table`` is the table itself (``sinks.table_spec.TableSpec``: uri, schema, mode, partitioning,
    merge rule, file size, ...), the rest is how the Flink sink writes it.
    """

    table: TableSpec
    #: Stable per job and table: it names the Delta txn app ids, so keep it across upgrades.
    app_prefix: str
    #: Rows buffered in Python lists before they become one Arrow record batch.
    batch_rows: int = 50_000
    #: Keyword arguments for the writer (and the global committer): ``retry``, ``commit_hooks``.
    writer_options: dict[str, Any] = field(default_factory=dict)
    #: ``"subtask"``: each writer subtask commits its own work at COMMIT(n). ``"global"``: the subtasks
    #: only stage and emit committables, and one ``sinks.flink.global_commit.GlobalCommitterFunction`` commits
    #: each checkpoint of all of them in one Delta commit (DESIGN.md section 3).
    commit: CommitMode = "subtask"
    #: Record the Kafka progress of the rows (``topic``, ``partition``, ``offset`` columns: the next
    #: offset per partition) in each commit, for a job whose rows are its Kafka records one to one.
    kafka_progress: bool = False
    #: Changes mode, global commit: the merge-on-read table the committer folds the changes into, and
    #: when (``merge_on_read.fold_schedule``).
    fold: FoldTask | None = None

    def __post_init__(self) -> None:
        if self.commit not in ("subtask", "global"):
            raise ValueError(f"commit must be 'subtask' or 'global', got {self.commit!r}")
        if self.fold is not None and (self.table.mode != "changes" or self.commit != "global"):
            raise ValueError(f"{self.app_prefix}: fold= is for a changes-mode table with commit='global'")
        if self.kafka_progress:
            missing = [c for c in ("topic", "partition", "offset") if c not in self.table.schema.names]
            if missing:
                raise ValueError(
                    f"{self.app_prefix}: kafka_progress needs the columns topic, partition and offset; "
                    f"the schema lacks {', '.join(missing)}"
                )

    def new_global_committer(self) -> Any:
        """A ``sinks.global_committer.GlobalCommitter`` of this table (commit='global'), not opened yet."""
        from sinks.global_committer import GlobalCommitter

        return GlobalCommitter(spec=self.table, app_prefix=self.app_prefix, **self.writer_options)

    def new_writer(self) -> Any:
        """A ``sinks.writer.TwoPhaseDeltaWriter`` of this table, not opened yet (a sink task, a settle)."""
        from sinks.writer import TwoPhaseDeltaWriter

        return TwoPhaseDeltaWriter(
            spec=self.table, app_prefix=self.app_prefix, commit_mode=self.commit, **self.writer_options
        )


#: Flink gauge name -> ``sinks.writer_metrics.WriterMetrics`` attribute (``*_s`` exported in ms) of what
#: commits: the writer subtask, or for a table in global commit mode the global committer.
COMMIT_GAUGES = {
    "rowsCommitted": "rows_committed",
    "filesCommitted": "files_committed",
    "bytesCommitted": "bytes_committed",
    "commits": "commits",
    "commitRetries": "commit_retries",
    "lastCommitLatencyMs": "last_commit_latency_s",
    "maxCommitLatencyMs": "max_commit_latency_s",
    "stagedRowsUncommitted": "staged_rows",
    "stagedFilesUncommitted": "staged_files",
    "stagedBytesUncommitted": "staged_bytes",
}
#: Gauges only a writer subtask can report, whoever commits.
STAGER_GAUGES = {"bufferedRows": "buffered_rows"}


def gauge_reader(metrics: Any, attr: str) -> Any:
    """A Flink gauge callback reading ``attr`` of a ``WriterMetrics`` (from ``metrics()``, may be None)."""

    def read() -> int:
        m = metrics()
        if m is None:
            return 0
        value = getattr(m, attr)
        return int(value * 1000) if attr.endswith("_s") else int(value)

    return read


class MarkerOutput(NamedTuple):
    """What one marker produced: commit reports, and committables of tables in global commit mode."""

    reports: list[str]
    committables: list[Committable]


def rows_to_batch(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    """Column-wise conversion of value tuples (schema order) into one typed Arrow batch.

    A column that holds one and the same object in every row (a batch's ingest time, topic, partition,
    source) is converted once and repeated: a time-zone-aware datetime is the dearest value to convert
    (a bronze batch's ingest time was a fifth of its conversion). Only identity counts, never equality
    (``0.0`` and ``-0.0`` are equal, ``True`` equals ``1``), so the batch is the one a value-by-value
    conversion gives.
    """
    if not rows:
        return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
    n = len(rows)
    arrays = []
    for column, f in zip(zip(*rows, strict=True), schema, strict=True):
        first = column[0]
        if all(map(is_, column, repeat(first))):
            arrays.append(pa.repeat(pa.scalar(first, type=f.type), n))
        else:
            arrays.append(pa.array(column, type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class TableWriters:
    """The marker protocol for one or more Delta tables written by the same Python operator.

    A Python operator that produces rows for several tables (the standardise step writes bronze, review
    and quarantine) can write them itself instead of shipping every row back to the JVM and into one
    more Python sink operator: one Java/Python crossing less per row. Each table keeps its own
    ``TwoPhaseDeltaWriter`` (own app ids, own commits); all follow the same markers. Tables in global
    commit mode are staged the same way, and their committables come out of ``apply``.
    """

    def __init__(self, specs: Mapping[str, DeltaSinkSpec]) -> None:
        self.specs = dict(specs)
        self.writers: dict[str, TwoPhaseDeltaWriter] = {}
        self.rows: dict[str, list[tuple[Any, ...]]] = {name: [] for name in specs}
        self.global_tables = tuple(name for name, spec in self.specs.items() if spec.commit == "global")
        #: Progress noted since the last PRECOMMIT, per table: staged with that checkpoint's rows.
        self.progress: dict[str, dict[str, int]] = {name: {} for name in specs}

    def register_metrics(self, runtime_context: RuntimeContext) -> None:
        """Gauges over each writer's own cumulative ``WriterMetrics`` (no second bookkeeping).

        For a table in global commit mode only the buffer: its commits are the committer's to report.
        """
        for name, spec in self.specs.items():
            group = runtime_context.get_metrics_group().add_group("delta_table", spec.app_prefix)
            gauges = STAGER_GAUGES if spec.commit == "global" else {**COMMIT_GAUGES, **STAGER_GAUGES}
            for gauge, attr in gauges.items():
                group.gauge(gauge, gauge_reader(self._metrics_of(name), attr))

    def _metrics_of(self, table: str) -> Any:
        def metrics() -> Any:
            writer = self.writers.get(table)
            return None if writer is None else writer.metrics

        return metrics

    def add(self, table: str, row: tuple[Any, ...]) -> None:
        """Buffer one row (schema order) of ``table``."""
        rows = self.rows[table]
        rows.append(row)
        if len(rows) >= self.specs[table].batch_rows:
            self._flush(table)

    def add_batch(self, table: str, batch: pa.RecordBatch | pa.Table) -> None:
        """Hand an Arrow batch of ``table`` (its schema) to the writer, after any buffered rows."""
        self._flush(table)
        self._write(table, batch)

    def note_progress(self, table: str, values: Mapping[str, int]) -> None:
        """Where the input stands once the rows handed over so far are in: recorded with them.

        Kept until the next PRECOMMIT or END_OF_INPUT, whose manifest (and so whose commit) records
        it; a later value of a key replaces an earlier one.
        """
        self.progress[table].update(values)

    def _flush(self, table: str) -> None:
        rows = self.rows[table]
        if rows:
            self._write(table, rows_to_batch(rows, self.specs[table].table.schema))
            self.rows[table] = []

    def _write(self, table: str, batch: pa.RecordBatch | pa.Table) -> None:
        self.writers[table].write(batch)
        if self.specs[table].kafka_progress:
            self.progress[table].update(kafka_offsets_of(batch))

    def _take_progress(self, table: str) -> dict[str, int]:
        out, self.progress[table] = self.progress[table], {}
        return out

    def on_marker(self, value: Any) -> list[str]:
        """Apply one OPEN / PRECOMMIT / COMMIT / END_OF_INPUT marker row to every table; commit reports.

        Only for tables that commit themselves: with a table in global commit mode use ``apply``, whose
        committables the operator must emit.
        """
        if self.global_tables:
            raise ValueError(
                f"tables {', '.join(self.global_tables)} commit globally: call apply() and emit its "
                "committables, or they are never committed"
            )
        return self.apply(value).reports

    def apply(self, value: Any, *, counters: Mapping[str, Mapping[str, int]] | None = None) -> MarkerOutput:
        """Apply one marker row to every table: commit reports, and the global tables' committables.

        ``counters`` (table name -> counts of the checkpoint) are attached to the tables' staged work at
        PRECOMMIT and END_OF_INPUT, and recorded in the commit that takes it (``lakestream.counters``).
        """
        marker = Marker.of(value)
        kind, checkpoint_id = marker.kind, marker.checkpoint_id
        counts = dict(counters or {})
        if counts:
            unknown = sorted(set(counts) - set(self.specs))
            if unknown:
                raise ValueError(f"counters for tables this operator does not write: {', '.join(unknown)}")
            if kind not in (PRECOMMIT, END_OF_INPUT):
                raise ValueError("counters belong to staged work: pass them at PRECOMMIT or END_OF_INPUT")
        results: list[CommitResult] = []
        if kind == OPEN:
            keep_freed_pages()  # until the COMMITs' return_free_memory
            for name, spec in self.specs.items():
                writer = spec.new_writer()
                self.writers[name] = writer
                results.append(
                    writer.open(
                        restored_checkpoint_id=marker.restored_checkpoint_id,
                        run_id=marker.run_id or "",  # the writer refuses an empty one
                        subtask=marker.subtask,
                        parallelism=marker.parallelism,
                    )
                )
        elif kind == PRECOMMIT:
            for name, writer in self.writers.items():
                self._flush(name)
                writer.prepare(checkpoint_id, counts.get(name), self._take_progress(name))
        elif kind == COMMIT:
            results = [writer.commit(checkpoint_id) for writer in self.writers.values()]
            return_free_memory()  # this checkpoint's batches and files are gone
        elif kind == END_OF_INPUT:
            for name, writer in self.writers.items():
                self._flush(name)
                results.append(writer.end_of_input(counts.get(name), self._take_progress(name)))
        reports = [
            f"{self.specs[name].app_prefix}: {result}"
            for name, result in zip(self.writers, results, strict=False)
            if result.committed
        ]
        committables = [
            c
            for name in self.global_tables
            if name in self.writers
            for c in self.writers[name].take_committables()
        ]
        return MarkerOutput(reports, committables)

    def close(self) -> None:
        """Release the writers; staged files stay for the next OPEN to commit or abort."""
        for writer in self.writers.values():
            writer.close()


class TableWriterFunction(ProcessFunction):  # type: ignore[misc]
    """A Flink function that writes its Delta tables through ``self.tables`` (set by the subclass).

    ``open`` registers the writers' metrics (the writers themselves are created on the OPEN marker: they
    need the run id) and ``close`` releases them; their staged files stay for the next OPEN.
    """

    tables: TableWriters

    def open(self, runtime_context: RuntimeContext) -> None:
        """Register the writers' metrics."""
        skip_sampler_waits()
        self.tables.register_metrics(runtime_context)

    def close(self) -> None:
        """Release the writers (staged files stay for the next OPEN)."""
        self.tables.close()


class DeltaSinkFunction(TableWriterFunction):
    """A Python sink operator for one table: data rows and markers in, commit reports out.

    A ``lakestream.progress.Progress`` among the data rows is where the upstream source stands once
    the rows before it are in; the sink records it in the commit that takes those rows.
    """

    def __init__(self, spec: DeltaSinkSpec) -> None:
        if spec.commit != "subtask":
            raise ValueError(
                f"{spec.app_prefix}: this sink commits per subtask; for commit='global' write with "
                "TableWriters.apply, emit its committables and commit them with sinks.flink.global_commit"
            )
        self.tables = TableWriters({"table": spec})

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[str]:
        """Dispatch one data row (one record each: read by position, not decoded) or marker."""
        if value[KIND_FIELD] == DATA:
            payload = value[PAYLOAD_FIELD]
            if type(payload) is Progress:
                self.tables.note_progress("table", payload.values)
            else:
                self.tables.add("table", payload)
        else:
            yield from self.tables.on_marker(value)


def sink_to_delta(
    stream: DataStream, spec: DeltaSinkSpec, *, name: str, uid: str, parallelism: int | None = None
) -> None:
    """Write ``stream`` (value tuples in ``spec.table.schema`` order) exactly once into a Delta table.

    Operator uids derive from ``uid``: ``<uid>-markers``, ``<uid>-writer``, ``<uid>-end``. Pass
    ``parallelism`` to run the sink at another parallelism than the job's (the change feed's one writer).
    """
    marked = with_checkpoint_markers(
        stream, name=f"{name} markers", uid=f"{uid}-markers", parallelism=parallelism
    )
    writer = marked.process(DeltaSinkFunction(spec), output_type=Types.STRING())
    reports = writer.name(f"{name} writer").uid(f"{uid}-writer")
    if parallelism is not None:
        reports = reports.set_parallelism(parallelism)
    discard(reports, name=f"{name} end", uid=f"{uid}-end", parallelism=parallelism)
