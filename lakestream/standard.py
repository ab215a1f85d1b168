"""The one event shape every source is adapted to, and the Arrow layouts of the tables built from it.

Every later stage speaks only this shape, so units, clocks and ids are settled once, in the adapters
(DESIGN.md section 5). The batch builders go column-wise from the dataclasses to Arrow arrays: a
micro-batch of thousands of events becomes one ``RecordBatch`` without per-row dicts or pandas.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal

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


class _OpenEvent:
    """``StandardEvent``'s slots without its frozen ``__setattr__``: what ``_new_event`` fills."""

    __slots__ = tuple(StandardEvent.__dataclass_fields__)


# ``__class__`` assignment needs the very same slots, in the same order.
assert _OpenEvent.__slots__ == StandardEvent.__slots__


def _compile_new_event() -> Callable[..., StandardEvent]:
    """``_new_event``, compiled from ``StandardEvent``'s fields as the dataclass compiles its ``__init__``.

    The dataclass ``__init__`` has to store every field past the frozen ``__setattr__``, one
    ``object.__setattr__`` call each. The compiled function takes the same parameters (names, order,
    defaults, annotations), gives the slots of an ``_OpenEvent`` plain attribute stores, the interpreter's
    cheapest, and then one ``__class__`` assignment (allowed between classes with identical slots) makes
    the object a ``StandardEvent`` before anyone sees it: as frozen as any other event.
    """
    fields = dataclasses.fields(StandardEvent)
    params = [f.name if f.default is dataclasses.MISSING else f"{f.name}=_default_{f.name}" for f in fields]
    lines = [
        f"def _new_event({', '.join(params)}):",
        "    e = _new_object(_OpenEvent)",
        *(f"    e.{f.name} = {f.name}" for f in fields),
        "    _set_class(e, '__class__', StandardEvent)",
        "    return e",
    ]
    namespace: dict[str, Any] = {
        "__name__": __name__,
        "_new_object": object.__new__,
        "_set_class": object.__setattr__,
        "_OpenEvent": _OpenEvent,
        "StandardEvent": StandardEvent,
    }
    defaults = [f for f in fields if f.default is not dataclasses.MISSING]
    namespace.update({f"_default_{f.name}": f.default for f in defaults})
    exec("\n".join(lines), namespace)
    new_event: Callable[..., StandardEvent] = namespace["_new_event"]
    new_event.__annotations__ = {f.name: f.type for f in fields}
    new_event.__doc__ = (
        "``StandardEvent(...)`` (same parameters, an equal event) for the adapters' and ``classify``'s hot "
        "path. Package-internal: everything else should call ``StandardEvent``."
    )
    return new_event


if TYPE_CHECKING:
    _new_event = StandardEvent
else:
    _new_event = _compile_new_event()


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

_REJECT_FIELDS: tuple[pa.Field, ...] = (
    pa.field("raw", pa.binary(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("stage", pa.string(), nullable=False),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
)
assert {f.name for f in _REJECT_FIELDS} == set(Rejected.__dataclass_fields__)

#: Quarantine: undecodable or invalid records, byte-exact, with the reason and where they came from.
QUARANTINE_SCHEMA: pa.Schema = pa.schema(
    [*_REJECT_FIELDS, pa.field("ingest_time", TIMESTAMP, nullable=False)]
)


def _require_aware(name: str, value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"{name}: must be timezone-aware (got naive {value.isoformat()}); pass a UTC datetime"
        )


def _arrays(rows: Sequence[Any], fields: Iterable[pa.Field]) -> list[pa.Array]:
    """One Arrow array per field, of the attribute of that name of each row, typed as the field is."""
    return [pa.array(list(map(attrgetter(f.name), rows)), f.type) for f in fields]


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
    arrays = _arrays(events, _EVENT_FIELDS)
    arrays.append(pa.array(_constant_or_each("ingest_time", ingest_time, len(events)), TIMESTAMP))
    return pa.RecordBatch.from_arrays(arrays, schema=BRONZE_SCHEMA)


def late_batch(
    events: Sequence[StandardEvent],
    *,
    watermark: datetime | Sequence[datetime],
    ingest_time: datetime,
) -> pa.RecordBatch:
    """Build one late-table ``RecordBatch`` (``LATE_SCHEMA``); ``watermark`` is one value or one per event."""
    arrays = _arrays(events, _EVENT_FIELDS)
    arrays.append(pa.array(_constant_or_each("ingest_time", ingest_time, len(events)), TIMESTAMP))
    arrays.append(pa.array(_constant_or_each("watermark", watermark, len(events)), TIMESTAMP))
    return pa.RecordBatch.from_arrays(arrays, schema=LATE_SCHEMA)


def quarantine_batch(rejects: Sequence[Rejected], *, ingest_time: datetime) -> pa.RecordBatch:
    """Build one quarantine ``RecordBatch`` (``QUARANTINE_SCHEMA``) column-wise."""
    arrays = _arrays(rejects, _REJECT_FIELDS)
    arrays.append(pa.array(_constant_or_each("ingest_time", ingest_time, len(rejects)), TIMESTAMP))
    return pa.RecordBatch.from_arrays(arrays, schema=QUARANTINE_SCHEMA)


def events_from_arrow(data: pa.RecordBatch | pa.Table) -> list[StandardEvent]:
    """Read events back from bronze or late data (extra columns ignored), for batch recomputes.

    Timestamps come back as UTC-aware datetimes and amounts as ``Decimal``, so a recompute from bronze
    sees exactly the events the stream saw.
    """
    columns = [data.column(name).to_pylist() for name in EVENT_COLUMNS]
    make: Callable[..., StandardEvent] = _new_event  # mypy cannot count a star argument's items
    return [make(*values) for values in zip(*columns, strict=True)]


def rejected_from_arrow(data: pa.RecordBatch | pa.Table) -> list[Rejected]:
    """Read quarantine records back (for replay after an adapter fix)."""
    columns = [data.column(name).to_pylist() for name in Rejected.__dataclass_fields__]
    return [Rejected(*values) for values in zip(*columns, strict=True)]
