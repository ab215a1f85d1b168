"""``lakestream query``: the gold windows of a time range as served, with the day's totals; current silver.

  metrics --from T1 --to T2 [--as-of VERSION|TIME] [--format table|json|csv]
  silver [--order-id ID ...] [--format table|json|csv] [--sql]

The windows whose start lies in ``[T1, T2)``: per window the batch row where the batch layer has it,
else the realtime row (DESIGN.md section 12), each with its layer and data time, and the running totals
of its UTC day. Times are ISO 8601 (2024-06-01, 2024-06-01T04:00:00Z); a time without offset is UTC.
"""

from __future__ import annotations

import argparse
import sys

from cli.common import SubParsers, add_command, add_group, load
from lakestream.merge_on_read_rule import DIALECTS
from lakestream.table_names import SILVER_TABLE
from lakestream.time import ACCEPTED_FORMS, iso_utc, parse_as_of, parse_range, utc_day
from merge_on_read.table import silver_mor_table
from serving.gold_read import open_gold, read_rows
from serving.metrics_format import FORMATS, csv_text, json_text, table_text
from serving.metrics_view import batch_through, check_window, in_range, running_totals, select_windows
from serving.silver_query import current_silver, render


def cmd_metrics(args: argparse.Namespace) -> int:
    """Print the served gold windows of ``[--from, --to)`` in ``--format``."""
    cfg = load(args)
    start, end = parse_range(args.start, args.end, names=("--from", "--to"))
    at = None if args.as_of is None else parse_as_of(args.as_of, name="--as-of")
    uri = cfg.lakehouse.table_uri(cfg.gold.table)
    dt = open_gold(uri, at, name="--as-of")
    # From the UTC midnight before --from: the day's running totals count the whole day.
    rows = read_rows(dt, uri, utc_day(start)[0], end)
    check_window(rows, cfg.gold.window)
    day_served = running_totals(select_windows(rows))
    served = in_range(day_served, start, end)
    if args.format == "json":
        print(json_text(served))
    elif args.format == "csv":
        sys.stdout.write(csv_text(served))
    else:
        through = batch_through([s.row for s in served])
        title = (
            f"{cfg.gold.table} version {dt.version()}: windows starting in "
            f"[{iso_utc(start)}, {iso_utc(end)}); "
            + (f"batch through {iso_utc(through)}, realtime after" if through else "no batch rows")
        )
        sys.stdout.write(table_text(day_served, start, end, cfg.gold.window, title=title))
    return 0


def register(subparsers: SubParsers) -> argparse.ArgumentParser:
    """Register ``lakestream query`` and its sub-command ``metrics``."""
    _, sub = add_group(
        subparsers,
        "query",
        dest="what",
        help="read served gold metrics (per window, batch or realtime) or the current silver orders",
        description=__doc__,
    )
    p = add_command(
        sub, "metrics", func=cmd_metrics, flags=("lakehouse",), help="gold windows of [--from, --to)"
    )
    p.add_argument("--from", dest="start", required=True, help=f"first time, inclusive ({ACCEPTED_FORMS})")
    p.add_argument("--to", dest="end", required=True, help="end time, exclusive (same forms)")
    p.add_argument(
        "--as-of", default=None, help="read an older gold version: a version number or an ISO 8601 time"
    )
    p.add_argument("--format", choices=FORMATS, default="table", help="table (default), json or csv")
    register_silver(sub)
    return p


def cmd_silver(args: argparse.Namespace) -> int:
    """Print the current silver rows, or with ``--sql`` the merge-on-read view as SQL."""
    cfg = load(args)
    if args.sql:
        if cfg.tables.silver_layout != "merge_on_read":
            print(
                f"{SILVER_TABLE} is copy-on-write (tables.silver_layout): query it as it is", file=sys.stderr
            )
            return 2
        from merge_on_read.table import view_sql

        table = silver_mor_table(cfg)
        print(f"-- the current {SILVER_TABLE} ({args.dialect} SQL): register {table.snapshot_uri} as")
        print(f"-- snapshot and {table.changes_uri} as changes, then run:")
        print(view_sql(table, dialect=args.dialect) + ";")
        return 0
    limit = args.limit if args.limit is not None else (50 if args.format == "table" else None)
    sys.stdout.write(render(current_silver(cfg, args.order_id or None), args.format, limit))
    return 0


def register_silver(sub: SubParsers) -> argparse.ArgumentParser:
    """Register ``query silver`` on the ``query`` sub-command parsers."""
    p = add_command(
        sub, "silver", func=cmd_silver, flags=("lakehouse",), help="the current silver orders (any layout)"
    )
    p.add_argument("--order-id", action="append", default=[], help="an order to show (repeatable)")
    p.add_argument("--limit", type=int, default=None, help="rows to print (table format default: 50)")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table")
    p.add_argument("--sql", action="store_true", help="print the merge-on-read read as one SQL query")
    p.add_argument(
        "--dialect",
        choices=DIALECTS,
        default="ansi",
        help="--sql quoting: ansi (double quotes, e.g. DataFusion; default) or spark (backticks)",
    )
    return p
