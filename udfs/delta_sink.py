"""The Flink face of the exactly-once Delta sink: markers in, ``sinks.TwoPhaseDeltaWriter`` calls out.

The protocol lives in ``sinks/`` as plain Python (tested without Flink); this module only turns the
in-band marker records of ``CheckpointEpochOperator`` into writer calls, buffers data rows into Arrow
record batches, and publishes the writer's metrics. Keep it thin.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
from pyflink.common import Types
from pyflink.datastream import ProcessFunction, RuntimeContext

from udfs.checkpoint_markers import (
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

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.datastream import DataStream

    from lakestream.merge_spec import MergeSpec
    from sinks.writer import TwoPhaseDeltaWriter
    from sinks.writer_metrics import CommitResult


@dataclass(frozen=True)
class DeltaSinkSpec:
    """Everything a sink subtask needs to write one Delta table; pickled into the Python workers."""

    table_uri: str
    #: Stable per job and table: it names the Delta txn app ids, so keep it across upgrades.
    app_prefix: str
    schema: pa.Schema
    mode: Literal["append", "merge", "upsert"] = "append"
    partition_by: Sequence[str] = ()
    merge: MergeSpec | None = None
    #: Rows buffered in Python lists before they become one Arrow record batch.
    batch_rows: int = 50_000
    target_file_size: int = 128 * 1024 * 1024
    writer_options: dict[str, Any] = field(default_factory=dict)


#: Flink gauge name -> ``sinks.writer_metrics.WriterMetrics`` attribute (``*_s`` exported in ms).
_WRITER_GAUGES = {
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
    "bufferedRows": "buffered_rows",
}


def rows_to_batch(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    """Column-wise conversion of value tuples (schema order) into one typed Arrow batch."""
    if not rows:
        return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
    columns = list(zip(*rows, strict=True))
    arrays = [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class TableWriters:
    """The marker protocol for one or more Delta tables written by the same Python operator.

    A Python operator that produces rows for several tables (the standardise step writes bronze, review
    and quarantine) can write them itself instead of shipping every row back to the JVM and into one
    more Python sink operator: one Java/Python crossing less per row. Each table keeps its own
    ``TwoPhaseDeltaWriter`` (own app ids, own commits); all follow the same markers.
    """

    def __init__(self, specs: Mapping[str, DeltaSinkSpec]) -> None:
        self.specs = dict(specs)
        self.writers: dict[str, TwoPhaseDeltaWriter] = {}
        self.rows: dict[str, list[tuple[Any, ...]]] = {name: [] for name in specs}

    def register_metrics(self, runtime_context: RuntimeContext) -> None:
        """Gauges over each writer's own cumulative ``WriterMetrics`` (no second bookkeeping)."""
        for name, spec in self.specs.items():
            group = runtime_context.get_metrics_group().add_group("delta_table", spec.app_prefix)
            for gauge, attr in _WRITER_GAUGES.items():
                group.gauge(gauge, self._metric_reader(name, attr))

    def _metric_reader(self, table: str, attr: str) -> Any:
        def read() -> int:
            writer = self.writers.get(table)
            if writer is None:
                return 0
            value = getattr(writer.metrics, attr)
            return int(value * 1000) if attr.endswith("_s") else int(value)

        return read

    def add(self, table: str, row: tuple[Any, ...]) -> None:
        """Buffer one row (schema order) of ``table``."""
        rows = self.rows[table]
        rows.append(row)
        if len(rows) >= self.specs[table].batch_rows:
            self._flush(table)

    def add_batch(self, table: str, batch: pa.RecordBatch | pa.Table) -> None:
        """Hand an Arrow batch of ``table`` (its schema) to the writer, after any buffered rows."""
        self._flush(table)
        self.writers[table].write(batch)

    def _flush(self, table: str) -> None:
        rows = self.rows[table]
        if rows:
            self.writers[table].write(rows_to_batch(rows, self.specs[table].schema))
            self.rows[table] = []

    def on_marker(self, value: Any) -> list[str]:
        """Apply one OPEN / PRECOMMIT / COMMIT / END_OF_INPUT marker row to every table; commit reports."""
        marker = Marker.of(value)
        kind, checkpoint_id = marker.kind, marker.checkpoint_id
        results: list[CommitResult] = []
        if kind == OPEN:
            from sinks.writer import TwoPhaseDeltaWriter

            for name, spec in self.specs.items():
                writer = TwoPhaseDeltaWriter(
                    table_uri=spec.table_uri,
                    app_prefix=spec.app_prefix,
                    schema=spec.schema,
                    mode=spec.mode,
                    partition_by=list(spec.partition_by) or None,
                    merge=spec.merge,
                    target_file_size=spec.target_file_size,
                    **spec.writer_options,
                )
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
                writer.prepare(checkpoint_id)
        elif kind == COMMIT:
            results = [writer.commit(checkpoint_id) for writer in self.writers.values()]
        elif kind == END_OF_INPUT:
            for name, writer in self.writers.items():
                self._flush(name)
                results.append(writer.end_of_input())
        return [
            f"{self.specs[name].app_prefix}: {result}"
            for name, result in zip(self.writers, results, strict=False)
            if result.committed
        ]

    def close(self) -> None:
        """Release the writers; staged files stay for the next OPEN to commit or abort."""
        for writer in self.writers.values():
            writer.close()


class DeltaSinkFunction(ProcessFunction):  # type: ignore[misc]
    """A Python sink operator for one table: data rows and markers in, commit reports out."""

    def __init__(self, spec: DeltaSinkSpec) -> None:
        self.tables = TableWriters({"table": spec})

    def open(self, runtime_context: RuntimeContext) -> None:
        """Register metrics; the writer itself is created on the OPEN marker (it needs the run id)."""
        self.tables.register_metrics(runtime_context)

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[str]:
        """Dispatch one data row (one record each: read by position, not decoded) or marker."""
        if value[KIND_FIELD] == DATA:
            self.tables.add("table", value[PAYLOAD_FIELD])
        else:
            yield from self.tables.on_marker(value)

    def close(self) -> None:
        """Release the writer."""
        self.tables.close()


def sink_to_delta(stream: DataStream, spec: DeltaSinkSpec, *, name: str, uid: str) -> None:
    """Write ``stream`` (value tuples in ``spec.schema`` order) exactly once into a Delta table.

    Operator uids derive from ``uid``: ``<uid>-markers``, ``<uid>-writer``, ``<uid>-end``.
    """
    marked = with_checkpoint_markers(stream, name=f"{name} markers", uid=f"{uid}-markers")
    reports = (
        marked.process(DeltaSinkFunction(spec), output_type=Types.STRING())
        .name(f"{name} writer")
        .uid(f"{uid}-writer")
    )
    discard(reports, name=f"{name} end", uid=f"{uid}-end")
