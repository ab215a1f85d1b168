"""Python face of ``io.lakestream.flink.EventTimeGate``: watermarks and the late decision, in Java, at p=1.

In Java because "was this event behind the watermark when it arrived" is decided event by event in
arrival order, with state checkpointed in step with the source offsets, and Python functions get no
checkpoint hooks (DESIGN.md section 2).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.datastream import DataStream

_GATE_CLASS = "io.lakestream.flink.EventTimeGate"


def _millis(td: timedelta) -> int:
    return int(td.total_seconds() * 1000)


def event_time_gate(
    stream: DataStream,
    *,
    max_out_of_orderness: timedelta,
    idleness_timeout: timedelta,
    name: str,
    uid: str,
) -> DataStream:
    """Run ``stream`` (``ingest_standardise.BATCH_TYPE`` rows) through the gate at parallelism 1.

    The output has the same type, with each batch's late watermarks filled in.
    """
    from pyflink.datastream import DataStream
    from pyflink.java_gateway import get_gateway

    if max_out_of_orderness < timedelta(0):
        raise ValueError(f"event_time.max_out_of_orderness: must not be negative, got {max_out_of_orderness}")
    jvm = get_gateway().jvm
    operator = jvm.io.lakestream.flink.EventTimeGate(
        _millis(max_out_of_orderness), max(0, _millis(idleness_timeout))
    )
    j_stream = stream._j_data_stream
    return DataStream(j_stream.transform(name, j_stream.getType(), operator).uid(uid).setParallelism(1))
