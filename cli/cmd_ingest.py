"""``lakestream ingest``: the ingest job, from where its previous run ended."""

from __future__ import annotations

import argparse

from cli.common import SubParsers, add_command, load
from flink_jobs.ingest import JOB_NAME, build_ingest_job, check_silver_layout, table_specs
from flink_jobs.lifecycle import KafkaJob, run_kafka_job
from lakestream.table_names import BRONZE_TABLE


def register(subparsers: SubParsers) -> argparse.ArgumentParser:
    """Register ``lakestream ingest`` on the CLI's sub-command parsers."""
    return add_command(
        subparsers,
        "ingest",
        func=cmd_ingest,
        flags=("lakehouse", "bootstrap_servers", "bounded", "fresh"),
        help="Kafka sources -> bronze, quarantine, review, late and silver Delta tables",
    )


def cmd_ingest(args: argparse.Namespace) -> int:
    """Run the ingest job (MiniCluster, or the cluster under ``flink run``); bounded runs list the tables.

    Every run continues where the previous one ended (DESIGN.md section 9): bronze's commits record
    each partition's next offset and newest VALID event time.
    """
    cfg = load(args, writes=True)
    check_silver_layout(cfg)
    specs = table_specs(cfg)
    bronze = specs[BRONZE_TABLE]
    job = KafkaJob(
        name="ingest",
        topics=sorted(set(cfg.kafka.topics.values())),
        group_id=cfg.kafka.group_id,
        progress_table=(bronze.table.table_uri, bronze.app_prefix),
        tables=list(specs.values()),
        starting_offsets=cfg.kafka.starting_offsets,
        build=build_ingest_job,
        job_name=JOB_NAME + (" (bounded)" if args.bounded else ""),
        watermarks=True,
        starting_setting="kafka.starting_offsets",
    )
    return run_kafka_job(cfg, job, bounded=args.bounded, fresh=args.fresh, command=args.command)
