"""``lakestream`` command line: run jobs (MiniCluster or ``flink run -py``), manage the local services.

Each sub-command validates the whole configuration before it starts anything, so a typo fails in a
second with the key and the fix rather than inside a Flink worker.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cli import (
    cmd_batch,
    cmd_changefeed,
    cmd_demo,
    cmd_explain,
    cmd_ingest,
    cmd_kafka,
    cmd_land,
    cmd_maintain,
    cmd_query,
    cmd_s3,
    cmd_serve,
    cmd_tables,
)
from cli.common import add_flags
from lakestream.errors import exit_status


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and for ``--help`` docs)."""
    parser = argparse.ArgumentParser(prog="lakestream", description=__doc__)
    add_flags(parser, "config")
    sub = parser.add_subparsers(dest="command", required=True)
    cmd_kafka.register(sub)
    cmd_s3.register(sub)
    cmd_land.register(sub)
    cmd_ingest.register(sub)
    cmd_changefeed.register(sub)
    cmd_tables.register(sub)
    cmd_maintain.register(sub)
    cmd_batch.register(sub)
    cmd_query.register(sub)
    cmd_explain.register(sub)
    cmd_serve.register(sub)
    cmd_demo.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lakestream`` console script and of ``flink run -py cli/__main__.py``.

    An error of ours ends the sub-command with its exit code and message (``lakestream.errors``); any
    other exception is a bug and keeps its traceback.
    """
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except Exception as exc:
        ended = exit_status(exc, args.command)
        if ended is None:
            raise
        code, message = ended
        print(message, file=sys.stderr)
        return code
