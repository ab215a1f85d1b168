"""``lakestream serve``: the gold metrics over HTTP, JSON and a live page, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from cli.common import SubParsers, add_command, load
from lakestream.config import is_loopback
from serving import serve
from serving.http_server import HttpServer


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C (or SIGTERM)."""
    cfg = load(args)
    over: dict[str, Any] = {}
    if args.host is not None:
        over["host"] = args.host
    if args.port is not None:
        over["port"] = args.port
    if args.allow_remote:
        over["allow_remote"] = True
    if over:
        cfg = cfg.replace("serve", **over)
    server = HttpServer(cfg, quiet=args.quiet)
    if not is_loopback(cfg.serve.host):
        print(
            f"warning: listening on {cfg.serve.host}, not loopback: anyone who reaches this address can "
            "read the metrics (no authentication)",
            file=sys.stderr,
            flush=True,
        )
    print(
        f"serving {cfg.lakehouse.table_uri(cfg.gold.table)} at {server.url}/ (Ctrl-C stops)",
        flush=True,
    )
    # uvicorn stops gracefully on SIGINT / SIGTERM, then raises the signal again for the handler it
    # found: SIGINT's raises KeyboardInterrupt, SIGTERM gets one that does the same, so both end here.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    print("stopped", flush=True)
    return 0


def register(subparsers: SubParsers) -> argparse.ArgumentParser:
    """Register ``lakestream serve``."""
    p = add_command(
        subparsers,
        "serve",
        func=cmd_serve,
        flags=("lakehouse",),
        help="HTTP server: gold metrics as JSON and a live page (loopback by default)",
        description=serve.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default=None, help="address to listen on (default serve.host, 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default serve.port, 8000; 0: a free one)")
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --host (serve.allow_remote); there is no authentication",
    )
    p.add_argument("--quiet", action="store_true", help="no line per request on stderr")
    return p
