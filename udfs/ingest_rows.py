"""Value tuples of the ingest job's tables, built straight from the pure semantic types.

The Delta sink takes plain tuples in schema column order (``udfs.delta_sink``), and the cheapest thing
to move between Flink operators is a pickled tuple, so the bronze tuple is also the event's wire form:
bronze, review and late rows all start with it, and the resolving operator rebuilds the
``StandardEvent`` from its first columns. Kept free of Flink imports so it is plain to test.
"""

from __future__ import annotations

import pickle
from datetime import datetime, timedelta, timezone
from operator import attrgetter
from typing import Any

from lakestream.resolution import OrderState, state_to_row
from lakestream.silver import SILVER_COLUMNS
from lakestream.standard import (
    BRONZE_SCHEMA,
    EVENT_COLUMNS,
    LATE_SCHEMA,
    QUARANTINE_SCHEMA,
    Rejected,
    StandardEvent,
    reject_event,
)

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLI = timedelta(milliseconds=1)
_N_EVENT = len(EVENT_COLUMNS)
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


def epoch_millis(ts: datetime) -> int:
    """Epoch milliseconds, floored (exact integer arithmetic: no float rounding near the boundary)."""
    return (ts - EPOCH) // _MILLI


def from_epoch_millis(ms: int) -> datetime:
    """UTC datetime of epoch milliseconds."""
    return EPOCH + timedelta(milliseconds=ms)


def bronze_row(event: StandardEvent, ingest_time: datetime) -> BronzeRow:
    """``BRONZE_SCHEMA`` tuple (also the review table's row and the event's form on the wire)."""
    return (*_event_values(event), ingest_time)


def event_of(row: BronzeRow) -> StandardEvent:
    """The event a bronze (or late) tuple carries."""
    return StandardEvent(*row[:_N_EVENT])


def late_row(row: BronzeRow, watermark: datetime) -> tuple[Any, ...]:
    """``LATE_SCHEMA`` tuple: the bronze tuple plus the watermark the event arrived behind."""
    return (*row, watermark)


def quarantine_row(rejected: Rejected, ingest_time: datetime) -> tuple[Any, ...]:
    """``QUARANTINE_SCHEMA`` tuple of an adapter reject."""
    r = rejected
    return (r.raw, r.source, r.reason, r.stage, r.topic, r.partition, r.offset, ingest_time)


def invalid_row(event: StandardEvent, ingest_time: datetime) -> tuple[Any, ...]:
    """``QUARANTINE_SCHEMA`` tuple of an event the quality rules tagged INVALID."""
    return quarantine_row(reject_event(event), ingest_time)


def silver_row(state: OrderState) -> tuple[Any, ...]:
    """``SILVER_SCHEMA`` tuple of an order's resolved state."""
    row = state_to_row(state)
    return tuple(row[c] for c in SILVER_COLUMNS)


def pack_events(rows: list[Any]) -> bytes:
    """The C pickler on plain tuples: PyFlink's ``PICKLED_BYTE_ARRAY`` goes through cloudpickle, whose
    pure-Python reducer hooks took about a tenth of the standardise worker's time in a profile."""
    return pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)


def unpack_events(blob: bytes) -> list[Any]:
    """Inverse of ``pack_events`` (the bytes only ever come from our own operator upstream)."""
    rows: list[Any] = pickle.loads(blob)  # noqa: S301 - produced by pack_events in this job
    return rows
