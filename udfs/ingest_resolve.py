"""Flink wrapper of the gated side of ingest: late rows, de-duplication, partial silver rows.

Input: a ``CheckpointEpochOperator`` stream whose DATA payloads are the gate's batch rows ``(split,
event_times_ms, late_watermarks_ms, bronze rows as Arrow IPC)``. Late events go to ``late/order_events``
with their watermark (and are still applied: the guard, not the watermark, protects newer values);
re-deliveries are dropped by ``lakestream.dedup.DedupCache``; every other event becomes the partial row
``lakestream.silver.silver_source`` makes of it, which the silver writer folds per checkpoint and MERGEs
with ``SILVER_MERGE``. One crossing per batch, column-wise; no per-order Flink state (DESIGN.md section 2).

The output is the committables (``udfs.global_commit.COMMITTABLE_TYPE``) of the tables in global commit
mode (silver in ingest), for one ``GlobalCommitterFunction``. Each checkpoint's counts of late events,
duplicates and silver changes go with silver's staged work into its Delta commit
(``lakestream.counters``): unlike the Flink counters, summed over the table history they count every
event exactly once, across restores.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
from pyflink.datastream import ProcessFunction, RuntimeContext

from lakestream.dedup import DedupCache
from lakestream.silver import silver_source
from udfs.checkpoint_markers import DATA, END_OF_INPUT, PRECOMMIT, Marker
from udfs.delta_sink import DeltaSinkSpec, TableWriters
from udfs.global_commit import committable_row
from udfs.ingest_rows import NOT_LATE, GatedBatch, from_epoch_millis, unpack_events
from udfs.worker_gc import tune_for_batches

#: Names of the tables this operator writes, as keys of its ``tables`` argument.
LATE, SILVER = "late", "silver"
#: The per-checkpoint counts recorded in silver's commits (the same names as the Flink counters).
COUNTERS = ("events_late", "events_duplicate", "silver_changes")

UTC = timezone.utc


class ResolveBatches(ProcessFunction):  # type: ignore[misc]
    """Gated batches in: late rows, de-dup by event id, one partial silver row per new event."""

    def __init__(self, *, dedup_ttl: timedelta, tables: Mapping[str, DeltaSinkSpec]) -> None:
        if dedup_ttl <= timedelta(0):
            raise ValueError(f"event_time.dedup_ttl: must be positive, got {dedup_ttl}")
        if set(tables) != {LATE, SILVER}:
            raise ValueError(f"tables: need specs for {LATE} and {SILVER}, got {sorted(tables)}")
        if tables[SILVER].mode != "merge":
            raise ValueError("tables: silver must be written in merge mode (the guard resolves orders)")
        self.dedup_ttl = dedup_ttl
        self.tables = TableWriters(tables)
        self._watermark_type = tables[LATE].schema.field("watermark").type

    def open(self, runtime_context: RuntimeContext) -> None:
        """Start an empty de-dup cache and register the counters and writer gauges."""
        self._seen = DedupCache(self.dedup_ttl)
        group = runtime_context.get_metrics_group().add_group("lakestream")
        self._late = group.counter("events_late")
        self._duplicates = group.counter("events_duplicate")
        self._changes = group.counter("silver_changes")
        #: Counts since the last PRECOMMIT: this checkpoint's, staged with silver's work at PRECOMMIT.
        self._counts = dict.fromkeys(COUNTERS, 0)
        self.tables.register_metrics(runtime_context)
        tune_for_batches()  # last: freezes what open() built

    def close(self) -> None:
        """Release the table writers (staged files stay for the next OPEN)."""
        self.tables.close()

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[Any]:
        """A checkpoint marker for the writers, or one gated batch to route and resolve."""
        marker = Marker.of(value)
        if marker.kind != DATA:
            counters = None
            if marker.kind in (PRECOMMIT, END_OF_INPUT):
                counters = {SILVER: self._counts}
                self._counts = dict.fromkeys(COUNTERS, 0)
            for committable in self.tables.apply(value, counters=counters).committables:
                yield committable_row(committable)
            return
        gated = GatedBatch._make(marker.payload)
        late_wms = gated.late_watermarks or ()
        batch = unpack_events(gated.events)
        tables, seen = self.tables, self._seen
        late = [i for i, wm in enumerate(late_wms) if wm != NOT_LATE]
        if late:
            watermarks = pa.array([from_epoch_millis(late_wms[i]) for i in late], self._watermark_type)
            rows = pa.Table.from_batches([batch.take(pa.array(late))]).append_column("watermark", watermarks)
            tables.add_batch(LATE, rows)
        # Events without an order id change no order (and are not remembered). De-dup needs the ids as
        # Python strings (a dict lookup each); everything else stays columnar.
        has_order = batch.column("order_id").is_valid()
        orders = batch if has_order.false_count == 0 else batch.filter(has_order)
        fresh = seen.first_seen(orders.column("event_id").to_pylist(), datetime.now(UTC))
        duplicates = len(fresh) - sum(fresh)
        silver = silver_source(orders.filter(pa.array(fresh, pa.bool_())) if duplicates else orders)
        if silver.num_rows:
            tables.add_batch(SILVER, silver)
        self._late.inc(len(late))
        self._duplicates.inc(duplicates)
        self._changes.inc(silver.num_rows)
        counts = self._counts
        counts["events_late"] += len(late)
        counts["events_duplicate"] += duplicates
        counts["silver_changes"] += silver.num_rows
