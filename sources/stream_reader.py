"""The Delta stream without Flink: offset in, (rows, next offset, report) out, one poll at a time.

Everything that decides what is emitted lives here and in the planner, so it is tested without a
cluster, restarts included (re-polling from a saved offset); ``sources.flink.delta_source`` is a thin shell
that keeps the offset (DESIGN.md section 6).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

from sources.batch_plan import Backlog, BatchPlan
from sources.offsets import SourceOffset
from sources.options import DeltaSourceOptions
from sources.planner import BatchPlanner
from sources.reader import PlanReader, output_schema
from sources.trigger_progress import TriggerProgress, trigger_progress
from storage.delta_log import DeltaLog


def resolve_read_schema(table_uri: str, *, storage_options: Mapping[str, str] | None = None) -> pa.Schema:
    """The schema a new stream reads with: the table's schema at its latest version, now."""
    log = DeltaLog(table_uri, storage_options=storage_options)
    versions = log.commit_versions()
    if not versions:
        from sources.source_errors import DeltaSourceError

        raise DeltaSourceError(f"{table_uri} is not a Delta table (no commits in _delta_log)")
    return log.metadata_at(versions[-1]).arrow_schema()


@dataclass(frozen=True, slots=True)
class PollReport:
    """What one poll did, for metrics and logs."""

    start: SourceOffset
    end: SourceOffset
    rows: int
    files: int
    bytes: int
    versions: tuple[int, ...]
    skipped_versions: tuple[int, ...]
    skipped_files: tuple[str, ...]
    backlog: Backlog
    duration_s: float
    #: Emit time minus commit time of the newest version emitted by this poll (None: nothing emitted).
    lag_ms: int | None
    #: Spark's numInputRows / inputRowsPerSecond / processedRowsPerSecond of this poll.
    progress: TriggerProgress

    @property
    def rows_per_second(self) -> float:
        """Spark's processedRowsPerSecond for this poll."""
        return self.progress.processed_rows_per_second


class DeltaStreamReader:
    """Plans and reads one Delta table as a stream; holds caches, never the offset."""

    def __init__(
        self,
        table_uri: str,
        options: DeltaSourceOptions,
        *,
        read_schema: pa.Schema | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        self.options = options
        self.log = DeltaLog(table_uri, storage_options=storage_options)
        if read_schema is None:
            read_schema = resolve_read_schema(table_uri, storage_options=storage_options)
        self.read_schema = read_schema
        self.planner = BatchPlanner(self.log, options, read_schema)
        self.reader = PlanReader(self.log, read_schema, options.mode)

    @property
    def output_schema(self) -> pa.Schema:
        """Schema of the emitted value tuples (table columns + metadata columns)."""
        return output_schema(self.reader.read_schema, self.options.mode)

    def start(self, restored: SourceOffset | None) -> SourceOffset:
        """The restored offset, or the options' starting point resolved now (first poll of a stream)."""
        return restored if restored is not None else self.planner.initial_offset()

    def plan(self, offset: SourceOffset) -> BatchPlan:
        """The next batch after ``offset``."""
        return self.planner.plan(offset)

    def read(self, plan: BatchPlan) -> Iterator[pa.Table]:
        """Output tables of ``plan``, in emission order."""
        return self.reader.read(plan)

    def report(
        self,
        plan: BatchPlan,
        *,
        rows: int,
        started: float,
        now: float | None = None,
        previous_started: float | None = None,
    ) -> PollReport:
        """Summarise a poll whose rows were all emitted; ``started``/``now`` are ``time.time()`` values.

        ``previous_started`` is when the poll before this one started (None for a stream's first poll
        in this task attempt), for the input rate.
        """
        now = time.time() if now is None else now
        newest_ts = max(
            [f.commit_timestamp_ms for f in plan.files] + [v.commit_timestamp_ms for v in plan.cdf_versions],
            default=None,
        )
        return PollReport(
            start=plan.start,
            end=plan.end,
            rows=rows,
            files=plan.num_files,
            bytes=plan.num_bytes,
            versions=plan.versions,
            skipped_versions=plan.skipped_versions,
            skipped_files=plan.skipped_files,
            backlog=self.planner.backlog(plan.end, latest_version=plan.latest_version),
            duration_s=max(now - started, 0.0),
            lag_ms=int(now * 1000 - newest_ts) if newest_ts is not None and rows else None,
            progress=trigger_progress(
                rows, started_s=started, ended_s=now, previous_started_s=previous_started
            ),
        )
