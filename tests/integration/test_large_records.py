"""Records close to Kafka's default 1 MB record limit: a VALID one (its size in a field the adapter does not
read) goes through ingest whole, bronze keeping its bytes; one whose address exceeds the adapters'
text limit is quarantined naming the field and the limit, byte-exact. Nothing is lost either way."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from kafka import KafkaProducer

from tests.support.cli import run_cli
from tests.support.ingest_job import setup_topics

pytestmark = pytest.mark.integration

#: The broker's default ``message.max.bytes`` (1 MiB + 12): a record batch of one record must fit in it.
KAFKA_RECORD_LIMIT = 1_048_588
START = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
UNIT = "北京市海淀区中关村大街1号"


def local(ts: datetime) -> str:
    """The orders DB's wall-clock time (Asia/Shanghai, no offset), as the adapter reads it."""
    return (ts + timedelta(hours=8)).strftime("%Y-%m-%d %H:%M:%S")


def near_limit(payload: dict[str, Any], field: str) -> tuple[bytes, str]:
    """``payload`` with ``field`` filled with non-ASCII text up to ~250 bytes below the record limit."""
    head = len(json.dumps({**payload, field: ""}, ensure_ascii=False).encode())
    text = UNIT * ((KAFKA_RECORD_LIMIT - 250 - head) // len(UNIT.encode()))
    value = json.dumps({**payload, field: text}, ensure_ascii=False).encode()
    assert KAFKA_RECORD_LIMIT - 300 < len(value) < KAFKA_RECORD_LIMIT - 200, len(value)
    return value, text


def test_records_near_the_kafka_limit_are_ingested_or_quarantined_whole(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    topics, env = setup_topics(kafka, tmp_path, lakehouse, partitions=1)
    order = {"op": "c", "order_id": "900001", "user_id": "U9", "amount": "12.50", "status": "created"}
    order |= {"address": "海淀区", "updated_at": local(START)}
    valid, _ = near_limit(order, "remarks")  # a column the DB has and the adapter does not read
    update = {**order, "op": "u", "status": "paid", "updated_at": local(START + timedelta(minutes=1))}
    small = json.dumps(update, ensure_ascii=False).encode()
    other = {**order, "order_id": "900002", "updated_at": local(START + timedelta(minutes=2))}
    too_long, address = near_limit(other, "address")

    producer = KafkaProducer(bootstrap_servers=kafka, acks="all", max_request_size=4 << 20)
    for key, value in ((b"900001", valid), (b"900001", small), (b"900002", too_long)):
        producer.send(topics["orders_db"], key=key, value=value).get(timeout=30)
    producer.close()

    run_cli("ingest", "--bounded", env=env, timeout=300)

    bronze = DeltaTable(str(lakehouse / "bronze/order_events")).to_pyarrow_table().to_pylist()
    assert sorted(r["raw"] for r in bronze) == sorted([valid, small])
    assert {r["quality"] for r in bronze} == {"VALID"}
    [silver] = DeltaTable(str(lakehouse / "silver/orders")).to_pyarrow_table().to_pylist()
    assert (silver["order_id"], silver["status"], silver["address"]) == ("900001", "paid", "海淀区")
    [rejected] = DeltaTable(str(lakehouse / "quarantine/order_events")).to_pyarrow_table().to_pylist()
    assert rejected["raw"] == too_long
    assert rejected["reason"] == (f"address: text of {len(address)} characters exceeds max_text_chars=4096")
