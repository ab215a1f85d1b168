"""The Flink face of the exactly-once Delta sink: markers in, ``sinks.TwoPhaseDeltaWriter`` calls out.

The protocol lives in ``sinks/`` as plain Python (tested without Flink); this module only turns the
in-band marker records of ``CheckpointEpochOperator`` into writer calls, buffers data rows into Arrow
record batches, and publishes the writer's metrics. Keep it thin.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
from pyflink.common import Types
from pyflink.datastream import ProcessFunction, RuntimeContext

from udfs.checkpoint_markers import (
    COMMIT,
    DATA,
    END_OF_INPUT,
    OPEN,
    PRECOMMIT,
    discard,
    with_checkpoint_markers,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.datastream import DataStream

    from sinks.merge_spec import MergeSpec


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


class DeltaSinkFunction(ProcessFunction):  # type: ignore[misc]
    """Drives one ``TwoPhaseDeltaWriter`` per subtask from the marker stream; yields commit reports."""

    def __init__(self, spec: DeltaSinkSpec) -> None:
        self.spec = spec
        self.writer: Any = None
        self.rows: list[tuple[Any, ...]] = []

    def open(self, runtime_context: RuntimeContext) -> None:
        """Register metrics; the writer itself is created on the OPEN marker (it needs the run id).

        The gauges read the writer's own cumulative ``WriterMetrics``, so Flink shows exactly what the
        protocol counted (rows, files and bytes committed, commits, conflict retries, commit latency,
        staged but not yet committed) with no second bookkeeping here.
        """
        group = runtime_context.get_metrics_group().add_group("delta_table", self.spec.app_prefix)
        for name, attr in _WRITER_GAUGES.items():
            group.gauge(name, self._metric_reader(attr))

    def _metric_reader(self, attr: str) -> Any:
        def read() -> int:
            if self.writer is None:
                return 0
            value = getattr(self.writer.metrics, attr)
            return int(value * 1000) if attr.endswith("_s") else int(value)

        return read

    def _flush(self) -> None:
        if self.rows:
            self.writer.write(rows_to_batch(self.rows, self.spec.schema))
            self.rows = []

    def _report(self, result: Any) -> Iterator[str]:
        if result is not None and getattr(result, "committed", False):
            yield f"{self.spec.app_prefix}: {result}"

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[str]:
        """Dispatch one data row or marker."""
        kind = value[0]
        if kind == DATA:
            self.rows.append(value[5])
            if len(self.rows) >= self.spec.batch_rows:
                self._flush()
        elif kind == OPEN:
            from sinks.writer import TwoPhaseDeltaWriter

            self.writer = TwoPhaseDeltaWriter(
                table_uri=self.spec.table_uri,
                app_prefix=self.spec.app_prefix,
                schema=self.spec.schema,
                mode=self.spec.mode,
                partition_by=list(self.spec.partition_by) or None,
                merge=self.spec.merge,
                target_file_size=self.spec.target_file_size,
                **self.spec.writer_options,
            )
            restored = value[1] if value[1] is not None and value[1] >= 0 else None
            result = self.writer.open(
                restored_checkpoint_id=restored, run_id=value[4], subtask=value[2], parallelism=value[3]
            )
            yield from self._report(result)
        elif kind == PRECOMMIT:
            self._flush()
            self.writer.prepare(value[1])
        elif kind == COMMIT:
            yield from self._report(self.writer.commit(value[1]))
        elif kind == END_OF_INPUT:
            self._flush()
            yield from self._report(self.writer.end_of_input())

    def close(self) -> None:
        """Release the writer; staged files stay for the next OPEN to commit or abort."""
        if self.writer is not None:
            self.writer.close()


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
