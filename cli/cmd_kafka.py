"""``lakestream kafka start|status|stop``: the local single-node KRaft broker, loopback only."""

from __future__ import annotations

import argparse

from cli.common import SubParsers, add_command
from devtools import kafka_broker


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


def register(subparsers: SubParsers) -> None:
    """Register ``lakestream kafka``."""
    p = add_command(
        subparsers, "kafka", func=cmd_kafka, help="local single-node Kafka broker (loopback only)"
    )
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--port", type=int, default=None, help="broker port (default: a free one)")
