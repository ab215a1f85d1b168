"""``lakestream explain``: why a number is what it is.

  order ID [--as-of VERSION|TIME] [--format table|json]
  window T [--as-of VERSION|TIME] [--format table|json]

``order``: per silver field its value, the event that set it (id, source, Kafka coordinates, event and
ingest time, the bronze version holding it) and every other event of the order that offered a value,
with why it did not win; then the order's timeline across bronze, late, review and quarantine.
``window``: the gold row of the window holding T (layer, data time, source version), the realtime and
batch figures, what it counted by kind, the re-deliveries and invalid events left out, the events too
late for the speed layer, and the backfills and reconcile runs that touched it. ``--as-of`` is a version
of silver (``silver/orders``; ``silver/orders_changes`` in the merge-on-read layout) or of gold, or a
time; the other tables are read as of the same moment. Exit 2 when there is nothing there to explain.
"""

from __future__ import annotations

import argparse
import json
import sys

from cli.common import SubParsers, add_command, add_group, load
from lakestream.time import ACCEPTED_FORMS, parse_as_of, parse_time
from serving.explain_format import order_json, order_text, window_json, window_text
from serving.explain_read import read_order, read_window


def cmd_order(args: argparse.Namespace) -> int:
    """Print the explanation of one order."""
    cfg = load(args)
    at = None if args.as_of is None else parse_as_of(args.as_of, name="--as-of")
    explanation, versions = read_order(cfg, args.order_id, at)
    if args.format == "json":
        print(json.dumps(order_json(explanation, versions), ensure_ascii=False, indent=1))
    else:
        sys.stdout.write(order_text(explanation, versions))
    return 0


def cmd_window(args: argparse.Namespace) -> int:
    """Print the explanation of the gold window holding a time."""
    cfg = load(args)
    at = None if args.as_of is None else parse_as_of(args.as_of, name="--as-of")
    when = parse_time(args.time, name="window")
    explanation, facts, versions = read_window(cfg, when, at)
    if args.format == "json":
        print(json.dumps(window_json(explanation, facts, versions), ensure_ascii=False, indent=1))
    else:
        sys.stdout.write(window_text(explanation, facts, versions))
    return 0


def register(subparsers: SubParsers) -> argparse.ArgumentParser:
    """Register ``lakestream explain`` and its sub-commands ``order`` and ``window``."""
    parent, sub = add_group(
        subparsers,
        "explain",
        dest="what",
        help="why an order's field or a gold window's figure is what it is",
        description=__doc__,
    )
    as_of_help = "read as of a version (of silver for an order, of gold for a window) or an ISO 8601 time"
    order = add_command(sub, "order", func=cmd_order, flags=("lakehouse",), help="explain one silver order")
    order.add_argument("order_id", help="the order id, exactly as silver holds it")
    window = add_command(
        sub, "window", func=cmd_window, flags=("lakehouse",), help="explain the gold window holding a time"
    )
    window.add_argument("time", help=f"a time in the window ({ACCEPTED_FORMS})")
    for p in (order, window):
        p.add_argument("--as-of", default=None, help=as_of_help)
        p.add_argument("--format", choices=("table", "json"), default="table", help="table (default) or json")
    return parent
