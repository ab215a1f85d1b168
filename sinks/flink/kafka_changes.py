"""The change feed's Kafka sink: the Delta source's rows as change events, through Flink's ``KafkaSink``.

Exactly once by default: one transactional writer (EXACTLY_ONCE, a transactional id prefix; consumers
read with ``isolation.level=read_committed``) sends each poll's change events and then the source's
position record in the same transaction, so a position is visible exactly when the changes before it
are. At least once: no transactions, duplicates possible after a failure. The events have no key and one
writer, so a one-partition topic keeps the table's commit order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lakestream.progress import Progress
from sinks.change_events import change_event_json, position_value


class _ToKafkaRecord:
    """Picklable row -> ``(topic, key, value)`` mapper: a change event for the output topic, or, for a
    ``Progress``, the source's position for the positions topic (key: the feed's app prefix)."""

    def __init__(self, names: Sequence[str], topic: str, positions_topic: str, position_key: str) -> None:
        self.names = tuple(names)
        self.topic = topic
        self.positions_topic = positions_topic
        self.position_key = position_key

    def __call__(self, row: Any) -> Any:
        from pyflink.common import Row

        if type(row) is Progress:
            return Row(self.positions_topic, self.position_key, position_value(row.values))
        return Row(self.topic, None, change_event_json(self.names, row))


def kafka_change_sink(
    rows: Any,
    *,
    names: Sequence[str],
    topic: str,
    positions_topic: str,
    position_key: str,
    bootstrap_servers: str,
    exactly_once: bool,
    transactional_id_prefix: str,
    uid: str,
) -> None:
    """Write the Delta source's rows (with ``Progress`` records) as JSON change events to ``topic``.

    One writer (keeps the commit order); each ``Progress`` becomes a position record in
    ``positions_topic`` in the same transaction as the events before it. Operator uids: ``<uid>-json``,
    ``<uid>``.
    """
    from pyflink.common import Types
    from pyflink.datastream.connectors.kafka import DeliveryGuarantee, KafkaSink
    from pyflink.java_gateway import get_gateway

    record_type = Types.ROW_NAMED(["topic", "key", "value"], [Types.STRING(), Types.STRING(), Types.STRING()])
    events = (
        rows.map(_ToKafkaRecord(names, topic, positions_topic, position_key), output_type=record_type)
        .name("to JSON change event")
        .uid(f"{uid}-json")
    )
    events = events.set_parallelism(1)
    builder = KafkaSink.builder().set_bootstrap_servers(bootstrap_servers)
    # The topic (and key) travel with each record: PyFlink's builder offers a fixed topic only.
    builder._j_builder.setRecordSerializer(get_gateway().jvm.io.lakestream.flink.kafka.RoutedKafkaRecords())
    if exactly_once:
        builder = (
            builder.set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
            .set_transactional_id_prefix(transactional_id_prefix)
            # Within the broker default cap (transaction.max.timeout.ms = 15 min).
            .set_property("transaction.timeout.ms", "900000")
        )
    else:
        builder = builder.set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE)
    # One writer keeps the commit order of the (keyless) events.
    events.sink_to(builder.build()).name(f"kafka {topic}").uid(uid).set_parallelism(1)
