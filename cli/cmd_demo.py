"""``lakestream demo``: the main job end to end on the embedded default, with live progress and a report."""

from __future__ import annotations

import argparse

from cli.common import SubParsers, add_command, load
from demo.run_demo import run_demo
from lakestream.config import ConfigError
from lakestream.time import parse_duration

#: Sample events the demo produces unless ``--events`` says otherwise.
DEFAULT_EVENTS = 2000


def register(subparsers: SubParsers) -> argparse.ArgumentParser:
    """Register ``lakestream demo`` on the CLI's sub-command parsers."""
    p = add_command(
        subparsers,
        "demo",
        func=cmd_demo,
        flags=("lakehouse", "bootstrap_servers"),
        help="embedded broker + sample events + the main job, bounded, with live progress and a report",
    )
    p.add_argument("--events", type=int, default=DEFAULT_EVENTS, help="sample events to produce (about)")
    p.add_argument(
        "--produce-seconds",
        type=float,
        default=10.0,
        help="send the sample's paced part over this many seconds once the job runs (0: all at once)",
    )
    p.add_argument(
        "--checkpoint-interval",
        default="2s",
        help="the demo job's checkpoint (and commit) interval, e.g. 2s (default) or 10s",
    )
    p.add_argument(
        "--progress",
        choices=["auto", "live", "plain"],
        default="auto",
        help="live table (terminal), plain lines every 5 s (logs), or auto (default)",
    )
    p.add_argument(
        "--object-store",
        action="store_true",
        help="tables and checkpoints on the local S3 server (`lakestream s3 start`'s, started if needed "
        "and kept running): s3://lakestream/demo, s3://lakestream/checkpoints/demo",
    )
    return p


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the main job end to end on the embedded default and show the tables it wrote."""
    if args.events < 1:
        raise ConfigError(f"--events: expected a positive number of events, got {args.events}")
    if args.produce_seconds < 0:
        raise ConfigError(f"--produce-seconds: expected 0 or more seconds, got {args.produce_seconds}")
    interval = parse_duration(args.checkpoint_interval, key="--checkpoint-interval", error=ConfigError)
    if interval.total_seconds() <= 0:
        raise ConfigError("--checkpoint-interval: the demo's bounded job needs checkpoints, e.g. 2s")
    return run_demo(
        load(args),
        events=args.events,
        produce_seconds=args.produce_seconds,
        checkpoint_interval=interval,
        progress=args.progress,
        config_path=getattr(args, "config", None),
        object_store=args.object_store,
    )
