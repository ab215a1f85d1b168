"""``lakestream changefeed``: a Delta table's change data feed to an audit table or Kafka, exactly once."""

from __future__ import annotations

import argparse
from typing import Literal

from cli.common import SubParsers, add_command, load, under_root
from flink_jobs import changefeed
from flink_jobs.changefeed import ChangefeedTarget
from flink_jobs.changefeed_run import ChangefeedRun, run_changefeed
from lakestream.config import ConfigError
from lakestream.time import parse_duration


def _from_version(text: str) -> int | Literal["latest"]:
    if text == "latest":
        return "latest"
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a version number or 'latest', got {text!r}")
    return int(text)


def register(subparsers: SubParsers) -> argparse.ArgumentParser:
    """Register ``lakestream changefeed`` on the CLI's sub-command parsers."""
    p = add_command(
        subparsers,
        "changefeed",
        func=cmd_changefeed,
        flags=("lakehouse", "bootstrap_servers", "fresh", "job_name"),
        help="stream a Delta table's change data feed to an audit Delta table or a Kafka topic, exactly once",
        description=changefeed.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--table", required=True, help="source table under the lakehouse root, e.g. silver/orders")
    p.add_argument("--to", required=True, type=ChangefeedTarget.parse, help="delta:PATH or kafka:TOPIC")
    p.add_argument(
        "--from-version",
        type=_from_version,
        default=None,
        help="first version to emit, or 'latest', for a first run or with --fresh (a later run continues "
        "where the previous one ended); default: the current table as inserts, then its changes",
    )
    p.add_argument("--max-files-per-trigger", type=int, default=None)
    p.add_argument("--max-bytes-per-trigger", type=int, default=None)
    p.add_argument("--poll-interval", default="1s", help="time between polls of the Delta log (e.g. 500ms)")
    p.add_argument(
        "--polls", type=int, default=None, help="stop after this many polls (default: run forever)"
    )
    p.add_argument(
        "--no-fail-on-data-loss",
        dest="fail_on_data_loss",
        action="store_false",
        help="skip versions/files removed by retention or VACUUM (counted in metrics) instead of failing",
    )
    p.add_argument("--schema-changes", choices=["fail", "additive"], default="fail")
    p.add_argument(
        "--at-least-once",
        dest="exactly_once",
        action="store_false",
        help="Kafka output without transactions (duplicates possible after failures)",
    )
    p.add_argument(
        "--from-checkpoint",
        default=None,
        help="resume from this retained checkpoint or savepoint (default: the previous run's newest one, "
        "else the position its output recorded)",
    )
    p.add_argument(
        "--positions-topic",
        default=None,
        help="kafka:TOPIC output: the compacted topic its positions are recorded in, in the same "
        "transactions as the changes (default: TOPIC.lakestream-positions, created when missing)",
    )
    return p


def cmd_changefeed(args: argparse.Namespace) -> int:
    """Run the change-feed job until it is cancelled (or for ``--polls`` polls), from where the previous
    run ended (DESIGN.md section 9)."""
    # Written: the source table (its reader records) and a delta: target.
    written = [args.table, *([args.to.value] if args.to.kind == "delta" else [])]
    cfg = load(args, writes=under_root(*written))
    run = ChangefeedRun(
        table=args.table,
        target=args.to,
        fresh=args.fresh,
        from_version=args.from_version,
        polls=args.polls,
        from_checkpoint=args.from_checkpoint,
        positions_topic=args.positions_topic,
        job_name=args.job_name,
        options={
            "max_files_per_trigger": args.max_files_per_trigger,
            "max_bytes_per_trigger": args.max_bytes_per_trigger,
            "poll_interval": parse_duration(args.poll_interval, key="--poll-interval", error=ConfigError),
            "fail_on_data_loss": args.fail_on_data_loss,
            "schema_changes": args.schema_changes,
            "exactly_once": args.exactly_once,
        },
    )
    return run_changefeed(cfg, run)
