"""``lakestream s3 start|status|stop``: the local S3-compatible server (S3Proxy), loopback only.

It prints the endpoint, the buckets, the access key and how to point delta-rs at the server; the secret
key is never printed, only where it is kept (the owner-only state file). ``env`` prints the ``export``
line of the AWS variables for a shell, which reads the secret from that file when it runs.
"""

from __future__ import annotations

import argparse
import sys

from cli.common import SubParsers, add_command
from devtools import s3_server


def cmd_s3(args: argparse.Namespace) -> int:
    """Start, stop or inspect the local S3 server kept in the background."""
    if args.action == "start":
        buckets = args.bucket or [s3_server.DEFAULT_BUCKET]
        status = s3_server.start_detached(port=args.port, buckets=buckets)
        print("\n".join(describe(status)))
    elif args.action == "stop":
        before = s3_server.stop_detached()
        print("s3: stopped" if before.running else "s3: was not running")
    elif args.action == "env":
        status = s3_server.status_detached(probe=False)
        if not status.running or status.endpoint is None:
            print(status.describe(), file=sys.stderr)
            return 1
        # For eval: the secret is not in the text, the line reads it from the owner-only state file.
        print(status.export_line())
    else:
        status = s3_server.status_detached()
        print("\n".join(describe(status)))
        return 0 if status.running else 1
    return 0


def describe(status: s3_server.S3Status) -> list[str]:
    """The lines ``start`` and ``status`` print: the status, buckets, key pair and how to use it."""
    lines = [status.describe()]
    if not status.running or status.endpoint is None:
        return lines
    state = str(status.state_file)
    if status.buckets is not None:
        names = ", ".join(f"s3://{b}/" for b in status.buckets) or "none (start it with --bucket NAME)"
        lines.append(f"  buckets: {names}")
    lines += [
        f"  access key: {status.endpoint.access_key}; secret key: not shown, kept in {state} "
        '(owner-only, key "secret_key")',
        "  delta-rs in Python: write_deltalake('s3://BUCKET/TABLE', data, storage_options="
        "devtools.s3_server.status_detached().storage_options())",
        "  delta-rs from the environment: " + status.export_line(),
    ]
    return lines


def register(subparsers: SubParsers) -> None:
    """Register ``lakestream s3``."""
    p = add_command(subparsers, "s3", func=cmd_s3, help="local S3-compatible server, S3Proxy (loopback only)")
    p.add_argument(
        "action",
        choices=["start", "stop", "status", "env"],
        help="env: an export line of the AWS variables for a shell (eval \"$(lakestream s3 env)\")",
    )
    p.add_argument("--port", type=int, default=None, help="server port (default: a free one)")
    p.add_argument(
        "--bucket",
        action="append",
        default=None,
        metavar="NAME",
        help=f"create this bucket, on start (repeatable; default: {s3_server.DEFAULT_BUCKET})",
    )
