"""Baselines on the same topics and rows: raw Kafka consume (two clients) and raw delta-rs append."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def consume_kafka_python(
    bootstrap: str, topics: list[str], expected: int, *, timeout: float = 600
) -> dict[str, Any]:
    """kafka-python: read every record of ``topics`` once (bytes untouched), events/s."""
    from kafka import KafkaConsumer

    c = KafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=10000,
        fetch_max_bytes=64 * 1024 * 1024,
        max_partition_fetch_bytes=16 * 1024 * 1024,
    )
    n = 0
    t0 = time.monotonic()
    deadline = t0 + timeout
    try:
        while n < expected and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                n += len(recs)
    finally:
        elapsed = time.monotonic() - t0
        c.close()
    return {"records": n, "seconds": round(elapsed, 2), "events_per_s": round(n / elapsed)}


def consume_confluent(
    bootstrap: str, topics: list[str], expected: int, *, timeout: float = 600
) -> dict[str, Any]:
    """confluent-kafka (librdkafka): the same read, batched ``consume``."""
    import uuid

    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
        }
    )
    from confluent_kafka import TopicPartition

    md = c.list_topics(timeout=10)
    c.assign([TopicPartition(t, p, -2) for t in topics for p in md.topics[t].partitions])  # -2: beginning
    n = 0
    t0 = time.monotonic()
    deadline = t0 + timeout
    try:
        while n < expected and time.monotonic() < deadline:
            for m in c.consume(10000, 0.5):
                if m.error() is None:
                    n += 1
    finally:
        elapsed = time.monotonic() - t0
        c.close()
    return {"records": n, "seconds": round(elapsed, 2), "events_per_s": round(n / elapsed)}


def delta_append(source_root: Path, target_root: Path, *, batches: int = 1) -> dict[str, Any]:
    """Raw delta-rs append of exactly the rows lakestream committed to bronze, as Arrow (the write limit).

    ``batches`` > 1 splits the rows into that many commits (what one commit per checkpoint would do).
    """
    from deltalake import DeltaTable, write_deltalake

    rows = DeltaTable(str(source_root / "bronze" / "order_events")).to_pyarrow_table()
    target = str(target_root / "raw_append")
    t0 = time.monotonic()
    step = max(1, rows.num_rows // batches)
    for i in range(0, rows.num_rows, step):
        write_deltalake(target, rows.slice(i, step), mode="append")
    elapsed = time.monotonic() - t0
    return {
        "rows": rows.num_rows,
        "commits": batches,
        "bytes_in_memory": rows.nbytes,
        "seconds": round(elapsed, 2),
        "events_per_s": round(rows.num_rows / elapsed),
    }
