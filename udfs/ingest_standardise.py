"""Flink wrapper of the adapters and quality rules: one Kafka record in, routed rows out.

Routing (one pass, no second Python operator per record):

- main output, VALID events only: ``(key, (event_time_ms, None, split, bronze tuple))``,
  typed so the Java ``EventTimeGate`` can read the event time; ``key`` is the order id (the event id for
  order-less behaviour events, which touch no order state);
- ``bronze``: every standardised event, whatever its quality;
- ``review``: SUSPICIOUS events (kept out of silver and out of the watermark: a clock 3 days ahead
  must not make the whole stream late);
- ``quarantine``: adapter rejects and INVALID events, byte-exact, with the reason.

The three tables are written by this operator itself (``udfs.delta_sink.TableWriters``, driven by the
checkpoint markers of a ``CheckpointEpochOperator`` in front of it), not by separate sink operators:
shipping every bronze row back to the JVM and into another Python worker was one of the costliest
hops of the job. Counts per quality tag are Flink metrics (group ``lakestream``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

from pyflink.common import Row, Types
from pyflink.datastream import ProcessFunction, RuntimeContext

from lakestream.adapters import AdapterSettings, get_adapter
from lakestream.quality import QualityRules, classify
from lakestream.standard import Rejected
from udfs.checkpoint_markers import DATA
from udfs.delta_sink import DeltaSinkSpec, TableWriters
from udfs.ingest_rows import bronze_row, epoch_millis, invalid_row, quarantine_row

UTC = timezone.utc

#: Value row the gate reads and stamps: event time (epoch ms), late watermark (ms or null, set by the
#: gate), split (the source partition, ``topic#partition``: watermarks are tracked per partition), event.
VALUE_TYPE = Types.ROW_NAMED(
    ["event_time", "late_watermark", "split", "event"],
    [Types.LONG(), Types.LONG(), Types.STRING(), Types.PICKLED_BYTE_ARRAY()],
)
#: Main output: (key, value); the layout PyFlink's keyed operators expect after a key_by.
STANDARD_TYPE = Types.ROW_NAMED(["key", "value"], [Types.STRING(), VALUE_TYPE])

#: Names of the tables this operator writes, as keys of its ``tables`` argument.
BRONZE, REVIEW, QUARANTINE = "bronze", "review", "quarantine"


class StandardiseFunction(ProcessFunction):  # type: ignore[misc]
    """Adapter by topic, then ``quality.classify``; never raises on a record (see module docstring)."""

    def __init__(
        self,
        *,
        sources_by_topic: Mapping[str, str],
        adapter_settings: AdapterSettings,
        rules: QualityRules,
        tables: Mapping[str, DeltaSinkSpec],
    ) -> None:
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

    def open(self, runtime_context: RuntimeContext) -> None:
        """Resolve adapters once and register the quality counters."""
        self._adapters = {topic: get_adapter(src) for topic, src in self.sources_by_topic.items()}
        group = runtime_context.get_metrics_group().add_group("lakestream")
        self._counters = {
            "VALID": group.counter("events_valid"),
            "SUSPICIOUS": group.counter("events_suspicious"),
            "INVALID": group.counter("events_invalid"),
        }
        self._rejected = group.counter("records_rejected")
        self.tables.register_metrics(runtime_context)

    def close(self) -> None:
        """Release the table writers (staged files stay for the next OPEN)."""
        self.tables.close()

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[Any]:
        """A checkpoint marker for the table writers, or one Kafka record to adapt, classify and route."""
        if value[0] != DATA:
            self.tables.on_marker(value)
            return
        yield from self._route(value[5])

    def _route(self, value: Any) -> Iterator[Any]:
        """Kafka row (topic, partition, offset, timestamp, key, value) -> tables and the main output."""
        tables = self.tables
        topic, partition, offset, payload = value[0], value[1], value[2], value[5]
        now = datetime.now(UTC)
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
            self._rejected.inc()
            tables.add(QUARANTINE, quarantine_row(result, now))
            return
        event = result
        self._counters[event.quality].inc()
        row = bronze_row(event, now)
        tables.add(BRONZE, row)
        if event.quality == "VALID":
            key = event.order_id if event.order_id is not None else event.event_id
            yield Row(key, Row(epoch_millis(event.event_time), None, f"{topic}#{partition}", row))
        elif event.quality == "SUSPICIOUS":
            tables.add(REVIEW, row)
        else:
            tables.add(QUARANTINE, invalid_row(event, now))
