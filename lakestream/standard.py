"""The one event shape every source is adapted to, and the Arrow layouts of the tables built from it.

Every later stage speaks only this shape, so units, clocks and ids are settled once, in the adapters
(DESIGN.md section 5). The batch builders go column-wise from the dataclasses to Arrow arrays: a
micro-batch of thousands of events becomes one ``RecordBatch`` without per-row dicts or pandas.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Literal

import pyarrow as pa

Op = Literal["c", "u", "d"]
Quality = Literal["VALID", "SUSPICIOUS", "INVALID"]
RejectStage = Literal["adapter", "quality"]

#: Event types the resolution rules know; behaviour events are ``behaviour:<client event name>``.
ORDER_CREATED = "order_created"
ORDER_UPDATED = "order_updated"
ORDER_DELETED = "order_deleted"
PAYMENT = "payment"
LOGISTICS = "logistics"
BEHAVIOUR_PREFIX = "behaviour:"

OP_EVENT_TYPES: Mapping[str, str] = {"c": ORDER_CREATED, "u": ORDER_UPDATED, "d": ORDER_DELETED}

UTC = timezone.utc


@dataclass(frozen=True, slots=True)
class StandardEvent:
    """One source record in the project's units: yuan amounts, UTC microsecond times, source-prefixed ids.

    ``raw`` and the Kafka coordinates travel with the event so bronze can always be traced back to (and
    re-adapted from) the exact bytes that arrived.
    """

    event_id: str
    order_id: str | None
    user_id: str | None
    event_type: str
    event_time: datetime
    amount: Decimal | None
    status: str | None
    address: str | None
    logistics_state: str | None
    op: Op | None
    source: str
    raw: bytes
    topic: str
    partition: int
    offset: int
    quality: Quality = "VALID"
    quality_reason: str | None = None

    def __init__(
        self,
        event_id: str,
        order_id: str | None,
        user_id: str | None,
        event_type: str,
        event_time: datetime,
        amount: Decimal | None,
        status: str | None,
        address: str | None,
        logistics_state: str | None,
        op: Op | None,
        source: str,
        raw: bytes,
        topic: str,
        partition: int,
        offset: int,
        quality: Quality = "VALID",
        quality_reason: str | None = None,
    ) -> None:
        """The dataclass ``__init__`` (same parameters), storing through the slot descriptors.

        Written out because it runs once or twice per Kafka record: the generated frozen ``__init__``
        calls ``object.__setattr__`` by name per field, twice as slow as the descriptors' setters.
        ``tests/unit/test_adapter_fast_paths.py`` checks it against the fields.
        """
        _set_event_id(self, event_id)
        _set_order_id(self, order_id)
        _set_user_id(self, user_id)
        _set_event_type(self, event_type)
        _set_event_time(self, event_time)
        _set_amount(self, amount)
        _set_status(self, status)
        _set_address(self, address)
        _set_logistics_state(self, logistics_state)
        _set_op(self, op)
        _set_source(self, source)
        _set_raw(self, raw)
        _set_topic(self, topic)
        _set_partition(self, partition)
        _set_offset(self, offset)
        _set_quality(self, quality)
        _set_quality_reason(self, quality_reason)


_Setter = Callable[[StandardEvent, Any], None]


def _setter(name: str) -> _Setter:
    """The ``__set__`` of a field's slot descriptor: stores without the frozen ``__setattr__``."""
    setter: _Setter = StandardEvent.__dict__[name].__set__
    return setter


_set_event_id = _setter("event_id")
_set_order_id = _setter("order_id")
_set_user_id = _setter("user_id")
_set_event_type = _setter("event_type")
_set_event_time = _setter("event_time")
_set_amount = _setter("amount")
_set_status = _setter("status")
_set_address = _setter("address")
_set_logistics_state = _setter("logistics_state")
_set_op = _setter("op")
_set_source = _setter("source")
_set_raw = _setter("raw")
_set_topic = _setter("topic")
_set_partition = _setter("partition")
_set_offset = _setter("offset")
_set_quality = _setter("quality")
_set_quality_reason = _setter("quality_reason")


class _OpenEvent:
    """``StandardEvent``'s slots without its frozen ``__setattr__``: what ``_new_event`` fills."""

    __slots__ = tuple(StandardEvent.__dataclass_fields__)


# ``__class__`` assignment needs the very same slots, in the same order.
assert _OpenEvent.__slots__ == StandardEvent.__slots__
_new_object = object.__new__
_set_class = object.__setattr__


def _new_event(
    event_id: str,
    order_id: str | None,
    user_id: str | None,
    event_type: str,
    event_time: datetime,
    amount: Decimal | None,
    status: str | None,
    address: str | None,
    logistics_state: str | None,
    op: Op | None,
    source: str,
    raw: bytes,
    topic: str,
    partition: int,
    offset: int,
    quality: Quality = "VALID",
    quality_reason: str | None = None,
) -> StandardEvent:
    """``StandardEvent(...)`` (same parameters, an equal event) for the adapters' and ``classify``'s hot path.

    ``StandardEvent.__init__`` has to store every field past the frozen ``__setattr__``, one descriptor
    call each. Here the slots of an ``_OpenEvent`` take plain attribute stores, the interpreter's cheapest,
    and one ``__class__`` assignment (allowed between classes with identical slots, on every CPython since
    3.5) makes the object a ``StandardEvent`` before anyone sees it: 2.5x cheaper again, and the result is
    as frozen as any other event. Package-internal: everything else should call ``StandardEvent``.
    """
    e: Any = _new_object(_OpenEvent)
    e.event_id = event_id
    e.order_id = order_id
    e.user_id = user_id
    e.event_type = event_type
    e.event_time = event_time
    e.amount = amount
    e.status = status
    e.address = address
    e.logistics_state = logistics_state
    e.op = op
    e.source = source
    e.raw = raw
    e.topic = topic
    e.partition = partition
    e.offset = offset
    e.quality = quality
    e.quality_reason = quality_reason
    _set_class(e, "__class__", StandardEvent)
    event: StandardEvent = e
    return event


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record that cannot (stage ``adapter``) or must not (stage ``quality``) become a usable event.

    Kept byte-for-byte with its Kafka coordinates so quarantine can be inspected and replayed after a fix;
    ``reason`` starts with the offending field name (``"amount: ..."``).
    """

    raw: bytes
    source: str
    reason: str
    topic: str
    partition: int
    offset: int
    stage: RejectStage = "adapter"


def reject_event(event: StandardEvent, reason: str | None = None) -> Rejected:
    """Turn an INVALID event into a quarantine record (the quality stage's counterpart of adapter rejects)."""
    return Rejected(
        raw=event.raw,
        source=event.source,
        reason=reason or event.quality_reason or "quality: rejected",
        topic=event.topic,
        partition=event.partition,
        offset=event.offset,
        stage="quality",
    )


TIMESTAMP = pa.timestamp("us", tz="UTC")
AMOUNT = pa.decimal128(18, 2)

#: Column order of the event columns; bronze, late and the readers all use it.
EVENT_COLUMNS: tuple[str, ...] = tuple(StandardEvent.__dataclass_fields__)

_EVENT_FIELDS: tuple[pa.Field, ...] = (
    pa.field("event_id", pa.string(), nullable=False),
    pa.field("order_id", pa.string()),
    pa.field("user_id", pa.string()),
    pa.field("event_type", pa.string(), nullable=False),
    pa.field("event_time", TIMESTAMP, nullable=False),
    pa.field("amount", AMOUNT),
    pa.field("status", pa.string()),
    pa.field("address", pa.string()),
    pa.field("logistics_state", pa.string()),
    pa.field("op", pa.string()),
    pa.field("source", pa.string(), nullable=False),
    pa.field("raw", pa.binary(), nullable=False),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("quality", pa.string(), nullable=False),
    pa.field("quality_reason", pa.string()),
)
assert tuple(f.name for f in _EVENT_FIELDS) == EVENT_COLUMNS

#: Columns whose values come from a small closed set (kinds, statuses, sources, topics, partitions):
#: the only columns of lakestream's tables written with a Parquet dictionary (``storage.parquet_encoding``).
CLOSED_SET_COLUMNS: frozenset[str] = frozenset(
    {"event_type", "status", "logistics_state", "op", "source", "topic", "partition", "quality", "stage"}
)

#: Bronze: every adapted event as it arrived (quality-tagged), plus when lakestream wrote it.
BRONZE_SCHEMA: pa.Schema = pa.schema([*_EVENT_FIELDS, pa.field("ingest_time", TIMESTAMP, nullable=False)])

#: Late: events that arrived behind the watermark, with the watermark they missed, so they are kept
#: (and can be replayed by a batch recompute) instead of silently dropped.
LATE_SCHEMA: pa.Schema = pa.schema(
    [
        *_EVENT_FIELDS,
        pa.field("ingest_time", TIMESTAMP, nullable=False),
        pa.field("watermark", TIMESTAMP, nullable=False),
    ]
)

#: Quarantine: undecodable or invalid records, byte-exact, with the reason and where they came from.
QUARANTINE_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("raw", pa.binary(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("stage", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("ingest_time", TIMESTAMP, nullable=False),
    ]
)


def _require_aware(name: str, value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"{name}: must be timezone-aware (got naive {value.isoformat()}); pass a UTC datetime"
        )


def _event_arrays(events: Sequence[StandardEvent]) -> list[pa.Array]:
    return [
        pa.array([e.event_id for e in events], pa.string()),
        pa.array([e.order_id for e in events], pa.string()),
        pa.array([e.user_id for e in events], pa.string()),
        pa.array([e.event_type for e in events], pa.string()),
        pa.array([e.event_time for e in events], TIMESTAMP),
        pa.array([e.amount for e in events], AMOUNT),
        pa.array([e.status for e in events], pa.string()),
        pa.array([e.address for e in events], pa.string()),
        pa.array([e.logistics_state for e in events], pa.string()),
        pa.array([e.op for e in events], pa.string()),
        pa.array([e.source for e in events], pa.string()),
        pa.array([e.raw for e in events], pa.binary()),
        pa.array([e.topic for e in events], pa.string()),
        pa.array([e.partition for e in events], pa.int32()),
        pa.array([e.offset for e in events], pa.int64()),
        pa.array([e.quality for e in events], pa.string()),
        pa.array([e.quality_reason for e in events], pa.string()),
    ]


def _constant_or_each(name: str, value: datetime | Sequence[datetime], n: int) -> list[datetime]:
    if isinstance(value, datetime):
        _require_aware(name, value)
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise ValueError(
            f"{name}: got {len(values)} values for {n} rows; pass one per row or a single datetime"
        )
    for v in values:
        _require_aware(name, v)
    return values


def bronze_batch(events: Sequence[StandardEvent], *, ingest_time: datetime) -> pa.RecordBatch:
    """Build one bronze ``RecordBatch`` (``BRONZE_SCHEMA``) column-wise from a micro-batch of events."""
    arrays = _event_arrays(events)
    arrays.append(pa.array(_constant_or_each("ingest_time", ingest_time, len(events)), TIMESTAMP))
    return pa.RecordBatch.from_arrays(arrays, schema=BRONZE_SCHEMA)


def late_batch(
    events: Sequence[StandardEvent],
    *,
    watermark: datetime | Sequence[datetime],
    ingest_time: datetime,
) -> pa.RecordBatch:
    """Build one late-table ``RecordBatch`` (``LATE_SCHEMA``); ``watermark`` is one value or one per event."""
    arrays = _event_arrays(events)
    arrays.append(pa.array(_constant_or_each("ingest_time", ingest_time, len(events)), TIMESTAMP))
    arrays.append(pa.array(_constant_or_each("watermark", watermark, len(events)), TIMESTAMP))
    return pa.RecordBatch.from_arrays(arrays, schema=LATE_SCHEMA)


def quarantine_batch(rejects: Sequence[Rejected], *, ingest_time: datetime) -> pa.RecordBatch:
    """Build one quarantine ``RecordBatch`` (``QUARANTINE_SCHEMA``) column-wise."""
    arrays = [
        pa.array([r.raw for r in rejects], pa.binary()),
        pa.array([r.source for r in rejects], pa.string()),
        pa.array([r.reason for r in rejects], pa.string()),
        pa.array([r.stage for r in rejects], pa.string()),
        pa.array([r.topic for r in rejects], pa.string()),
        pa.array([r.partition for r in rejects], pa.int32()),
        pa.array([r.offset for r in rejects], pa.int64()),
        pa.array(_constant_or_each("ingest_time", ingest_time, len(rejects)), TIMESTAMP),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=QUARANTINE_SCHEMA)


def events_from_arrow(data: pa.RecordBatch | pa.Table) -> list[StandardEvent]:
    """Read events back from bronze or late data (extra columns ignored), for batch recomputes.

    Timestamps come back as UTC-aware datetimes and amounts as ``Decimal``, so a recompute from bronze
    sees exactly the events the stream saw.
    """
    columns = {name: data.column(name).to_pylist() for name in EVENT_COLUMNS}
    out: list[StandardEvent] = []
    for i in range(data.num_rows):
        kwargs: dict[str, Any] = {name: columns[name][i] for name in EVENT_COLUMNS}
        out.append(StandardEvent(**kwargs))
    return out


def rejected_from_arrow(data: pa.RecordBatch | pa.Table) -> list[Rejected]:
    """Read quarantine records back (for replay after an adapter fix)."""
    names = ("raw", "source", "reason", "topic", "partition", "offset", "stage")
    columns = {name: data.column(name).to_pylist() for name in names}
    return [Rejected(**{name: columns[name][i] for name in names}) for i in range(data.num_rows)]
