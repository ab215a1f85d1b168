"""``lakestream backfill`` and ``lakestream reconcile``: the gold batch layer from the command line.

  backfill --from T1 --to T2                     recompute [T1, T2) from bronze and replace it in gold
  reconcile --from T1 --to T2 [--threshold X] [--fix] [--as-of VERSION]
                                                 compare gold with the recompute; --fix backfills

Times are ISO 8601 (``2024-06-01``, ``2024-06-01T04:00:00Z``; without an offset: UTC) on gold.window
boundaries. Exit codes: 0 done (reconcile: nothing above the threshold), 1 a commit conflict outlasted
the retries, or reconcile found differences above the threshold (or could not fix them), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timezone
from decimal import Decimal, InvalidOperation

from batch.backfill import backfill
from batch.reconcile import ReconcileResult, reconcile
from cli.common import SubParsers, add_command, load
from lakestream.config import ConfigError
from lakestream.reconcile_rules import Difference
from lakestream.table_names import BRONZE_TABLE
from lakestream.time import ACCEPTED_FORMS, iso_utc, parse_time

UTC = timezone.utc


def parse_threshold(text: str | None) -> Decimal | None:
    """``--threshold``: a decimal number >= 0 (None: reconcile.threshold)."""
    if text is None:
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        value = Decimal(-1)
    if not value.is_finite() or value < 0:
        raise ConfigError(
            f"--threshold {text!r}: expected a number >= 0 such as 0 or 0.5 (absolute, per metric)"
        )
    return value


def _say(line: str) -> None:
    print(line, flush=True)


def cmd_backfill(args: argparse.Namespace) -> int:
    """Recompute ``[--from, --to)`` from bronze at one version and replace it in gold in one commit."""
    cfg = load(args, writes=True)
    start, end = parse_time(args.start, name="--from"), parse_time(args.end, name="--to")
    backfill(cfg, cfg.lakehouse.table_uri(BRONZE_TABLE), start, end, report=_say, force=args.force)
    return 0


def _value(v: Decimal) -> str:
    return str(v.normalize()) if v == v.to_integral_value() else str(v)


def print_differences(differences: list[Difference], threshold: Decimal, title: str) -> None:
    """The differences as a table: window, metric, gold, recomputed, difference (marked above threshold)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for name in ("window", "metric", "gold", "recomputed", "difference"):
        table.add_column(name, justify="left" if name in ("window", "metric") else "right")
    for d in differences:
        mark = "" if d.exceeds(threshold) else " (within threshold)"
        table.add_row(
            f"{iso_utc(d.window_start)} .. {iso_utc(d.window_end)}",
            d.metric,
            _value(d.gold),
            _value(d.recomputed),
            f"{d.difference:+}{mark}",
        )
    Console(file=sys.stdout, width=120).print(table)


def _windows(differences: list[Difference]) -> str:
    starts = sorted({d.window_start for d in differences})
    return ", ".join(iso_utc(s) for s in starts)


def describe(result: ReconcileResult, max_fixes: int) -> list[str]:
    """The run's closing lines: verdict, what was fixed or why not."""
    lines: list[str] = []
    n = len({d.window_start for d in result.exceeding})
    if result.differences:
        lines.append(f"reconcile: {len(result.differences)} difference(s) recorded in run {result.run_id}")
    if not result.exceeding:
        lines.append(f"reconcile: gold matches bronze (threshold {result.threshold}); nothing to fix")
        return lines
    lines.append(
        f"reconcile: {n} window(s) differ above the threshold {result.threshold}: "
        f"{_windows(result.exceeding)}"
    )
    if result.budget_spent:
        lines.append(
            f"reconcile: not fixing: {result.fixes_today} fix run(s) today already, "
            f"reconcile.max_fixes_per_day is {max_fixes}; a person must look at these windows: "
            f"{_windows(result.exceeding)}"
        )
    elif result.after is not None:
        ranges = ", ".join(
            f"{iso_utc(b.recompute.start)} .. {iso_utc(b.recompute.end)}" for b in result.fixed
        )
        lines.append(f"reconcile: fixed by {len(result.fixed)} backfill(s): {ranges}")
        if result.after:
            lines.append(f"reconcile: still differing after the fix: {_windows(result.after)}")
        else:
            lines.append("reconcile: re-checked: gold matches bronze now")
    else:
        lines.append("reconcile: run with --fix to backfill them")
    return lines


def cmd_reconcile(args: argparse.Namespace) -> int:
    """Compare gold with a recompute from bronze; exit 1 when a metric differs by more than the threshold."""
    cfg = load(args, writes=True)
    start, end = parse_time(args.start, name="--from"), parse_time(args.end, name="--to")
    threshold = parse_threshold(args.threshold)
    result = reconcile(
        cfg,
        cfg.lakehouse.table_uri(BRONZE_TABLE),
        start,
        end,
        threshold=threshold,
        fix=args.fix,
        version=args.as_of,
        include_open=args.include_open,
        report=_say,
        show=lambda differences, limit: print_differences(differences, limit, "gold against bronze"),
    )
    for line in describe(result, cfg.reconcile.max_fixes_per_day):
        _say(line)
    return result.code


def _range_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from",
        dest="start",
        required=True,
        metavar="T1",
        help=f"range start, e.g. {ACCEPTED_FORMS} (no offset: UTC)",
    )
    p.add_argument("--to", dest="end", required=True, metavar="T2", help="range end (exclusive)")


def register(subparsers: SubParsers) -> None:
    """Register ``lakestream backfill`` and ``lakestream reconcile``."""
    p = add_command(
        subparsers,
        "backfill",
        func=cmd_backfill,
        flags=("lakehouse",),
        help="recompute gold windows [--from, --to) from bronze and replace them (batch layer)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _range_flags(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="also replace windows the speed layer may still update (they will miss its later events)",
    )
    p = add_command(
        subparsers,
        "reconcile",
        func=cmd_reconcile,
        flags=("lakehouse",),
        help="compare gold windows with a recompute from bronze; --fix backfills the differing ones",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _range_flags(p)
    p.add_argument(
        "--threshold", default=None, help="absolute difference allowed per metric (reconcile.threshold)"
    )
    p.add_argument("--fix", action="store_true", help="backfill the windows that differ above the threshold")
    p.add_argument(
        "--include-open",
        action="store_true",
        help="also compare windows the speed layer may still update (left out by default)",
    )
    p.add_argument(
        "--as-of", type=int, default=None, metavar="VERSION", help="bronze version to recompute from"
    )
