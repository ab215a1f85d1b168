"""Foundation end to end: real broker, real Flink MiniCluster, real Delta table, exact rows."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from kafka import KafkaProducer

from devtools.kafka_broker import create_topic
from tests.support.delta_tables import lakehouse_env

pytestmark = pytest.mark.integration


def produce_json(bootstrap: str, topic: str, n: int) -> set[tuple[int, int, bytes]]:
    """Send n JSON events; return what the broker acknowledged as (partition, offset, value)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    futures = []
    for i in range(n):
        value = json.dumps({"event_id": f"e{i}", "order_id": str(1000 + i % 37), "amount": i * 0.5}).encode()
        futures.append((producer.send(topic, key=str(i % 37).encode(), value=value), value))
    producer.flush()
    acked = set()
    for fut, value in futures:
        meta = fut.get(timeout=30)
        acked.add((meta.partition, meta.offset, value))
    producer.close()
    return acked


def job_env(kafka: str, lakehouse: Path, tmp_path: Path) -> dict[str, str]:
    return {
        "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": kafka,
        **lakehouse_env(lakehouse),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": '"1s"',
    }


def assert_no_orphans(table: Path) -> None:
    """Every data file on disk is in the current snapshot, and nothing is left staged."""
    dt = DeltaTable(str(table))
    referenced = {str((table / f).resolve()) for f in dt.file_uris()} | {
        str(Path(f).resolve()) for f in dt.file_uris() if f.startswith("/")
    }
    on_disk = {str(p.resolve()) for p in table.rglob("*.parquet") if "_delta_log" not in p.parts}
    assert on_disk <= referenced, f"orphaned files: {sorted(on_disk - referenced)[:5]}"


def test_thousand_events_land_exactly_once(
    kafka: str, any_lakehouse: Path, tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """On both back ends; ``tables`` then lists what landed."""
    lakehouse = any_lakehouse
    topic = f"foundation.events.{uuid.uuid4().hex[:8]}"
    create_topic(kafka, topic, partitions=3)
    sent = produce_json(kafka, topic, 1000)

    out = cli(
        "land",
        "--topic",
        topic,
        "--table",
        "raw/events",
        "--bounded",
        "--starting-offsets",
        "earliest",
        env=job_env(kafka, lakehouse, tmp_path),
    )
    assert "raw/events" in out.stdout

    table = lakehouse / "raw" / "events"
    got = DeltaTable(str(table)).to_pyarrow_table()
    assert got.num_rows == 1000
    assert set(pc.unique(got["topic"]).to_pylist()) == {topic}
    rows = set(
        zip(got["partition"].to_pylist(), got["offset"].to_pylist(), got["value"].to_pylist(), strict=True)
    )
    assert rows == sent
    assert_no_orphans(table)

    # Running the same bounded job again from the committed offsets adds nothing.
    cli(
        "land",
        "--topic",
        topic,
        "--table",
        "raw/events",
        "--bounded",
        "--starting-offsets",
        "committed",
        env=job_env(kafka, lakehouse, tmp_path),
    )
    assert DeltaTable(str(table)).to_pyarrow_dataset().count_rows() == 1000
    listing = cli("tables", env=job_env(kafka, lakehouse, tmp_path)).stdout
    assert any(line.split()[:2] == ["raw/events", "1000"] for line in listing.splitlines()), listing
