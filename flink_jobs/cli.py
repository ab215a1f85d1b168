"""``lakestream`` command line: run jobs (MiniCluster or ``flink run -py``), manage the local broker.

Each sub-command validates the whole configuration before it starts anything, so a typo fails in a
second with the key and the fix rather than inside a Flink worker.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from devtools import kafka_broker
from flink_jobs import changefeed, demo, gold_batch, ingest, land, maintain
from flink_jobs.cli_common import JobFailedError, SubParsers, add_command, add_flags, load
from flink_jobs.resume import ResumeError
from lakestream.config import ConfigError
from lakestream.flink_runtime import FlinkRuntimeError
from lakestream.gold import GmvOverflowError, GoldTableError
from lakestream.paths import MissingBuildError
from maintenance.errors import ConflictError, MaintenanceError
from maintenance.gold_batch import StagingCheckError
from sources.errors import DeltaSourceError


def cmd_kafka(args: argparse.Namespace) -> int:
    """Start, stop or inspect the local single-node KRaft broker kept in the background."""
    if args.action == "start":
        print(kafka_broker.start_detached(port=args.port).describe())
    elif args.action == "stop":
        before = kafka_broker.stop_detached()
        print("kafka: stopped" if before.running else "kafka: was not running")
    else:
        status = kafka_broker.status_detached()
        print(status.describe())
        return 0 if status.running else 1
    return 0


def cmd_tables(args: argparse.Namespace) -> int:
    """List the Delta tables under the lakehouse root with their row counts and versions, or read one
    table (or all) as of an older version or time."""
    from flink_jobs.tables import print_table_at, print_tables
    from maintenance.facts import resolve_table

    cfg = load(args)
    if args.table is None:
        if args.version is not None:
            raise ConfigError(
                "--version: versions differ per table; name one, e.g. "
                "`lakestream tables silver/orders --version 3`"
            )
        if args.rows:
            raise ConfigError(
                "--rows: name the table to show rows of, e.g. `lakestream tables silver/orders --rows 10`"
            )
        print_tables(cfg.lakehouse.root, as_of=args.as_of)
        return 0
    ref = resolve_table(cfg, args.table)
    at = args.version if args.version is not None else args.as_of
    print_table_at(ref.uri, ref.name, at, rows=args.rows)
    return 0


def _register_kafka(subparsers: SubParsers) -> None:
    p = add_command(
        subparsers, "kafka", func=cmd_kafka, help="local single-node Kafka broker (loopback only)"
    )
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--port", type=int, default=None, help="broker port (default: a free one)")


def _register_tables(subparsers: SubParsers) -> None:
    p = add_command(
        subparsers,
        "tables",
        func=cmd_tables,
        flags=("lakehouse", "bootstrap_servers"),
        help="list Delta tables with row counts, or read one as of an older version (time travel)",
    )
    p.add_argument("table", nargs="?", default=None, help="one table (under lakehouse.root, or a path)")
    at = p.add_mutually_exclusive_group()
    at.add_argument("--version", type=int, default=None, help="read TABLE at this version")
    at.add_argument(
        "--as-of", default=None, help="read as of this time (RFC 3339, e.g. 2026-12-01T08:00:00Z)"
    )
    p.add_argument("--rows", type=int, default=0, help="also print up to this many rows of TABLE")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and for ``--help`` docs)."""
    parser = argparse.ArgumentParser(prog="lakestream", description=__doc__)
    add_flags(parser, "config")
    sub = parser.add_subparsers(dest="command", required=True)
    _register_kafka(sub)
    land.register(sub)
    ingest.register(sub)
    changefeed.register(sub)
    _register_tables(sub)
    maintain.register(sub)
    gold_batch.register(sub)
    demo.register(sub)
    return parser


def failure(exc: Exception, command: str) -> tuple[int, str] | None:
    """The exit code and message of an error that ends sub-command ``command``; None: not one of ours."""
    if isinstance(exc, ConfigError):
        return 2, f"lakestream: configuration error: {exc}"
    if isinstance(exc, FlinkRuntimeError | MissingBuildError | kafka_broker.KafkaBrokerError):
        return 2, f"lakestream: {exc}"
    if isinstance(exc, DeltaSourceError | ResumeError):
        return 2, f"lakestream {command}: {exc}"
    if isinstance(exc, ConflictError | StagingCheckError | GmvOverflowError):
        return 1, f"lakestream {command}: {exc}"
    if isinstance(exc, GoldTableError):
        return 2, f"lakestream {command}: {exc}"
    if isinstance(exc, MaintenanceError):
        return 2, f"lakestream {command}: {exc}"
    if isinstance(exc, JobFailedError):
        return 1, f"lakestream {command}: job failed: {exc}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lakestream`` console script and of ``flink run -py flink_jobs/__main__.py``."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except Exception as exc:
        ended = failure(exc, args.command)
        if ended is None:
            raise
        code, message = ended
        print(message, file=sys.stderr)
        return code
