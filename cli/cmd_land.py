"""``lakestream land``: raw Kafka records into an append-only Delta table, exactly once."""

from __future__ import annotations

import argparse
import functools

from cli.common import SubParsers, add_command, load
from flink_jobs.land import build_landing_job, landing_group, landing_spec
from flink_jobs.lifecycle import KafkaJob, run_kafka_job


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
    cfg = load(args, writes=True)
    spec = landing_spec(cfg, args.table)
    job = KafkaJob(
        name=f"land/{args.table}",
        topics=args.topic,
        group_id=landing_group(cfg),
        progress_table=(spec.table.table_uri, spec.app_prefix),
        tables=[spec],
        starting_offsets=args.starting_offsets,
        build=functools.partial(
            build_landing_job, topics=args.topic, table=args.table, starting_offsets=args.starting_offsets
        ),
        job_name=args.job_name or f"lakestream-land {args.table}",
    )
    return run_kafka_job(cfg, job, bounded=args.bounded, fresh=args.fresh, command=args.command)
