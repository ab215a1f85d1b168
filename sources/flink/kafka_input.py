"""The Kafka source of every lakestream job: raw bytes plus Kafka coordinates, never a parse failure.

Records come out as Rows ``(topic, partition, offset, timestamp, key, value)`` built on the JVM by
``io.lakestream.flink.kafka.KafkaRecordToRow``, so binary garbage reaches the adapters (and quarantine)
instead of failing inside a deserializer, and bronze keeps full lineage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from lakestream.config import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.datastream import DataStream, StreamExecutionEnvironment

StartingOffsets = Literal["committed", "earliest", "latest"]
#: (topic, partition) -> offset of the next record to read.
EndOffsets = dict[tuple[str, int], int]

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
    end_offsets: EndOffsets | None = None,
    start_offsets: EndOffsets | None = None,
    consumer_properties: Mapping[str, str] | None = None,
    name: str = "kafka-source",
    uid: str = "kafka-source",
) -> DataStream:
    """A Kafka source over ``topics``.

    ``start_offsets`` (partition -> first offset to read) overrides ``starting_offsets`` for the
    partitions it names: where a run that continues an earlier one starts (see
    :func:`resolve_start_offsets`); partitions found later start by ``starting_offsets``.

    ``consumer_properties`` are extra consumer and ``source.reader.*`` properties (``kafka.consumer``;
    ``lakestream.config`` refuses the ones set here).

    ``bounded`` stops at ``end_offsets`` (see :func:`snapshot_end_offsets`), or at the latest offsets
    the source sees when it starts if none are given (the ``--bounded`` run).
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
    if start_offsets:
        from pyflink.datastream.connectors.kafka import KafkaTopicPartition

        latest = starting_offsets == "latest"
        reset = KafkaOffsetResetStrategy.LATEST if latest else KafkaOffsetResetStrategy.EARLIEST
        starting = KafkaOffsetsInitializer.offsets(
            {KafkaTopicPartition(t, p): o for (t, p), o in sorted(start_offsets.items())}, reset
        )
    builder = (
        KafkaSource.builder()
        .set_bootstrap_servers(bootstrap_servers)
        .set_topics(*topics)
        .set_group_id(group_id)
        .set_starting_offsets(starting)
    )
    for key, value in sorted((consumer_properties or {}).items()):
        builder = builder.set_property(key, value)
    builder = (
        builder.set_property("commit.offsets.on.checkpoint", "true")
        .set_property("partition.discovery.interval.ms", "0" if bounded else "30000")
        .set_property("client.id.prefix", group_id)
    )
    if bounded and end_offsets is not None:
        from pyflink.datastream.connectors.kafka import KafkaTopicPartition

        stops = {KafkaTopicPartition(t, p): o for (t, p), o in end_offsets.items()}
        builder = builder.set_bounded(KafkaOffsetsInitializer.offsets(stops))
    elif bounded:
        builder = builder.set_bounded(KafkaOffsetsInitializer.latest())
    # PyFlink only offers value-only deserializers; set ours on the Java builder directly.
    jvm = get_gateway().jvm
    builder._j_builder.setDeserializer(jvm.io.lakestream.flink.kafka.KafkaRecordToRow())
    source = builder.build()
    if bounded:
        # Flink's bounded Kafka source never finishes once restored from a checkpoint (FLINK-31006);
        # the wrapper signals the end its restored enumerator forgets. Same state, same uid.
        from pyflink.datastream.connectors import Source

        source = Source(jvm.io.lakestream.flink.kafka.BoundedKafkaSource(source.get_java_function()))
    # Watermarks are assigned after the adapters, where event time is known.
    stream = env.from_source(source, WatermarkStrategy.no_watermarks(), name)
    return stream.uid(uid)


def snapshot_end_offsets(
    bootstrap_servers: str, topics: Sequence[str], *, timeout: float = 30, missing_ok: bool = False
) -> EndOffsets:
    """The current end offset of every partition of ``topics``: where a bounded run stops.

    Taken by the client before the job starts, so the run's extent is known exactly and can be
    committed to the consumer group once the job has finished (see :func:`commit_group_offsets`).
    A topic that does not exist fails here, with its name, rather than as an empty run; with
    ``missing_ok`` (an unbounded run, which reads a topic once it appears) it is left out.
    """
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    unreachable = f"kafka.bootstrap_servers {bootstrap_servers}: no broker answered within {timeout:g} s"
    fix = (
        "start it (`lakestream kafka start` for the local one) or set kafka.bootstrap_servers "
        "(LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS, --bootstrap-servers) to a reachable broker"
    )
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap_servers,
            request_timeout_ms=int(timeout * 1000),
            bootstrap_timeout_ms=int(timeout * 1000),
        )
    except KafkaError as exc:
        raise ConfigError(f"{unreachable} ({type(exc).__name__}); {fix}") from None
    try:
        return _end_offsets(consumer, bootstrap_servers, topics, missing_ok=missing_ok)
    except KafkaError as exc:
        raise ConfigError(f"{unreachable} ({type(exc).__name__}: {exc}); {fix}") from None
    finally:
        consumer.close()


def _end_offsets(
    consumer: Any, bootstrap_servers: str, topics: Sequence[str], *, missing_ok: bool
) -> EndOffsets:
    """The end offsets of ``topics`` as :func:`snapshot_end_offsets` describes them."""
    from kafka import TopicPartition

    partitions: list[TopicPartition] = []
    for topic in topics:
        ids = consumer.partitions_for_topic(topic)
        if not ids and missing_ok:
            continue
        if not ids:
            raise ConfigError(
                f"kafka topic {topic!r} does not exist on {bootstrap_servers}; "
                "create it or fix [kafka.topics] / --topic"
            )
        partitions += [TopicPartition(topic, p) for p in sorted(ids)]
    ends = consumer.end_offsets(partitions)
    return {(tp.topic, tp.partition): int(off) for tp, off in ends.items()}


def commit_group_offsets(bootstrap_servers: str, group_id: str, offsets: EndOffsets) -> None:
    """Record a finished bounded run's end offsets as the group's committed offsets.

    Flink commits source offsets only on checkpoints, and a bounded run may end before its last
    records are covered by one; without this, the next ``committed`` run would read them again.
    Called only after the job finished, i.e. after its sinks' END_OF_INPUT commits.
    """
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=group_id, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()})
    finally:
        consumer.close()


def split_name(topic: str, partition: int) -> str:
    """A partition as ``topic#partition`` (the gate's split id; the key of offsets in lineage files)."""
    return f"{topic}#{partition}"


def parse_split(name: str) -> tuple[str, int]:
    """The (topic, partition) of a :func:`split_name`."""
    topic, _, partition = name.rpartition("#")
    return topic, int(partition)


def resolve_start_offsets(
    bootstrap_servers: str,
    group_id: str,
    partitions: Sequence[tuple[str, int]],
    recorded: Mapping[tuple[str, int], int],
    fallback: StartingOffsets,
    *,
    timeout: float = 30,
) -> tuple[EndOffsets, list[str]]:
    """The first offset of every partition for a run that starts a new lineage, and notes for the user.

    A partition the output recorded progress for starts there (exactly where the committed rows end);
    the others start by ``fallback``: the consumer group's committed offset (else the earliest), the
    earliest or the latest offset. A recorded offset below the partition's first one means retention
    deleted records this job never read (noted, and the run starts at the first one); one beyond the
    partition's end means the topic is not the one the position was recorded on: that fails.
    """
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        enable_auto_commit=False,
        request_timeout_ms=int(timeout * 1000),
    )
    try:
        tps = [TopicPartition(t, p) for t, p in partitions]
        firsts = consumer.beginning_offsets(tps)
        ends = consumer.end_offsets(tps)
        out: EndOffsets = {}
        notes: list[str] = []
        for tp in tps:
            key = (tp.topic, tp.partition)
            first, end = int(firsts[tp]), int(ends[tp])
            if key in recorded:
                offset = recorded[key]
                if offset > end:
                    from lakestream.progress import ResumeError

                    raise ResumeError(
                        f"kafka topic {tp.topic!r} partition {tp.partition} ends at offset {end}, but the "
                        f"output recorded offset {offset} as read: the topic was deleted and re-created "
                        "(or this is another cluster); start over with --fresh"
                    )
                if offset < first:
                    notes.append(
                        f"{split_name(*key)}: offsets {offset}..{first - 1} were deleted by retention before "
                        f"this job read them; starting at {first}"
                    )
                    offset = first
            elif fallback == "committed":
                committed = consumer.committed(tp)
                offset = first if committed is None else min(max(int(committed), first), end)
            elif fallback == "earliest":
                offset = first
            else:
                offset = end
            out[key] = offset
        return out, notes
    finally:
        consumer.close()
