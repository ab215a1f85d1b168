"""``lakestream tables``: the Delta tables under the lakehouse root, or one of them as of an older version."""

from __future__ import annotations

import argparse

from cli.common import SubParsers, add_command, load
from lakestream.config import ConfigError
from lakestream.time import parse_time


def cmd_tables(args: argparse.Namespace) -> int:
    """List the Delta tables under the lakehouse root with their row counts and versions, or read one
    table (or all) as of an older version or time."""
    from maintenance.facts import resolve_table
    from serving.table_summary import print_table_at, print_tables

    cfg = load(args)
    as_of = None if args.as_of is None else parse_time(args.as_of, name="--as-of")
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
        print_tables(cfg.lakehouse.root, as_of=as_of)
        return 0
    ref = resolve_table(cfg, args.table)
    at = args.version if args.version is not None else as_of
    print_table_at(ref.uri, ref.name, at, rows=args.rows)
    return 0


def register(subparsers: SubParsers) -> None:
    """Register ``lakestream tables``."""
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
