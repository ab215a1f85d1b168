"""Python face of ``io.lakestream.flink.EventTimeGate``: watermarks and the late decision, in Java, at p=1.

The gate is a Java operator because the decision "was this event behind the watermark when it arrived"
must be made in arrival order, record by record, and a Python operator only sees its watermark advance
between bundles. Its output is keyed here with the plain Java ``KeyByKeySelector`` on the key field the
standardiser already wrote, so no extra Python operator runs at parallelism 1 (PyFlink's ``key_by``
would add one to compute the key).

``side_output`` exists for the same reason: PyFlink's ``get_side_output`` appends an identity Python map
(one more Python round trip per record, and an operator without a stable uid).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.common.typeinfo import TypeInformation
    from pyflink.datastream import DataStream, KeyedStream, OutputTag

_GATE_CLASS = "io.lakestream.flink.EventTimeGate"


def _millis(td: timedelta) -> int:
    return int(td.total_seconds() * 1000)


def gate_and_key(
    stream: DataStream,
    *,
    value_type: TypeInformation,
    max_out_of_orderness: timedelta,
    idleness_timeout: timedelta,
    name: str,
    uid: str,
) -> tuple[DataStream, KeyedStream]:
    """Run ``stream`` ((key, value) rows) through the gate at parallelism 1; return it and it keyed by key.

    ``value_type`` is the type of the value field (what the keyed function receives).
    """
    from pyflink.common import Types
    from pyflink.datastream import DataStream, KeyedStream
    from pyflink.java_gateway import get_gateway

    if max_out_of_orderness < timedelta(0):
        raise ValueError(f"event_time.max_out_of_orderness: must not be negative, got {max_out_of_orderness}")
    jvm = get_gateway().jvm
    operator = jvm.io.lakestream.flink.EventTimeGate(
        _millis(max_out_of_orderness), max(0, _millis(idleness_timeout))
    )
    j_stream = stream._j_data_stream
    j_gated = j_stream.transform(name, j_stream.getType(), operator).uid(uid).setParallelism(1)
    gated = DataStream(j_gated)
    j_keyed = j_gated.keyBy(jvm.KeyByKeySelector(), Types.ROW([Types.STRING()]).get_java_type_info())
    return gated, KeyedStream(j_keyed, value_type, gated)


def side_output(stream: DataStream, tag: OutputTag) -> DataStream:
    """The side output ``tag`` of a Python operator, as the plain Java side-output stream (no operator)."""
    from pyflink.datastream import DataStream

    return DataStream(stream._j_data_stream.getSideOutput(tag.get_java_output_tag()))
