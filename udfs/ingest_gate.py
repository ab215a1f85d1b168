"""Python faces of the Java operators between standardise and resolve: the event-time gate, the de-dup.

``EventTimeGate`` decides lateness per Kafka partition in arrival order, chained after standardise at
the job's parallelism; ``KeyedDedupEpochOperator`` remembers event ids in Flink keyed state (TTL,
checkpointed, redistributed by key group) and emits the checkpoint markers of the resolve operator.
Both are in Java because they keep checkpointed state per record, which Python functions cannot do
cheaply (DESIGN.md section 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.datastream import DataStream


def _millis(td: timedelta) -> int:
    return int(td.total_seconds() * 1000)


def event_time_gate(
    stream: DataStream,
    *,
    max_out_of_orderness: timedelta,
    idleness_timeout: timedelta,
    name: str,
    uid: str,
    seeds: Mapping[str, int] | None = None,
) -> DataStream:
    """Run ``stream`` (``ingest_standardise.BATCH_TYPE`` rows) through the gate, chained, same parallelism.

    Header rows are consumed; part rows come out with their late watermarks filled in. ``seeds`` (split
    id ``topic#partition`` -> newest VALID event time, epoch ms) start the splits of a job that starts
    without state where an earlier run ended; a restore ignores them.
    """
    from pyflink.datastream import DataStream
    from pyflink.java_gateway import get_gateway

    if max_out_of_orderness < timedelta(0):
        raise ValueError(f"event_time.max_out_of_orderness: must not be negative, got {max_out_of_orderness}")
    jvm = get_gateway().jvm
    j_seeds = jvm.java.util.HashMap()
    for split, newest in sorted((seeds or {}).items()):
        j_seeds.put(split, jvm.java.lang.Long.valueOf(int(newest)))
    operator = jvm.io.lakestream.flink.ingest.EventTimeGate(
        _millis(max_out_of_orderness), max(0, _millis(idleness_timeout)), j_seeds
    )
    j_stream = stream._j_data_stream
    return DataStream(j_stream.transform(name, j_stream.getType(), operator).uid(uid))


def dedup_by_key(
    stream: DataStream,
    *,
    ttl: timedelta,
    batch_size: int,
    batch_time: timedelta,
    max_parallelism: int,
    name: str,
    uid: str,
) -> DataStream:
    """Key gated parts by bucket, drop re-deliveries within ``ttl``, re-batch, add checkpoint markers.

    The output is the marker stream of the resolve operator (forward, same parallelism), whose DATA
    payloads are ``ingest_rows.ResolveBatch`` rows.
    """
    from pyflink.datastream import DataStream
    from pyflink.java_gateway import get_gateway

    if ttl <= timedelta(0):
        raise ValueError(f"event_time.dedup_ttl: must be positive, got {ttl}")
    jvm = get_gateway().jvm
    flink = jvm.io.lakestream.flink
    keyed = stream._j_data_stream.keyBy(flink.ingest.BucketKeySelector(max_parallelism))
    operator = flink.ingest.KeyedDedupEpochOperator(
        _millis(ttl), batch_size, max(1, _millis(batch_time)), max_parallelism
    )
    out_type = flink.ingest.KeyedDedupEpochOperator.markedResolveBatchType()
    return DataStream(keyed.transform(name, out_type, operator).uid(uid))
