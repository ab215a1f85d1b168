"""``lakestream query metrics``: the gold windows of a time range, as served, with the day's totals.

  metrics --from T1 --to T2 [--as-of VERSION|TIME] [--format table|json|csv]
  silver [--order-id ID ...] [--format table|json|csv] [--sql]     (``flink_jobs.silver_query``)

The windows whose start lies in ``[T1, T2)``: per window the batch row where the batch layer has it,
else the realtime row (DESIGN.md section 12), each with its layer and data time, and the running totals
of its UTC day. Times are ISO 8601 (2024-06-01, 2024-06-01T04:00:00Z); a time without offset is UTC.
"""

from __future__ import annotations

import argparse
import sys

from flink_jobs import silver_query
from flink_jobs.cli_common import SubParsers, add_command, load
from flink_jobs.gold_read import open_gold, parse_as_of, read_rows
from flink_jobs.metrics_format import FORMATS, csv_text, json_text, table_text
from lakestream.metrics_view import batch_through, check_window, in_range, running_totals, select_windows
from lakestream.time_args import ACCEPTED_FORMS, iso_utc, parse_range, utc_day


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
    parent = add_command(
        subparsers,
        "query",
        func=lambda _args: 2,
        help="read served gold metrics (per window, batch or realtime) or the current silver orders",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parent.add_subparsers(dest="what", required=True)
    p = add_command(
        sub, "metrics", func=cmd_metrics, flags=("lakehouse",), help="gold windows of [--from, --to)"
    )
    p.add_argument("--from", dest="start", required=True, help=f"first time, inclusive ({ACCEPTED_FORMS})")
    p.add_argument("--to", dest="end", required=True, help="end time, exclusive (same forms)")
    p.add_argument(
        "--as-of", default=None, help="read an older gold version: a version number or an ISO 8601 time"
    )
    p.add_argument("--format", choices=FORMATS, default="table", help="table (default), json or csv")
    silver_query.register(sub)
    return p
