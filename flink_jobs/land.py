"""Landing job: Kafka records, bytes untouched, into an append-only Delta table, exactly once.

The simplest complete lakestream graph (Kafka source -> checkpoint markers -> two-phase-commit Delta
sink). It is the foundation's end-to-end check and a useful raw landing zone in its own right: every
record with its Kafka coordinates, so anything downstream can be recomputed from it.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from flink_jobs.cli_common import KafkaJob, SubParsers, add_command, load, run_kafka_job
from flink_jobs.kafka_input import EndOffsets, StartingOffsets, kafka_records
from lakestream.config import Config
from lakestream.flink_runtime import build_env
from udfs.delta_sink import DeltaSinkSpec, sink_to_delta

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
        table_uri=cfg.lakehouse.table_uri(table),
        app_prefix=f"{job_name}/{table}",
        schema=LANDING_SCHEMA,
        mode="append",
        partition_by=("topic",),
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
    resume_from: Path | None = None,
    run_id: str | None = None,
) -> Any:
    """Assemble the landing graph and return its StreamExecutionEnvironment (not yet executed).

    Every commit of the table records the next offset of each partition whose records it holds
    (``lakestream.progress``), where the next run starts (``start_offsets``).
    """
    env = build_env(
        cfg.flink, checkpoint_dir=checkpoint_dir, resume_from=resume_from, run_id=run_id, kind="land"
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


def register(subparsers: SubParsers) -> argparse.ArgumentParser:
    """Register ``lakestream land`` on the CLI's sub-command parsers."""
    p = add_command(
        subparsers,
        "land",
        func=cmd_land,
        flags=("lakehouse", "bootstrap_servers", "bounded", "fresh", "job_name"),
        help="land raw Kafka records into a Delta table, exactly once",
    )
    p.add_argument("--topic", action="append", required=True, help="topic to read (repeatable)")
    p.add_argument("--table", required=True, help="table name under the lakehouse root, e.g. raw/orders")
    p.add_argument(
        "--starting-offsets",
        choices=["committed", "earliest", "latest"],
        default="committed",
        help="where partitions start that the table has no recorded position for (a first run, "
        "--fresh); later runs continue where the table's rows end (default: committed)",
    )
    return p


def cmd_land(args: argparse.Namespace) -> int:
    """Land raw Kafka records into an append-only Delta table, from where the previous run ended."""
    cfg = load(args)
    spec = landing_spec(cfg, args.table)
    job = KafkaJob(
        name=f"land/{args.table}",
        topics=args.topic,
        group_id=landing_group(cfg),
        progress_table=(spec.table_uri, spec.app_prefix),
        tables=[spec],
        starting_offsets=args.starting_offsets,
        build=functools.partial(
            build_landing_job, topics=args.topic, table=args.table, starting_offsets=args.starting_offsets
        ),
        job_name=args.job_name or f"lakestream-land {args.table}",
    )
    return run_kafka_job(cfg, args, job)
