"""De-dup state in Flink keyed state: it survives kill -9 and restores at another parallelism (real Kafka).

A re-delivery (the same bytes again, as a producer retry or a payment callback sent twice) whose first
copy was committed before the job was killed must still be recognised after the restore: counted once in
``events_duplicate`` (recorded in silver's commits, ``lakestream.counters``, so it survives the kill) and
applied once. The same across restores at parallelism 2 -> 1 -> 2, with every table exact.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from kafka import KafkaProducer

from devtools.processes import kill_group
from tests.support.ingest_job import setup_topics, start_unbounded, table_rows, wait_for

pytestmark = pytest.mark.integration
PAID_AT = 1717214400000  # 2024-06-01T04:00:00Z


def payment(i: int) -> bytes:
    return json.dumps(
        {"payId": f"P{i}", "orderId": f"o{i}", "payMoney": 100 + i, "paidAt": PAID_AT + i}
    ).encode()


def send(kafka: str, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for value in values:
        producer.send(topic, value=value).get(timeout=30)
    producer.close()


def counters(lakehouse: Path, name: str) -> int:
    """``name`` summed over silver's commits: each checkpoint's count, committed exactly once."""
    total = 0
    for commit in DeltaTable(str(lakehouse / "silver/orders")).history():
        raw = commit.get("lakestream.counters")
        if raw is None:
            continue
        values: dict[str, Any] = json.loads(raw) if isinstance(raw, str) else raw
        total += int(values.get(name, 0))
    return total


def run_until(
    env: dict[str, str], log: Path, lakehouse: Path, counts: dict[str, int], *, settle: float = 2.0
) -> None:
    proc = start_unbounded(env, log)
    try:
        wait_for(lakehouse, counts, proc, log)
        time.sleep(settle)  # a few more checkpoints; the kill lands anywhere between them
    finally:
        kill_group(proc)  # kill -9 of the whole process group: no clean shutdown


def assert_silver(lakehouse: Path, orders: range) -> None:
    rows = DeltaTable(str(lakehouse / "silver/orders")).to_pyarrow_table().to_pylist()
    got = {r["order_id"]: (r["paid_amount"], r["status"], r["paid_amount__eid"]) for r in rows}
    assert got == {f"o{i}": (Decimal(100 + i) / 100, "paid", f"payments:P{i}") for i in orders}


def test_a_duplicate_across_kill_is_recognised(kafka: str, lakehouse: Path, tmp_path: Path) -> None:
    topics, env = setup_topics(kafka, tmp_path, lakehouse, partitions=2)
    log = tmp_path / "ingest.log"
    send(kafka, topics["payments"], [payment(i) for i in range(20)])
    run_until(env, log, lakehouse, {"silver/orders": 20, "bronze/order_events": 20})

    send(kafka, topics["payments"], [payment(3), payment(20)])  # P3 again: the same bytes
    run_until(env, log, lakehouse, {"silver/orders": 21, "bronze/order_events": 22})
    assert log.read_text().count("resuming from checkpoint") == 1

    assert counters(lakehouse, "events_duplicate") == 1
    assert counters(lakehouse, "silver_changes") == 21  # the re-delivery was applied once, not twice
    assert table_rows(lakehouse, "bronze/order_events") == 22  # bronze keeps both copies
    assert_silver(lakehouse, range(21))
    assert_rocksdb_lookup_options(tmp_path / "checkpoints")


def assert_rocksdb_lookup_options(checkpoints: Path) -> None:
    """The de-dup's RocksDB ran with bloom filters and partitioned index/filter blocks: its OPTIONS file,
    part of every incremental checkpoint, says so (``flink_runtime.ROCKSDB_LOOKUP_SETTINGS``)."""
    header = b'[TableOptions/BlockBasedTable "lakestream-dedup-ids"]'
    sections = [
        text.split(header, 1)[1].split(b"\n[", 1)[0]
        for f in checkpoints.rglob("*")
        if f.is_file()
        for text in [f.read_bytes()]
        if header in text
    ]
    assert sections, f"no RocksDB OPTIONS of the de-dup state under {checkpoints}"
    for options in sections:
        assert b"filter_policy=bloomfilter:" in options
        assert b"partition_filters=true" in options
        assert b"index_type=kTwoLevelIndexSearch" in options
