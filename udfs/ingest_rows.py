"""Value tuples of the ingest job's tables, built straight from the pure semantic types.

Bronze tuples in schema column order (``sinks.flink.delta_sink``) become one Arrow batch per Kafka batch,
whose VALID rows go on as Arrow IPC (``pack_events``), so late and silver source rows are derived column-wise.
Free of Flink imports, so it is plain to test.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakestream.standard import (
    BRONZE_SCHEMA,
    EVENT_COLUMNS,
    LATE_SCHEMA,
    QUARANTINE_SCHEMA,
    Rejected,
    StandardEvent,
    reject_event,
)
from lakestream.time import EPOCH

_MILLI = timedelta(milliseconds=1)
_event_values = attrgetter(*EVENT_COLUMNS)

BronzeRow = tuple[Any, ...]

# The tuple layouts below follow these schemas; fail at import if a schema changes under us.
assert BRONZE_SCHEMA.names == [*EVENT_COLUMNS, "ingest_time"]
assert LATE_SCHEMA.names == [*EVENT_COLUMNS, "ingest_time", "watermark"]
assert QUARANTINE_SCHEMA.names == [
    "raw",
    "source",
    "reason",
    "stage",
    "topic",
    "partition",
    "offset",
    "ingest_time",
]


class KafkaBatch(NamedTuple):
    """One DATA payload of ``KafkaBatchEpochOperator``: up to ``batch_size`` records of one partition.

    Keys and values are concatenated; a length of -1 is a null.
    """

    topic: str
    partition: int
    offsets: list[int]
    timestamps: list[int]
    key_lengths: list[int]
    keys: bytes | None
    value_lengths: list[int]
    values: bytes | None

    def records(self) -> Iterator[tuple[str, int, int, bytes | None]]:
        """``(topic, partition, offset, value bytes | None)`` of each record, in Kafka order."""
        topic, partition = self.topic, self.partition
        values = bytes(self.values or b"")  # slicing bytes copies once; a memoryview slice then bytes() twice
        pos = 0
        for offset, n in zip(self.offsets, self.value_lengths, strict=True):
            if n < 0:
                yield topic, partition, offset, None
            else:
                yield topic, partition, offset, values[pos : pos + n]
                pos += n


class BatchPart(NamedTuple):
    """One row of ``ingest_standardise.BATCH_TYPE``: a batch's header, or its events for one subtask.

    Per Kafka batch with VALID events, standardise emits the header first (``part == HEADER``: the
    events' times in Kafka order, for the ``EventTimeGate``), then one part per subtask that owns some
    of the events (``lakestream.keys``). ``late_watermarks`` is filled in by the gate: per event the
    partition's watermark when it was late, else ``NOT_LATE``.

    The speed layer's columns (null without it, and in headers): per event its gold kind, amount in
    fen, order id and user id (``udfs.ingest_gold.gold_columns``), and ``arrival_watermarks``, which the
    gate fills in: the partition's watermark when the event arrived, late or not.
    """

    split: str
    part: int
    event_times: list[int]
    positions: list[int]
    buckets: list[int]
    id_hi: list[int]
    id_lo: list[int]
    late_watermarks: list[int] | None
    events: bytes | None
    gold_kinds: bytes | None = None
    gold_amounts: list[int] | None = None
    gold_order_ids: list[str | None] | None = None
    gold_user_ids: list[str | None] | None = None
    arrival_watermarks: list[int] | None = None


#: ``BatchPart.part`` of a batch's header row.
HEADER = -1


class ResolveBatch(NamedTuple):
    """DATA payload of ``KeyedDedupEpochOperator``: parts after de-dup, re-batched for the resolve operator.

    ``late_watermarks`` and ``fresh`` (False: a re-delivery within the de-dup TTL) run over the events
    of all ``events`` blobs in order.
    """

    events: list[bytes]
    late_watermarks: list[int]
    fresh: list[bool]
    event_count: int


#: Late watermark of an on-time event (``io.lakestream.flink.ingest.EventTimeGate.NOT_LATE``).
NOT_LATE = -(2**63)


def epoch_millis(ts: datetime) -> int:
    """Epoch milliseconds, floored (exact integer arithmetic: no float rounding near the boundary)."""
    return (ts - EPOCH) // _MILLI


def event_millis(events: pa.RecordBatch) -> np.ndarray[Any, np.dtype[np.int64]]:
    """``epoch_millis`` of every ``event_time`` of a bronze batch without nulls, at once."""
    micros = pc.cast(events.column("event_time"), pa.int64()).to_numpy(zero_copy_only=False)
    millis: np.ndarray[Any, np.dtype[np.int64]] = np.floor_divide(micros, 1000)  # floors like epoch_millis
    return millis


def string_list(column: pa.Array | pa.ChunkedArray) -> list[str | None]:
    """A string column as a list (None for nulls), as ``to_pylist`` gives it at about a twentieth of its
    cost: through numpy's object array rather than one Arrow scalar per value."""
    values: list[str | None] = column.to_numpy(zero_copy_only=False).tolist()
    return values


def from_epoch_millis(ms: int) -> datetime:
    """UTC datetime of epoch milliseconds."""
    return EPOCH + timedelta(milliseconds=ms)


def bronze_row(event: StandardEvent, ingest_time: datetime) -> BronzeRow:
    """``BRONZE_SCHEMA`` tuple (also the review table's row and the event's form on the wire)."""
    return (*_event_values(event), ingest_time)


def quarantine_row(rejected: Rejected, ingest_time: datetime) -> tuple[Any, ...]:
    """``QUARANTINE_SCHEMA`` tuple of an adapter reject."""
    r = rejected
    return (r.raw, r.source, r.reason, r.stage, r.topic, r.partition, r.offset, ingest_time)


def invalid_row(event: StandardEvent, ingest_time: datetime) -> tuple[Any, ...]:
    """``QUARANTINE_SCHEMA`` tuple of an event the quality rules tagged INVALID."""
    return quarantine_row(reject_event(event), ingest_time)


def pack_events(batch: pa.RecordBatch) -> bytes:
    """A ``BRONZE_SCHEMA`` batch as Arrow IPC bytes (the schema is known on both ends).

    IPC is a copy, where pickling the bronze tuples (datetimes with time zones, Decimals) costs about 15%
    of the standardise worker's time and as much again to unpickle in the resolve worker.
    """
    return bytes(batch.serialize().to_pybytes())


def unpack_events(blob: bytes) -> pa.RecordBatch:
    """Inverse of ``pack_events``."""
    return pa.ipc.read_record_batch(pa.py_buffer(blob), BRONZE_SCHEMA)
