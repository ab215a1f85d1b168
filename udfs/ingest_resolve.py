"""Flink wrapper of the keyed side of ingest: late rows and partial silver rows, at the job's parallelism.

Input: ``KeyedDedupEpochOperator`` marker rows keyed by order, whose DATA payloads
(``ingest_rows.ResolveBatch``) carry each event's late watermark and de-dup flag. Late arrivals go to
``late/order_events`` and are still applied; first sightings become silver's partial rows, staged for
the MERGE (DESIGN.md section 2) or the merge-on-read changes table (section 13). The output is silver's
committables for one ``GlobalCommitterFunction``, with each checkpoint's late, duplicate and change
counts in its commit (``lakestream.counters``, section 3).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import timezone
from typing import Any, NamedTuple

import pyarrow as pa
from pyflink.datastream import ProcessFunction, RuntimeContext

from lakestream.silver import silver_source
from runtime.checkpoint_markers import DATA, END_OF_INPUT, PRECOMMIT, Marker
from runtime.worker.collector import tune_for_batches
from sinks.flink.delta_sink import DeltaSinkSpec, TableWriterFunction, TableWriters
from sinks.flink.global_commit import committable_row
from udfs.ingest_rows import NOT_LATE, ResolveBatch, from_epoch_millis, unpack_events

#: Names of the tables this operator writes, as keys of its ``tables`` argument.
LATE, SILVER = "late", "silver"
#: The per-checkpoint counts recorded in silver's commits (the same names as the Flink counters).
COUNTERS = ("events_late", "events_duplicate", "silver_changes")

UTC = timezone.utc


class ResolveBatches(TableWriterFunction):
    """De-duplicated parts in: late rows, one partial silver row per first sighting of an event."""

    def __init__(self, *, tables: Mapping[str, DeltaSinkSpec]) -> None:
        if set(tables) != {LATE, SILVER}:
            raise ValueError(f"tables: need specs for {LATE} and {SILVER}, got {sorted(tables)}")
        if tables[SILVER].table.mode not in ("merge", "changes"):
            raise ValueError(
                "tables: silver must be written in merge or changes mode (the guard resolves orders)"
            )
        self.tables = TableWriters(tables)
        self._watermark_type = tables[LATE].table.schema.field("watermark").type

    def open(self, runtime_context: RuntimeContext) -> None:
        """Register the counters and writer gauges."""
        super().open(runtime_context)
        group = runtime_context.get_metrics_group().add_group("lakestream")
        # events_duplicate is the de-dup operator's Flink counter; here it only goes into silver's commits.
        self._late = group.counter("events_late")
        self._changes = group.counter("silver_changes")
        #: Counts since the last PRECOMMIT: this checkpoint's, staged with silver's work at PRECOMMIT.
        self._counts = dict.fromkeys(COUNTERS, 0)
        tune_for_batches()  # last: freezes what open() built

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[Any]:
        """A checkpoint marker for the writers, or one re-batched set of parts to resolve."""
        marker = Marker.of(value)
        if marker.kind != DATA:
            counters = None
            if marker.kind in (PRECOMMIT, END_OF_INPUT):
                counters = {SILVER: self._counts}
                self._counts = dict.fromkeys(COUNTERS, 0)
            for committable in self.tables.apply(value, counters=counters).committables:
                yield committable_row(committable)
            return
        counts = resolve_batch(ResolveBatch._make(marker.payload), self.tables, self._watermark_type)
        self._late.inc(counts.late)
        self._changes.inc(counts.silver_changes)
        staged = self._counts
        staged["events_late"] += counts.late
        staged["events_duplicate"] += counts.duplicates
        staged["silver_changes"] += counts.silver_changes


class ResolveCounts(NamedTuple):
    """What one resolved batch contributed: late arrivals, re-deliveries, silver change rows."""

    late: int
    duplicates: int
    silver_changes: int


def resolve_batch(batch: ResolveBatch, tables: TableWriters, watermark_type: pa.DataType) -> ResolveCounts:
    """Route one de-duplicated batch: every late arrival to the late table, first sightings to silver.

    Late rows include re-deliveries (like bronze, the late table records arrivals); only events seen
    for the first time within the de-dup TTL become partial silver rows (``silver_source``).
    """
    parts = [unpack_events(blob) for blob in batch.events]
    if not parts:
        return ResolveCounts(0, 0, 0)
    events = pa.Table.from_batches(parts)
    if events.num_rows != len(batch.late_watermarks) or events.num_rows != len(batch.fresh):
        raise ValueError(
            f"resolve batch: {events.num_rows} events but {len(batch.late_watermarks)} late watermarks "
            f"and {len(batch.fresh)} de-dup flags; the KeyedDedupEpochOperator output is malformed"
        )
    late_wms = batch.late_watermarks
    late = [i for i, wm in enumerate(late_wms) if wm != NOT_LATE]
    if late:
        watermarks = pa.array([from_epoch_millis(late_wms[i]) for i in late], watermark_type)
        rows = events.take(pa.array(late)).append_column("watermark", watermarks)
        tables.add_batch(LATE, rows)
    fresh = pa.array(batch.fresh, pa.bool_())
    duplicates = fresh.false_count
    silver = silver_source(events.filter(fresh) if duplicates else events)
    if silver.num_rows:
        tables.add_batch(SILVER, silver)
    return ResolveCounts(len(late), duplicates, silver.num_rows)
