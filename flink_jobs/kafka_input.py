"""The Kafka source of every lakestream job: raw bytes plus Kafka coordinates, never a parse failure.

Records come out as Rows ``(topic, partition, offset, timestamp, key, value)`` built on the JVM by
``io.lakestream.flink.KafkaRecordToRow``, so binary garbage reaches the adapters (and quarantine)
instead of failing inside a deserializer, and bronze keeps full lineage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.datastream import DataStream, StreamExecutionEnvironment

StartingOffsets = Literal["committed", "earliest", "latest"]

#: Field names of the rows this source produces (the Java class declares the same).
KAFKA_ROW_FIELDS = ("topic", "partition", "offset", "timestamp", "key", "value")


def kafka_records(
    env: StreamExecutionEnvironment,
    *,
    bootstrap_servers: str,
    topics: Sequence[str],
    group_id: str,
    starting_offsets: StartingOffsets = "committed",
    bounded: bool = False,
    name: str = "kafka-source",
    uid: str = "kafka-source",
) -> DataStream:
    """A Kafka source over ``topics``.

    ``bounded`` stops at the offsets present when the job starts (the ``--bounded`` run).
    ``committed`` resumes from the consumer group's committed offsets and falls back to the earliest
    offset for partitions the group never committed. Offsets are committed on checkpoints, so they
    are progress information only: exactly-once comes from Flink's checkpointed source state.
    """
    from pyflink.common import WatermarkStrategy
    from pyflink.datastream.connectors.kafka import (
        KafkaOffsetResetStrategy,
        KafkaOffsetsInitializer,
        KafkaSource,
    )
    from pyflink.java_gateway import get_gateway

    if not topics:
        raise ValueError("topics: at least one Kafka topic is needed; set [kafka.topics] in the config")
    starting = {
        "committed": KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.EARLIEST),
        "earliest": KafkaOffsetsInitializer.earliest(),
        "latest": KafkaOffsetsInitializer.latest(),
    }[starting_offsets]
    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(bootstrap_servers)
        .set_topics(*topics)
        .set_group_id(group_id)
        .set_starting_offsets(starting)
        .set_property("commit.offsets.on.checkpoint", "true")
        .set_property("partition.discovery.interval.ms", "0" if bounded else "30000")
        .set_property("client.id.prefix", group_id)
    )
    if bounded:
        builder = builder.set_bounded(KafkaOffsetsInitializer.latest())
    # PyFlink only offers value-only deserializers; set ours on the Java builder directly.
    builder._j_builder.setDeserializer(get_gateway().jvm.io.lakestream.flink.KafkaRecordToRow())
    source = builder.build()
    # Watermarks are assigned after the adapters, where event time is known.
    stream = env.from_source(source, WatermarkStrategy.no_watermarks(), name)
    return stream.uid(uid)
