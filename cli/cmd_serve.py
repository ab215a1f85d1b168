"""``lakestream serve``: the gold metrics over HTTP, JSON and a live page, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType
from typing import Any

from cli.common import SubParsers, add_command, load
from lakestream.config import is_loopback
from serving import serve
from serving.serve import make_server


def _stop_on_sigterm() -> None:
    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


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
    server = make_server(cfg, quiet=args.quiet)
    host, port = str(server.server_address[0]), int(server.server_address[1])
    if not is_loopback(cfg.serve.host):
        print(
            f"warning: listening on {cfg.serve.host}, not loopback: anyone who reaches this address can "
            "read the metrics (no authentication)",
            file=sys.stderr,
            flush=True,
        )
    shown = f"[{host}]" if ":" in host else host
    print(
        f"serving {cfg.lakehouse.table_uri(cfg.gold.table)} at http://{shown}:{port}/ (Ctrl-C stops)",
        flush=True,
    )
    _stop_on_sigterm()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        print("stopped", flush=True)
    finally:
        server.server_close()
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
