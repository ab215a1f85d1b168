"""Plan the next batch of a Delta stream: from an offset to the files (or CDF versions) of one poll.

Pure with respect to Flink, so what a stream emits is decided and tested without a cluster: given the
table's log, an offset and the options, :meth:`BatchPlanner.plan` returns what to read and the offset
after it. Each step is its own module: ``start_point`` (where a new stream starts), ``snapshot_plan``
(the initial snapshot), ``change_plan`` (the versions after it), ``admission`` (one poll's limits),
``backlog`` (what is left, for metrics), ``metadata_tracker`` (the metadata in effect and its checks).
The semantics are Spark's Delta source's, stated in DESIGN.md section 6.
"""

from __future__ import annotations

import pyarrow as pa

from sources import start_point
from sources.backlog import backlog
from sources.batch_plan import Backlog, BatchPlan
from sources.change_plan import plan_changes
from sources.metadata_tracker import MetadataTracker
from sources.offsets import SourceOffset
from sources.options import DeltaSourceOptions
from sources.snapshot_plan import SnapshotListing, list_snapshot, plan_snapshot
from sources.source_errors import SourceOptionsError
from storage.delta_log import DeltaLog


class BatchPlanner:
    """Plans polls for one table; keeps the metadata in effect and the snapshot listing between polls."""

    def __init__(self, log: DeltaLog, options: DeltaSourceOptions, read_schema: pa.Schema) -> None:
        self.log = log
        self.options = options
        self.read_schema = read_schema
        if options.event_time_order is not None and options.event_time_order not in read_schema.names:
            raise SourceOptionsError(
                f"event_time_order: column {options.event_time_order!r} is not in the table "
                f"(columns: {', '.join(read_schema.names)})"
            )
        self._metadata = MetadataTracker(log, read_schema, options.schema_changes)
        self._snapshot: SnapshotListing | None = None

    def latest_version(self) -> int:
        """Newest committed version."""
        return start_point.latest_version(self.log)

    def initial_offset(self) -> SourceOffset:
        """Resolve the options' starting point against the table as it is now (done once per stream)."""
        return start_point.initial_offset(self.log, self.options)

    def plan(self, offset: SourceOffset) -> BatchPlan:
        """The next batch from ``offset`` (possibly empty: nothing new, or only offset movement)."""
        if not offset.in_snapshot:
            return plan_changes(self.log, self.options, offset, self._metadata)
        meta = self._metadata.before(offset)
        plan = plan_snapshot(self.log, self.options, offset, self._snapshot_for(offset), meta)
        if not plan.end.in_snapshot:  # the snapshot is done: the changes start after its version
            self._metadata.remember(plan.end.version, meta)
            self._snapshot = None
        return plan

    def backlog(self, offset: SourceOffset, *, latest_version: int | None = None) -> Backlog:
        """Versions, files and bytes still to emit after ``offset`` (look-ahead capped per poll)."""
        latest = self.latest_version() if latest_version is None else latest_version
        snapshot = self._snapshot_for(offset) if offset.in_snapshot else None
        return backlog(self.log, self.options, offset, latest=latest, snapshot=snapshot)

    def _snapshot_for(self, offset: SourceOffset) -> SnapshotListing:
        """The listing of the snapshot ``offset`` is in, listed once per snapshot."""
        if self._snapshot is None or self._snapshot.version != offset.version:
            self._snapshot = list_snapshot(self.log, offset, self.options.event_time_order)
        return self._snapshot
