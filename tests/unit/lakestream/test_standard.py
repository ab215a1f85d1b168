from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
import pytest

from lakestream.adapters import get_adapter
from lakestream.standard import (
    BRONZE_SCHEMA,
    EVENT_COLUMNS,
    LATE_SCHEMA,
    QUARANTINE_SCHEMA,
    Rejected,
    StandardEvent,
    bronze_batch,
    events_from_arrow,
    late_batch,
    quarantine_batch,
    rejected_from_arrow,
)

UTC = timezone.utc
INGEST = datetime(2024, 6, 1, 5, 0, tzinfo=UTC)
SHANGHAI = timezone(timedelta(hours=8))


def sample_events() -> list[StandardEvent]:
    payloads = [
        (
            "orders_db",
            b'{"op":"c","order_id":"1001","user_id":"u1","amount":"99.5","status":"created",'
            b'"address":"\xe6\x9c\x9d\xe9\x98\xb3","updated_at":"2024-06-01 12:00:00.123456"}',
        ),
        ("payments", b'{"payId":"P1","orderId":"1001","payMoney":9950,"paidAt":1717214460000}'),
        (
            "logistics",
            b'{"trackingNo":"SF1","order":"1001","state":"in_transit","ts":"2024-06-01T12:30:00+08:00"}',
        ),
        ("behaviour", b'{"uid":"u1","event":"view","ts":1717214400000}'),
    ]
    out = []
    for i, (source, value) in enumerate(payloads):
        e = get_adapter(source)(value, topic=source, partition=i, offset=10**12 + i)
        assert isinstance(e, StandardEvent)
        out.append(e)
    out[3] = dataclasses.replace(out[3], quality="SUSPICIOUS", quality_reason="event_time: odd")
    return out


def test_event_columns_match_the_dataclass_and_the_schemas() -> None:
    assert EVENT_COLUMNS == tuple(f.name for f in dataclasses.fields(StandardEvent))
    assert tuple(BRONZE_SCHEMA.names) == (*EVENT_COLUMNS, "ingest_time")
    assert tuple(LATE_SCHEMA.names) == (*EVENT_COLUMNS, "ingest_time", "watermark")
    assert BRONZE_SCHEMA.field("event_time").type == pa.timestamp("us", tz="UTC")
    assert BRONZE_SCHEMA.field("amount").type == pa.decimal128(18, 2)
    assert BRONZE_SCHEMA.field("raw").type == pa.binary()


def test_standard_event_is_frozen_and_slotted() -> None:
    e = sample_events()[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.status = "x"  # type: ignore[misc]
    assert not hasattr(e, "__dict__")


def test_bronze_batch_round_trips_every_field() -> None:
    events = sample_events()
    batch = bronze_batch(events, ingest_time=INGEST)
    assert batch.schema == BRONZE_SCHEMA and batch.num_rows == 4
    assert events_from_arrow(batch) == events
    assert events_from_arrow(pa.Table.from_batches([batch])) == events
    assert batch.column("ingest_time").to_pylist() == [INGEST] * 4
    assert batch.column("event_time").to_pylist()[0] == datetime(2024, 6, 1, 4, 0, 0, 123456, tzinfo=UTC)
    assert batch.column("amount").to_pylist()[:2] == [Decimal("99.50"), Decimal("99.50")]


def test_timestamps_in_other_zones_are_stored_as_the_same_instant() -> None:
    e = dataclasses.replace(sample_events()[0], event_time=datetime(2024, 6, 1, 12, 0, tzinfo=SHANGHAI))
    batch = bronze_batch([e], ingest_time=datetime(2024, 6, 1, 13, 0, tzinfo=SHANGHAI))
    assert batch.column("event_time").to_pylist() == [datetime(2024, 6, 1, 4, 0, tzinfo=UTC)]
    assert batch.column("ingest_time").to_pylist() == [datetime(2024, 6, 1, 5, 0, tzinfo=UTC)]


def test_empty_batches_have_the_schema() -> None:
    assert bronze_batch([], ingest_time=INGEST).schema == BRONZE_SCHEMA
    assert late_batch([], watermark=INGEST, ingest_time=INGEST).num_rows == 0
    assert quarantine_batch([], ingest_time=INGEST).schema == QUARANTINE_SCHEMA


def test_late_batch_takes_one_or_per_event_watermarks() -> None:
    events = sample_events()[:2]
    one = late_batch(events, watermark=INGEST, ingest_time=INGEST)
    assert one.schema == LATE_SCHEMA and one.column("watermark").to_pylist() == [INGEST, INGEST]
    marks = [INGEST, INGEST + timedelta(seconds=1)]
    each = late_batch(events, watermark=marks, ingest_time=INGEST)
    assert each.column("watermark").to_pylist() == marks
    assert events_from_arrow(each) == events
    with pytest.raises(ValueError, match="watermark: got 1 values for 2 rows"):
        late_batch(events, watermark=[INGEST], ingest_time=INGEST)


def test_naive_times_are_refused_by_the_builders() -> None:
    with pytest.raises(ValueError, match="ingest_time: must be timezone-aware"):
        bronze_batch(sample_events(), ingest_time=datetime(2024, 6, 1))
    with pytest.raises(ValueError, match="watermark: must be timezone-aware"):
        late_batch(sample_events(), watermark=datetime(2024, 6, 1), ingest_time=INGEST)


def test_quarantine_batch_round_trips() -> None:
    rejects = [
        Rejected(
            raw=b"\x00\xff",
            source="payments",
            reason="payload: not UTF-8 text",
            topic="p",
            partition=1,
            offset=5,
        ),
        Rejected(
            raw=b"{}",
            source="orders_db",
            reason="amount: -1 is negative",
            topic="o",
            partition=0,
            offset=9,
            stage="quality",
        ),
    ]
    batch = quarantine_batch(rejects, ingest_time=INGEST)
    assert batch.schema == QUARANTINE_SCHEMA
    assert rejected_from_arrow(batch) == rejects
