"""Python side of the in-band checkpoint markers of ``io.lakestream.flink.epoch.CheckpointEpochOperator``.

PyFlink gives Python functions no checkpoint hooks; the Java operator chained right before a Python
sink turns Flink's checkpoint lifecycle into records that arrive in order with the data. Each record
is a Row ``(kind, checkpoint_id, subtask, parallelism, run_id, payload)``; ``Marker.of`` names its fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, NamedTuple

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.datastream import DataStream

DATA: Final = 0
OPEN: Final = 1
PRECOMMIT: Final = 2
COMMIT: Final = 3
END_OF_INPUT: Final = 4

KIND_NAMES: Final = {
    DATA: "DATA",
    OPEN: "OPEN",
    PRECOMMIT: "PRECOMMIT",
    COMMIT: "COMMIT",
    END_OF_INPUT: "END",
}

_OPERATOR_CLASS: Final = "io.lakestream.flink.epoch.CheckpointEpochOperator"


class Marker(NamedTuple):
    """One record of the marker stream, decoded: a checkpoint marker, or a DATA row with its payload.

    The subtask coordinates are set on markers only (DATA rows carry -1 and no run id). Decoding is one
    tuple per call: fine per marker or per batch; where DATA rows are single records, test
    ``value[KIND_FIELD] == DATA`` and read ``value[PAYLOAD_FIELD]`` instead.
    """

    kind: int
    #: PRECOMMIT/COMMIT: the checkpoint; OPEN: the restored checkpoint, -1 on a fresh start.
    checkpoint_id: int
    subtask: int
    parallelism: int
    run_id: str | None
    payload: Any

    @classmethod
    def of(cls, value: Any) -> Marker:
        """Decode a marker row (a PyFlink ``Row`` or any 6-sequence in the operator's field order)."""
        return cls._make(value)

    @property
    def restored_checkpoint_id(self) -> int | None:
        """OPEN: the checkpoint the job restored from, or None on a fresh start."""
        cid = self.checkpoint_id
        return cid if cid is not None and cid >= 0 else None


#: Field positions of a marker row, for per-record paths that do not decode every row.
KIND_FIELD: Final = Marker._fields.index("kind")
PAYLOAD_FIELD: Final = Marker._fields.index("payload")


def with_checkpoint_markers(
    stream: DataStream, *, name: str, uid: str, parallelism: int | None = None
) -> DataStream:
    """Chain the marker operator after ``stream`` (forward, same parallelism) and return its output.

    The downstream Python operator must keep the same parallelism and a forward connection, so that
    each sink subtask sees exactly the markers of its own upstream subtask. Pass ``parallelism`` when
    ``stream`` does not run at the job's default (e.g. after an operator pinned to 1).
    """
    from pyflink.datastream import DataStream
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    operator_cls = jvm.io.lakestream.flink.epoch.CheckpointEpochOperator
    j_stream = stream._j_data_stream
    out_type = operator_cls.outputType(j_stream.getType())
    j_out = j_stream.transform(name, out_type, operator_cls()).uid(uid)
    if parallelism is not None:
        j_out = j_out.setParallelism(parallelism)
    return DataStream(j_out)


def kafka_batches_with_markers(
    stream: DataStream, *, batch_size: int, batch_time_ms: int, name: str, uid: str
) -> DataStream:
    """Pack ``KafkaRecordToRow`` rows into per-partition batches, with checkpoint markers in between.

    ``io.lakestream.flink.kafka.KafkaBatchEpochOperator``: like ``with_checkpoint_markers`` (same marker rows,
    same forward/parallelism contract), but each DATA payload carries up to ``batch_size`` records of one
    Kafka partition, flushed at the latest every ``batch_time_ms`` and always before a checkpoint
    barrier, so one Java/Python crossing carries thousands of records.
    """
    from pyflink.datastream import DataStream
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    operator_cls = jvm.io.lakestream.flink.kafka.KafkaBatchEpochOperator
    j_stream = stream._j_data_stream
    operator = operator_cls(batch_size, batch_time_ms)
    j_out = j_stream.transform(name, operator_cls.markedBatchType(), operator).uid(uid)
    return DataStream(j_out)


def discard(stream: DataStream, *, name: str, uid: str, parallelism: int | None = None) -> None:
    """Terminate a stream whose operator already did its work (e.g. a Python sink's commit reports).

    Pass ``parallelism`` when ``stream`` does not run at the job's default, to keep the sink chained.
    """
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    sink = jvm.org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink()
    j_sink = stream._j_data_stream.sinkTo(sink).name(name).uid(uid)
    if parallelism is not None:
        j_sink.setParallelism(parallelism)
