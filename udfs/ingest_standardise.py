"""Flink wrapper of the adapters and quality rules: one batch of Kafka records in, routed rows out.

Records come in batches of one Kafka partition (``KafkaBatchEpochOperator``, ``udfs.ingest_rows.KafkaBatch``)
because every crossing between the JVM and a Python worker has a fixed cost; bronze, review and
quarantine are written here rather than by sink operators, so bronze rows never cross back to the JVM.
The routing, the main output (``BATCH_TYPE``, for the Java ``EventTimeGate``) and the counters:
DESIGN.md section 5.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any, cast

import pyarrow as pa
from pyflink.common import Row, Types
from pyflink.datastream import ProcessFunction, RuntimeContext

from lakestream.adapters import AdapterSettings, get_adapter
from lakestream.keys import split_by_subtask
from lakestream.progress import kafka_key, watermark_key
from lakestream.quality import QualityRules, classify
from lakestream.standard import EVENT_COLUMNS, Rejected
from runtime.checkpoint_markers import DATA, Marker
from runtime.worker.collector import tune_for_batches
from sinks.flink.delta_sink import DeltaSinkSpec, TableWriterFunction, TableWriters, rows_to_batch
from udfs.ingest_gold import GOLD_COLUMN_TYPES, gold_columns
from udfs.ingest_rows import (
    HEADER,
    BatchPart,
    KafkaBatch,
    bronze_row,
    event_millis,
    invalid_row,
    pack_events,
    quarantine_row,
    string_list,
)

UTC = timezone.utc
_QUALITY = EVENT_COLUMNS.index("quality")

#: Main output (``ingest_rows.BatchPart``): per Kafka batch with VALID events a header with their times
#: in Kafka order (the gate's input), then their bronze rows split by owning subtask, each part with its
#: events' positions, buckets and id hashes (``lakestream.keys``), late watermarks left for the gate;
#: with the speed layer on, each part also carries its events' gold inputs (``udfs.ingest_gold``) and
#: leaves their arrival watermarks to the gate.
BATCH_TYPE = Types.ROW_NAMED(
    list(BatchPart._fields),
    [
        Types.STRING(),
        Types.INT(),
        Types.PRIMITIVE_ARRAY(Types.LONG()),
        Types.PRIMITIVE_ARRAY(Types.INT()),
        Types.PRIMITIVE_ARRAY(Types.INT()),
        Types.PRIMITIVE_ARRAY(Types.LONG()),
        Types.PRIMITIVE_ARRAY(Types.LONG()),
        Types.PRIMITIVE_ARRAY(Types.LONG()),
        Types.PRIMITIVE_ARRAY(Types.BYTE()),
        *GOLD_COLUMN_TYPES,
        Types.PRIMITIVE_ARRAY(Types.LONG()),
    ],
)


#: Names of the tables this operator writes, as keys of its ``tables`` argument.
BRONZE, REVIEW, QUARANTINE = "bronze", "review", "quarantine"
#: Counter key of adapter rejects, next to the quality tags.
REJECTED = "REJECTED"


class StandardiseFunction(TableWriterFunction):
    """Adapter by topic, then ``quality.classify``; never raises on a record (DESIGN.md section 5)."""

    def __init__(
        self,
        *,
        sources_by_topic: Mapping[str, str],
        adapter_settings: AdapterSettings,
        rules: QualityRules,
        tables: Mapping[str, DeltaSinkSpec],
        parallelism: int,
        max_parallelism: int,
        watermark_seeds: Mapping[str, int] | None = None,
        gold: bool = False,
    ) -> None:
        """``watermark_seeds``: the ``watermark/<topic>/<partition>`` progress a run that continues an
        earlier one starts from (the gate gets the same), so bronze's record of them never goes back.
        ``gold``: fill the parts' gold input columns (the speed layer, ``gold.enabled``)."""
        if not 1 <= parallelism <= max_parallelism:
            raise ValueError(
                f"flink.parallelism ({parallelism}) must be between 1 and flink.max_parallelism "
                f"({max_parallelism})"
            )
        if set(tables) != {BRONZE, REVIEW, QUARANTINE}:
            raise ValueError(
                f"tables: need specs for {BRONZE}, {REVIEW} and {QUARANTINE}, got {sorted(tables)}"
            )
        for source in sources_by_topic.values():
            get_adapter(source)  # fail at graph build, not in a worker
        self.sources_by_topic = dict(sources_by_topic)
        self.adapter_settings = adapter_settings
        self.rules = rules
        self.tables = TableWriters(tables)
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self._bronze_schema = tables[BRONZE].table.schema
        self._maxima = dict(watermark_seeds or {})
        self.gold = gold

    def open(self, runtime_context: RuntimeContext) -> None:
        """Resolve adapters once and register the quality counters and writer gauges."""
        super().open(runtime_context)
        self._adapters = {topic: get_adapter(src) for topic, src in self.sources_by_topic.items()}
        group = runtime_context.get_metrics_group().add_group("lakestream")
        self._counters = {
            "VALID": group.counter("events_valid"),
            "SUSPICIOUS": group.counter("events_suspicious"),
            "INVALID": group.counter("events_invalid"),
        }
        self._counters[REJECTED] = group.counter("records_rejected")
        self._batches = group.counter("kafka_batches")
        # Counted per batch and added to the Flink counters once: a counter ``inc`` goes through Beam's
        # metrics container lookup (about 1 us a call, some 5% of what standardising one record costs).
        self._counts = dict.fromkeys(self._counters, 0)
        tune_for_batches()  # last: freezes what open() built

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[Any]:
        """A checkpoint marker for the table writers, or a batch of Kafka records to route."""
        marker = Marker.of(value)
        if marker.kind != DATA:
            self.tables.on_marker(value)
            return
        batch = KafkaBatch._make(marker.payload)
        self._batches.inc()
        now = datetime.now(UTC)
        rows: list[Any] = []
        valid: list[bool] = []
        for topic, partition, offset, payload in batch.records():
            row = self._route(topic, partition, offset, payload, now)
            if row is None:
                continue
            rows.append(row)
            valid.append(row[_QUALITY] == "VALID")
        counts = self._counts
        for quality, n in counts.items():
            if n:
                self._counters[quality].inc(n)
                counts[quality] = 0
        if not rows:
            self._note_progress(batch, None)
            return
        # One Arrow batch per Kafka batch: bronze takes it whole, the gate gets its VALID rows as IPC.
        bronze = rows_to_batch(rows, self._bronze_schema)
        self.tables.add_batch(BRONZE, bronze)
        n_valid = sum(valid)
        if not n_valid:
            self._note_progress(batch, None)
            return
        events = bronze if n_valid == len(rows) else bronze.filter(pa.array(valid))
        times = event_millis(events)
        self._note_progress(batch, int(times.max()))
        split = f"{batch.topic}#{batch.partition}"
        all_times = times.tolist()
        yield Row(split, HEADER, all_times, [], [], [], [], None, None, None, None, None, None, None)
        parts = split_by_subtask(
            string_list(events.column("order_id")),
            cast("list[str]", string_list(events.column("event_id"))),  # not nullable in bronze
            parallelism=self.parallelism,
            max_parallelism=self.max_parallelism,
        )
        whole = len(parts) == 1
        for part in parts:
            rows_of_part = events if whole else events.take(pa.array(part.positions, pa.int32()))
            gold_cols = gold_columns(rows_of_part) if self.gold else (None, None, None, None)
            yield Row(
                split,
                part.subtask,
                all_times if whole else times[part.positions].tolist(),
                part.positions,
                part.buckets,
                part.id_hi,
                part.id_lo,
                None,
                pack_events(rows_of_part),
                *gold_cols,
                None,
            )

    def _note_progress(self, batch: KafkaBatch, newest: int | None) -> None:
        """Bronze's commits record where each partition stands (DESIGN.md section 9): the next offset,
        and the newest VALID event time (``newest``, epoch ms; None without VALID events), which the
        next run's gate starts from."""
        if not batch.offsets:
            return
        progress = {kafka_key(batch.topic, batch.partition): batch.offsets[-1] + 1}
        if newest is not None:
            key = watermark_key(batch.topic, batch.partition)
            if newest >= 0 and newest > self._maxima.get(key, -1):
                self._maxima[key] = newest
                progress[key] = newest
        self.tables.note_progress(BRONZE, progress)

    def _route(self, topic: str, partition: int, offset: int, payload: bytes | None, now: datetime) -> Any:
        """One record -> review/quarantine; returns its bronze tuple (None for a reject)."""
        tables = self.tables
        try:
            adapter = self._adapters.get(topic)
            if adapter is None:
                result: Any = Rejected(
                    raw=bytes(payload or b""),
                    source="unknown",
                    reason=f"topic: {topic!r} is not a configured source topic ([kafka.topics])",
                    topic=topic,
                    partition=partition,
                    offset=offset,
                )
            else:
                result = adapter(
                    payload, topic=topic, partition=partition, offset=offset, settings=self.adapter_settings
                )
                if not isinstance(result, Rejected):
                    result = classify(result, now=now, rules=self.rules)
        except Exception as exc:  # noqa: BLE001 - one poison record must not crash-loop the job
            source = self.sources_by_topic.get(topic, "unknown")
            result = Rejected(
                raw=bytes(payload or b""),
                source=source,
                reason=f"payload: standardise error {type(exc).__name__}: {exc}",
                topic=topic,
                partition=partition,
                offset=offset,
            )
        if isinstance(result, Rejected):
            self._counts[REJECTED] += 1
            tables.add(QUARANTINE, quarantine_row(result, now))
            return None
        event = result
        self._counts[event.quality] += 1
        row = bronze_row(event, now)
        if event.quality == "SUSPICIOUS":
            tables.add(REVIEW, row)
        elif event.quality != "VALID":
            tables.add(QUARANTINE, invalid_row(event, now))
        return row
