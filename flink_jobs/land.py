"""Landing job: Kafka records, bytes untouched, into an append-only Delta table, exactly once.

The simplest complete lakestream graph (Kafka source -> checkpoint markers -> two-phase-commit Delta
sink). It is the foundation's end-to-end check and a useful raw landing zone in its own right: every
record with its Kafka coordinates, so anything downstream can be recomputed from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from lakestream.config import Config
from runtime.flink_env import build_env
from sinks.flink.delta_sink import DeltaSinkSpec, sink_to_delta
from sinks.table_spec import TableSpec
from sources.flink.kafka_input import EndOffsets, StartingOffsets, kafka_records

LANDING_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("kafka_timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
    ]
)


def to_landing_row(record: Any) -> tuple[Any, ...]:
    """Kafka row (topic, partition, offset, timestamp, key, value) -> landing tuple (schema order)."""
    ts = record[3]
    return (record[0], record[1], record[2], ts if ts is not None and ts >= 0 else None, record[4], record[5])


def landing_group(cfg: Config) -> str:
    """Consumer group of the landing job (its committed offsets are the job's progress between runs)."""
    return f"{cfg.kafka.group_id}-land"


def landing_spec(cfg: Config, table: str, job_name: str = "lakestream-land") -> DeltaSinkSpec:
    """The landing table's sink: its app prefix names the txn app ids, so keep ``job_name`` stable."""
    return DeltaSinkSpec(
        table=TableSpec(
            table_uri=cfg.lakehouse.table_uri(table),
            schema=LANDING_SCHEMA,
            mode="append",
            partition_by=("topic",),
        ),
        app_prefix=f"{job_name}/{table}",
        kafka_progress=True,
    )


def build_landing_job(
    cfg: Config,
    *,
    bootstrap_servers: str,
    topics: Sequence[str],
    table: str,
    bounded: bool,
    starting_offsets: StartingOffsets = "earliest",
    job_name: str = "lakestream-land",
    end_offsets: EndOffsets | None = None,
    start_offsets: EndOffsets | None = None,
    checkpoint_dir: str | None = None,
    resume_from: str | Path | None = None,
    run_id: str | None = None,
) -> Any:
    """Assemble the landing graph and return its StreamExecutionEnvironment (not yet executed).

    Every commit of the table records the next offset of each partition whose records it holds
    (``lakestream.progress``), where the next run starts (``start_offsets``).
    """
    env = build_env(
        cfg.flink,
        checkpoint_dir=checkpoint_dir,
        resume_from=resume_from,
        run_id=run_id,
        kind="land",
        storage=cfg.storage,
    )
    records = kafka_records(
        env,
        bootstrap_servers=bootstrap_servers,
        topics=topics,
        group_id=landing_group(cfg),
        starting_offsets=starting_offsets,
        bounded=bounded,
        end_offsets=end_offsets,
        start_offsets=start_offsets,
        consumer_properties=cfg.kafka.consumer,
        name="kafka records",
        uid="land-kafka-source",
    )
    rows = records.map(to_landing_row).name("to landing row").uid("land-to-row")
    spec = landing_spec(cfg, table, job_name)
    sink_to_delta(rows, spec, name=f"delta {table}", uid=f"land-delta-{table.replace('/', '-')}")
    return env
