"""``lakestream`` command line: run jobs (MiniCluster or ``flink run -py``), manage the local broker.

Each sub-command validates the whole configuration before it starts anything, so a typo fails in a
second with the key and the fix rather than inside a Flink worker.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from lakestream.config import Config, ConfigError, load_config


def _config(args: argparse.Namespace) -> Config:
    cfg = load_config(args.config)
    if getattr(args, "lakehouse", None):
        cfg = cfg.replace("lakehouse", root=args.lakehouse)
    if getattr(args, "bootstrap_servers", None):
        cfg = cfg.replace("kafka", bootstrap_servers=args.bootstrap_servers)
    return cfg


def _bootstrap(cfg: Config) -> str:
    """The broker address; ``embedded`` means the background broker started by ``lakestream kafka start``."""
    if not cfg.kafka.embedded:
        return cfg.kafka.bootstrap_servers
    from devtools import kafka_broker

    status = kafka_broker.status_detached()
    if not status.running or not status.bootstrap_servers:
        raise ConfigError(
            "kafka.bootstrap_servers is 'embedded' but no local broker is running: start one with "
            "`lakestream kafka start`, or set kafka.bootstrap_servers (LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS)"
        )
    return status.bootstrap_servers


def _checkpoints(cfg: Config, job: str, *, resume: bool) -> tuple[str, Path | None]:
    """Per-job checkpoint folder, and the retained checkpoint to resume from (unbounded runs).

    Like Spark's checkpointLocation: a restarted unbounded job continues from its last completed
    checkpoint (Kafka positions, keyed state, the sink's run id), which keeps it exactly once across
    process restarts. ``--fresh`` starts over from the consumer group's committed offsets instead.
    """
    from lakestream.flink_runtime import latest_checkpoint

    folder = Path(cfg.flink.checkpoint_dir) / job.replace("/", "-")
    resume_from = latest_checkpoint(folder) if resume else None
    if resume_from is not None:
        print(f"resuming from checkpoint {resume_from}", flush=True)
    return str(folder), resume_from


def cmd_kafka(args: argparse.Namespace) -> int:
    """Start, stop or inspect the local single-node KRaft broker kept in the background."""
    from devtools import kafka_broker

    try:
        if args.action == "start":
            print(kafka_broker.start_detached(port=args.port).describe())
        elif args.action == "stop":
            before = kafka_broker.stop_detached()
            print("kafka: stopped" if before.running else "kafka: was not running")
        else:
            status = kafka_broker.status_detached()
            print(status.describe())
            return 0 if status.running else 1
    except kafka_broker.KafkaBrokerError as exc:
        print(f"lakestream: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_land(args: argparse.Namespace) -> int:
    """Land raw Kafka records into an append-only Delta table."""
    from flink_jobs.kafka_input import commit_group_offsets, snapshot_end_offsets
    from flink_jobs.land import build_landing_job, landing_group

    cfg = _config(args)
    bootstrap = _bootstrap(cfg)
    end_offsets = snapshot_end_offsets(bootstrap, args.topic) if args.bounded else None
    checkpoint_dir, resume_from = _checkpoints(
        cfg, f"land/{args.table}", resume=not (args.bounded or args.fresh)
    )
    env = build_landing_job(
        cfg,
        bootstrap_servers=bootstrap,
        topics=args.topic,
        table=args.table,
        bounded=args.bounded,
        starting_offsets=args.starting_offsets,
        end_offsets=end_offsets,
        checkpoint_dir=checkpoint_dir,
        resume_from=resume_from,
    )
    env.execute(args.job_name or f"lakestream-land {args.table}")
    if end_offsets is not None:
        commit_group_offsets(bootstrap, landing_group(cfg), end_offsets)
    if args.bounded:
        from flink_jobs.tables import print_tables

        print_tables(cfg.lakehouse.root)
    return 0


def cmd_tables(args: argparse.Namespace) -> int:
    """List the Delta tables under the lakehouse root with their row counts and versions."""
    from flink_jobs.tables import print_tables

    print_tables(_config(args).lakehouse.root)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the main job end to end on the embedded default and show the tables it wrote."""
    from flink_jobs.demo import run_demo

    return run_demo(_config(args), events=args.events)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and for ``--help`` docs)."""
    parser = argparse.ArgumentParser(prog="lakestream", description=__doc__)
    parser.add_argument("--config", type=Path, default=None, help="TOML config file (see config/)")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--lakehouse", help="override lakehouse.root (where Delta tables live)")
        p.add_argument("--bootstrap-servers", help="override kafka.bootstrap_servers")

    p = sub.add_parser("kafka", help="local single-node Kafka broker (loopback only)")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--port", type=int, default=None, help="broker port (default: a free one)")
    p.set_defaults(func=cmd_kafka)

    p = sub.add_parser("land", help="land raw Kafka records into a Delta table, exactly once")
    common(p)
    p.add_argument("--topic", action="append", required=True, help="topic to read (repeatable)")
    p.add_argument("--table", required=True, help="table name under the lakehouse root, e.g. raw/orders")
    p.add_argument("--bounded", action="store_true", help="stop at the offsets present at start")
    p.add_argument("--starting-offsets", choices=["committed", "earliest", "latest"], default="committed")
    p.add_argument("--job-name", default=None)
    p.add_argument(
        "--fresh", action="store_true", help="do not resume from the job's last retained checkpoint"
    )
    p.set_defaults(func=cmd_land)

    from flink_jobs.changefeed import add_changefeed_parser
    from flink_jobs.ingest import add_ingest_parser

    add_ingest_parser(sub)
    add_changefeed_parser(sub)

    p = sub.add_parser("tables", help="list Delta tables with row counts")
    common(p)
    p.set_defaults(func=cmd_tables)

    p = sub.add_parser("demo", help="embedded broker + sample events + the main job, bounded")
    common(p)
    p.add_argument("--events", type=int, default=2000, help="sample events to produce")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lakestream`` console script and of ``flink run -py flink_jobs/__main__.py``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from lakestream.flink_runtime import FlinkRuntimeError
    from lakestream.paths import MissingBuildError

    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"lakestream: configuration error: {exc}", file=sys.stderr)
        return 2
    except (FlinkRuntimeError, MissingBuildError) as exc:
        print(f"lakestream: {exc}", file=sys.stderr)
        return 2
