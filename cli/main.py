"""``lakestream`` command line: run jobs (MiniCluster or ``flink run -py``), manage the local broker.

Each sub-command validates the whole configuration before it starts anything, so a typo fails in a
second with the key and the fix rather than inside a Flink worker.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from batch.backfill import StagingCheckError
from cli import (
    cmd_batch,
    cmd_changefeed,
    cmd_demo,
    cmd_ingest,
    cmd_kafka,
    cmd_land,
    cmd_maintain,
    cmd_query,
    cmd_serve,
    cmd_tables,
)
from cli.common import add_flags
from devtools import kafka_broker
from flink_jobs.lifecycle import JobFailedError
from flink_jobs.resume import ResumeError
from lakestream.config import ConfigError
from lakestream.gold import GmvOverflowError, GoldTableError
from lakestream.paths import MissingBuildError
from lakestream.time import TimeArgError
from maintenance.errors import ConflictError, MaintenanceError
from runtime.flink_env import FlinkRuntimeError
from serving.metrics_view import GoldDataError
from sources.errors import DeltaSourceError


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and for ``--help`` docs)."""
    parser = argparse.ArgumentParser(prog="lakestream", description=__doc__)
    add_flags(parser, "config")
    sub = parser.add_subparsers(dest="command", required=True)
    cmd_kafka.register(sub)
    cmd_land.register(sub)
    cmd_ingest.register(sub)
    cmd_changefeed.register(sub)
    cmd_tables.register(sub)
    cmd_maintain.register(sub)
    cmd_batch.register(sub)
    cmd_query.register(sub)
    cmd_serve.register(sub)
    cmd_demo.register(sub)
    return parser


def failure(exc: Exception, command: str) -> tuple[int, str] | None:
    """The exit code and message of an error that ends sub-command ``command``; None: not one of ours."""
    if isinstance(exc, ConfigError):
        return 2, f"lakestream: configuration error: {exc}"
    if isinstance(exc, FlinkRuntimeError | MissingBuildError | kafka_broker.KafkaBrokerError):
        return 2, f"lakestream: {exc}"
    if isinstance(exc, DeltaSourceError | ResumeError | TimeArgError):
        return 2, f"lakestream {command}: {exc}"
    if isinstance(exc, ConflictError | StagingCheckError | GmvOverflowError):
        return 1, f"lakestream {command}: {exc}"
    if isinstance(exc, GoldTableError):
        return 2, f"lakestream {command}: {exc}"
    if isinstance(exc, MaintenanceError):
        return 2, f"lakestream {command}: {exc}"
    if isinstance(exc, GoldDataError):
        return 1, f"lakestream {command}: the gold table breaks its contract: {exc}"
    if isinstance(exc, JobFailedError):
        return 1, f"lakestream {command}: job failed: {exc}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lakestream`` console script and of ``flink run -py cli/__main__.py``."""
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
