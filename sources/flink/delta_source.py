"""The Delta streaming source as a Flink operator: trigger ticks -> keyed Python poller -> value tuples.

PyFlink cannot run a Python source, so a checkpointed stream of ticks drives one keyed
:class:`DeltaSourceFunction`, which keeps the offset in ``ValueState`` and stores it after a batch's last
row; why that makes restores exact is in DESIGN.md section 6. With ``emit_progress`` it also emits the
new offset after the batch's last row, as a ``lakestream.progress.Progress`` for the sink to record with
those rows (DESIGN.md section 9).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyflink.common import Types, WatermarkStrategy
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

from lakestream.progress import Progress
from runtime.worker.bundles import skip_sampler_waits
from sources.offsets import SourceOffset
from sources.options import DeltaSourceOptions
from sources.reader import table_rows
from sources.stream_reader import DeltaStreamReader, PollReport, resolve_read_schema
from storage.object_store import options_for
from storage.reader_positions import PositionRecorder
from storage.table_files import table_files

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.datastream import DataStream, StreamExecutionEnvironment

log = logging.getLogger(__name__)

UNBOUNDED_TICKS = 2**63 - 1

#: Gauges over the last poll's report (group ``delta_source.<uid>``), integers as Flink's Python gauges
#: are: Spark's per-trigger source progress and Delta's backlog (README, metrics).
SOURCE_GAUGES: dict[str, Callable[[PollReport], float]] = {
    "numInputRows": lambda r: r.progress.num_input_rows,
    "inputRowsPerSecond": lambda r: r.progress.input_rows_per_second,
    "processedRowsPerSecond": lambda r: r.progress.processed_rows_per_second,
    "numFilesOutstanding": lambda r: r.backlog.files_outstanding,
    "numBytesOutstanding": lambda r: r.backlog.bytes_outstanding,
    "versionsBehind": lambda r: r.backlog.versions_behind,
    "lastPollRows": lambda r: r.rows,
}


class DeltaSourceFunction(KeyedProcessFunction):  # type: ignore[misc]
    """One poll per tick; offset in keyed ValueState (the key is a constant)."""

    def __init__(
        self,
        table_uri: str,
        options: DeltaSourceOptions,
        read_schema: pa.Schema,
        *,
        storage_options: Mapping[str, str] | None = None,
        metric_scope: str = "",
        start: SourceOffset | None = None,
        emit_progress: bool = False,
        reader_id: str = "",
    ) -> None:
        """``start``: where a stream without state begins (a recorded position), instead of the options'
        starting point; a restored offset wins over it. ``emit_progress``: see the module docstring."""
        self.table_uri = table_uri
        self.options = options
        self.read_schema = read_schema
        self.storage_options = options_for(table_uri, storage_options) or {}
        self.metric_scope = metric_scope or table_uri
        self.start_json = start.to_json() if start is not None else None
        self.emit_progress = emit_progress
        #: Names this reader's position record beside the table (``storage.reader_positions``).
        self.reader_id = reader_id or self.metric_scope
        self.reader: DeltaStreamReader | None = None
        self.positions: PositionRecorder | None = None
        self.last: PollReport | None = None
        self._lag_ms: int = 0
        self._last_started: float | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        """Create the reader (caches live per task attempt) and register the metrics."""
        skip_sampler_waits()
        self.offset_state = runtime_context.get_state(
            ValueStateDescriptor("delta-source-offset", Types.STRING())
        )
        self.reader = DeltaStreamReader(
            self.table_uri, self.options, read_schema=self.read_schema, storage_options=self.storage_options
        )
        self.positions = PositionRecorder(table_files(self.table_uri, self.storage_options), self.reader_id)
        group = runtime_context.get_metrics_group().add_group("delta_source", self.metric_scope)
        self._rows = group.counter("rowsEmitted")
        self._polls = group.counter("polls")
        self._skipped_versions = group.counter("skippedVersions")
        self._skipped_files = group.counter("skippedFiles")
        self._rows_per_poll = group.distribution("rowsPerPoll")
        self.last = None
        self._lag_ms = 0
        self._last_started = None
        for name, read in SOURCE_GAUGES.items():
            group.gauge(name, self._gauge(read))
        group.gauge("sourceLagMs", lambda: self._lag_ms)
        group.gauge("lastCompleteVersion", lambda: self.last.end.last_complete_version if self.last else -1)

    def _gauge(self, read: Callable[[PollReport], float]) -> Callable[[], int]:
        return lambda: int(round(read(self.last))) if self.last is not None else 0

    def close(self) -> None:
        """Write the reader's last observed position (a bounded run ends between two records)."""
        if self.positions is not None:
            self.positions.flush()

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        """Poll once: emit the batch after the stored offset, then store (and emit) the new offset."""
        assert self.reader is not None
        raw = self.offset_state.value()
        stored = raw or self.start_json
        offset = self.reader.start(SourceOffset.from_json(stored) if stored else None)
        started = time.time()
        if self.positions is not None:  # what a checkpoint taken now would hold, for maintenance
            self.positions.observe(
                version=offset.version, table_id=offset.table_id, now_ms=int(started * 1000)
            )
        plan = self.reader.plan(offset)
        rows = 0
        for table in self.reader.read(plan):
            yield from table_rows(table)
            rows += table.num_rows
        # Only after the last row: the state of any checkpoint matches exactly what was emitted before it.
        if plan.end != offset or raw is None:
            self.offset_state.update(plan.end.to_json())
            # A start resolved from the options now ('latest', a timestamp) is recorded even when the
            # poll found nothing: the next run must not resolve it again later.
            if self.emit_progress and (plan.end != offset or stored is None):
                yield Progress(plan.end.progress())
        report = self.reader.report(plan, rows=rows, started=started, previous_started=self._last_started)
        self._last_started = started
        self._record(report)

    def _record(self, report: PollReport) -> None:
        self.last = report
        self._polls.inc()
        if report.rows:
            self._rows.inc(report.rows)
            self._rows_per_poll.update(report.rows)
        if report.lag_ms is not None:
            self._lag_ms = report.lag_ms
        if report.skipped_versions or report.skipped_files:
            self._skipped_versions.inc(len(report.skipped_versions))
            self._skipped_files.inc(len(report.skipped_files))
            log.warning(
                "Delta source %s skipped lost data (fail_on_data_loss=False): versions %s, files %s",
                self.table_uri,
                list(report.skipped_versions),
                list(report.skipped_files),
            )


def tick_stream(
    env: StreamExecutionEnvironment,
    *,
    poll_interval_s: float,
    ticks: int | None,
    name: str,
    uid: str,
) -> DataStream:
    """A parallelism-1 stream of ``ticks`` Longs (unbounded when None), one per ``poll_interval_s``.

    The uid differs between bounded and unbounded runs: tick positions carry no meaning, so a job
    restored from a checkpoint with the other kind simply starts a fresh tick sequence (restore with
    ``execution.state-recovery.ignore-unclaimed-state=true``).
    """
    from pyflink.datastream.connectors import Source
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    count = UNBOUNDED_TICKS if ticks is None else int(ticks)
    j_source = jvm.io.lakestream.flink.epoch.TickGenerator.source(count, 1.0 / poll_interval_s)
    stream = env.from_source(Source(j_source), WatermarkStrategy.no_watermarks(), name, Types.LONG())
    return stream.uid(uid if ticks is None else f"{uid}-bounded").set_parallelism(1)


def delta_source(
    env: StreamExecutionEnvironment,
    table_uri: str,
    options: DeltaSourceOptions,
    *,
    name: str = "delta source",
    uid: str = "delta-source",
    ticks: int | None = None,
    read_schema: pa.Schema | None = None,
    storage_options: Mapping[str, str] | None = None,
    start: SourceOffset | None = None,
    emit_progress: bool = False,
    reader_id: str | None = None,
) -> DataStream:
    """Follow a Delta table as a stream of value tuples in :func:`sources.reader.output_schema` order.

    ``ticks`` bounds the number of polls (tests, catch-up runs); None polls forever. The read schema
    defaults to the table's schema now. ``start`` and ``emit_progress``: see
    :class:`DeltaSourceFunction` (with ``emit_progress`` the stream also carries ``Progress`` records).
    Operator uids: ``<uid>-ticks[-bounded]``, ``<uid>``; keep them stable across upgrades so the
    offset state is found on restore.
    """
    schema = (
        read_schema
        if read_schema is not None
        else resolve_read_schema(table_uri, storage_options=storage_options)
    )
    ticks_ds = tick_stream(
        env,
        poll_interval_s=options.poll_interval.total_seconds(),
        ticks=ticks,
        name=f"{name} ticks",
        uid=f"{uid}-ticks",
    )
    fn = DeltaSourceFunction(
        table_uri,
        options,
        schema,
        storage_options=storage_options,
        metric_scope=uid,
        start=start,
        emit_progress=emit_progress,
        reader_id=reader_id or uid,
    )
    return (
        ticks_ds.key_by(lambda _tick: 0, key_type=Types.INT())
        .process(fn)
        .name(name)
        .uid(uid)
        .set_parallelism(1)
    )
