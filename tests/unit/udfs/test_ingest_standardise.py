"""The standardise operator's routing and quality counters, run without Flink on real Delta tables."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from lakestream.adapters import AdapterSettings
from lakestream.keys import bucket_of, id_hash, subtask_of
from lakestream.quality import QualityRules
from lakestream.standard import BRONZE_SCHEMA, QUARANTINE_SCHEMA
from runtime.checkpoint_markers import DATA, OPEN
from sinks.flink.delta_sink import DeltaSinkSpec
from sinks.table_spec import TableSpec
from tests.support.metrics import MetricsContext
from udfs.ingest_rows import HEADER, BatchPart, unpack_events
from udfs.ingest_standardise import BRONZE, QUARANTINE, REVIEW, StandardiseFunction

UTC = timezone.utc
TOPIC = "payments.callbacks"


def _kafka_batch(values: list[bytes | None]) -> tuple[Any, ...]:
    """A ``KafkaBatchEpochOperator`` payload: (topic, partition, offsets, timestamps, key lengths, keys,
    value lengths, values)."""
    lengths = [-1 if v is None else len(v) for v in values]
    return (
        TOPIC,
        0,
        list(range(len(values))),
        [0] * len(values),
        [-1] * len(values),
        b"",
        lengths,
        b"".join(v for v in values if v is not None),
    )


def _function(tmp_path: Path) -> StandardiseFunction:
    def spec(name: str, schema: Any) -> DeltaSinkSpec:
        return DeltaSinkSpec(table=TableSpec(table_uri=str(tmp_path / name), schema=schema), app_prefix=name)

    return StandardiseFunction(
        sources_by_topic={TOPIC: "payments"},
        adapter_settings=AdapterSettings(source_zone="Asia/Shanghai"),
        rules=QualityRules(
            max_future=timedelta(minutes=5),
            amount_ceiling=Decimal(1_000_000),
            known_statuses=frozenset({"paid"}),
            min_event_time=datetime(2000, 1, 1, tzinfo=UTC),
        ),
        tables={
            BRONZE: spec("bronze", BRONZE_SCHEMA),
            REVIEW: spec("review", BRONZE_SCHEMA),
            QUARANTINE: spec("quarantine", QUARANTINE_SCHEMA),
        },
        parallelism=2,
        max_parallelism=128,
    )


def test_one_batch_is_routed_and_counted_per_quality(tmp_path: Path) -> None:
    fn = _function(tmp_path)
    ctx = MetricsContext()
    fn.open(ctx)
    list(fn.process_element((OPEN, -1, 0, 1, "run-1", None), None))
    future_ms = int((datetime.now(UTC) + timedelta(days=1)).timestamp() * 1000)
    payment = {"payId": "P1", "orderId": "1001", "payMoney": 9900, "paidAt": 1717214400123}
    values = [
        json.dumps(payment).encode(),  # VALID
        json.dumps({**payment, "payId": "P2"}).encode(),  # VALID
        json.dumps({**payment, "payId": "P3", "paidAt": future_ms}).encode(),  # SUSPICIOUS: a day ahead
        json.dumps({"payId": "P4", "paidAt": 0}).encode(),  # INVALID: 1970, no order, no amount
        b"{not json",  # rejected by the adapter
        None,  # rejected: null value
    ]
    out = list(fn.process_element((DATA, -1, -1, -1, None, _kafka_batch(values)), None))
    # A second batch: the counts add up instead of restarting.
    out += list(fn.process_element((DATA, -1, -1, -1, None, _kafka_batch(values[:1])), None))

    counts = {name: c.count for name, c in ctx.group.counters.items()}
    assert counts == {
        "events_valid": 3,
        "events_suspicious": 1,
        "events_invalid": 1,
        "records_rejected": 2,
        "kafka_batches": 2,
    }
    # Per batch: a header with the VALID events' times in arrival order, then the events by subtask.
    rows = [BatchPart._make(r) for r in out]
    headers = [r for r in rows if r.part == HEADER]
    assert [(h.split, h.event_times) for h in headers] == [
        (f"{TOPIC}#0", [1717214400123, 1717214400123]),
        (f"{TOPIC}#0", [1717214400123]),
    ]
    first_parts = rows[1 : rows.index(headers[1])]
    assert sorted(i for part in first_parts for i in part.positions) == [0, 1]
    for part in first_parts:
        assert part.events is not None
        events = unpack_events(part.events)
        ids = events.column("event_id").to_pylist()
        assert ids == [["payments:P1", "payments:P2"][i] for i in part.positions]
        assert part.buckets == [bucket_of("1001", eid, 128) for eid in ids]
        assert {subtask_of(b, 2, 128) for b in part.buckets} == {part.part}
        assert list(zip(part.id_hi, part.id_lo, strict=True)) == [id_hash(eid) for eid in ids]
        assert part.event_times == [1717214400123] * len(ids) and part.late_watermarks is None
    fn.close()


def test_parts_carry_their_own_events_times_and_bronze_records_the_newest(tmp_path: Path) -> None:
    fn = _function(tmp_path)
    fn.open(MetricsContext())
    list(fn.process_element((OPEN, -1, 0, 1, "run-1", None), None))
    base = 1717214400000
    payments = [
        {"payId": f"P{i}", "orderId": str(1000 + i), "payMoney": 100, "paidAt": base + 1000 * (i % 7)}
        for i in range(40)
    ]
    values = [json.dumps(p).encode() for p in payments] + [json.dumps({"payId": "X", "paidAt": 0}).encode()]
    rows = [
        BatchPart._make(r) for r in fn.process_element((DATA, -1, -1, -1, None, _kafka_batch(values)), None)
    ]
    header, parts = rows[0], rows[1:]
    assert header.part == HEADER and header.event_times == [p["paidAt"] for p in payments]
    assert len(parts) == 2  # 40 orders over two subtasks
    for part in parts:
        assert part.event_times == [payments[i]["paidAt"] for i in part.positions]
        assert part.buckets == [
            bucket_of(payments[i]["orderId"], f"payments:P{i}", 128) for i in part.positions
        ]
    # The newest VALID event time of the partition, and its next offset (the INVALID record's included).
    assert fn.tables.progress[BRONZE] == {
        f"kafka/{TOPIC}/0": len(values),
        f"watermark/{TOPIC}/0": base + 6000,
    }
    # A batch of rejects only moves the offset.
    list(fn.process_element((DATA, -1, -1, -1, None, _kafka_batch([b"{nope"])), None))
    assert fn.tables.progress[BRONZE][f"kafka/{TOPIC}/0"] == 1
    fn.close()
