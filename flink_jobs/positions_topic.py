"""The change feed's Kafka position record: a compacted topic written in the same transaction as the events.

The change feed's Kafka writer sends its change events to the output topic and, after each poll's
events, the Delta source's new position to a positions topic (key: the feed's app prefix), through one
transactional producer: a read_committed consumer sees a position exactly when it sees every change
before it, so the newest committed position is exact (DESIGN.md section 9). The next run reads it here;
the record's value is ``sinks.change_events.position_value``.
"""

from __future__ import annotations

import time
from typing import Any


def default_positions_topic(topic: str) -> str:
    """The positions topic of output topic ``topic`` unless ``--positions-topic`` names another."""
    return f"{topic}.lakestream-positions"


def ensure_positions_topic(bootstrap_servers: str, topic: str, *, timeout: float = 30) -> None:
    """Create the positions topic unless it exists: one partition, compacted (the newest record per key
    is all that is ever read), the broker's default replication."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap_servers,
        client_id="lakestream-positions",
        request_timeout_ms=int(timeout * 1000),
    )
    try:
        if topic in admin.list_topics():
            return
        spec = {
            "num_partitions": 1,
            "replication_factor": -1,
            "configs": {"cleanup.policy": "compact", "segment.ms": str(6 * 3600 * 1000)},
        }
        try:
            admin.create_topics({topic: spec})
        except TopicAlreadyExistsError:
            pass
        admin.wait_for_topics([topic], timeout_ms=int(timeout * 1000))
    finally:
        admin.close()


def read_position(bootstrap_servers: str, topic: str, key: str, *, timeout: float = 60) -> str | None:
    """The value of the newest committed record with ``key`` in ``topic`` (None: no such record or topic).

    Reads backwards from each partition's last stable offset in growing windows, with
    ``isolation.level=read_committed``: records of aborted or open transactions are never seen.
    """
    from kafka import KafkaConsumer, TopicPartition

    from lakestream.progress import ResumeError

    consumer: Any = KafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        isolation_level="read_committed",
        enable_auto_commit=False,
        allow_auto_create_topics=False,  # a missing positions topic is created compacted, not by a read
        request_timeout_ms=int(timeout * 1000),
    )
    deadline = time.monotonic() + timeout
    wanted = key.encode("utf-8")
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            return None
        newest: tuple[int, bytes] | None = None
        for partition in sorted(partitions):
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            first = int(consumer.beginning_offsets([tp])[tp])
            high = int(consumer.end_offsets([tp])[tp])  # the last stable offset (read_committed)
            window = 256
            while high > first:
                low = max(first, high - window)
                consumer.seek(tp, low)
                found: tuple[int, bytes] | None = None
                while consumer.position(tp) < high:
                    if time.monotonic() > deadline:
                        raise ResumeError(
                            f"could not read the positions topic {topic!r} within {timeout:.0f} s "
                            f"(at offset {consumer.position(tp)} of {high} in partition {partition})"
                        )
                    for records in consumer.poll(timeout_ms=500).values():
                        for r in records:
                            if r.offset < high and r.key == wanted and r.value is not None:
                                found = (r.offset, r.value)
                if found is not None:
                    if newest is None or found[0] > newest[0]:
                        newest = found
                    break
                high, window = low, window * 4
        return None if newest is None else newest[1].decode("utf-8")
    finally:
        consumer.close()
