"""``lakestream maintain``: keep tables healthy while the streaming jobs write them.

  optimize TABLE [--zorder COLS] [--where PREDICATE]   compact small files (or Z-order)
  vacuum TABLE [--retain-hours H] [--full] [--delete]  list (default) or delete removed files
  checkpoint TABLE                                     write a log checkpoint
  cleanup TABLE                                        delete expired log files
  history TABLE [--limit N]                            the table's commits
  restore TABLE --version N | --timestamp T            restore an earlier version (new commit)
  properties TABLE [--set KEY=VALUE ...]               show or set table properties
  readers TABLE [--forget READER]                      Delta-source readers and how far back they read
  fold                                                 fold merge-on-read silver changes into silver/orders
  auto [--once]                                        scheduled rounds ([maintenance] settings)

TABLE is a name under lakehouse.root as `lakestream tables` shows it (bronze/order_events,
silver/orders, ...) or a path/URI. Vacuum, cleanup, restore and some properties are refused where they
would break what a running job or changefeed still needs; --force overrides, except that a full vacuum
never deletes files a sink staged and has not committed.
"""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Callable
from types import FrameType

from cli.common import SubParsers, add_command, add_group, load, under_root
from lakestream.config import Config
from lakestream.time import format_duration, plain_utc
from maintenance import operations
from maintenance.facts import TableRef, resolve_table
from maintenance.maintenance_errors import MaintenanceError
from storage.retry_policy import RetryPolicy


def _ref(args: argparse.Namespace, *, writes: bool = False) -> tuple[Config, TableRef]:
    """The configuration and the table; ``writes``: the operation writes the table, so a root it lies
    under is checked to be writable first."""
    cfg = load(args, writes=writes and under_root(args.table))
    return cfg, resolve_table(cfg, args.table)


def cmd_optimize(args: argparse.Namespace) -> int:
    """Compact (or Z-order) the table, retrying across conflicts with the streaming commits."""
    cfg, ref = _ref(args, writes=True)
    zorder = [c.strip() for c in (args.zorder or "").split(",") if c.strip()]
    if args.zorder is not None and not zorder:
        raise MaintenanceError("--zorder: give comma-separated column names, e.g. --zorder order_id")
    result = operations.optimize(
        ref,
        zorder=zorder,
        where=args.where,
        target_size=args.target_size_mb * 1024 * 1024 if args.target_size_mb else None,
        bloom_filters=cfg.tables.bloom_filter_columns,
        retry=RetryPolicy(max_attempts=cfg.maintenance.retry_attempts),
        tasks=cfg.maintenance.rewrite_tasks,
    )
    kind = f"z-order by {', '.join(zorder)}" if zorder else "compaction"
    print(
        f"optimize {ref.name} ({kind}): {result.files_removed} files -> {result.files_added} in "
        f"{result.partitions} partition(s), version {result.version}, {result.attempts} attempt(s)"
    )
    return 0


def cmd_vacuum(args: argparse.Namespace) -> int:
    """List what a VACUUM would delete, or delete it with ``--delete``, after the retention checks."""
    cfg, ref = _ref(args, writes=args.delete)
    result = operations.vacuum(
        ref, cfg, retain_hours=args.retain_hours, dry_run=not args.delete, full=args.full, force=args.force
    )
    verdict = result.verdict
    mode = "full" if result.full else "lite"
    needs = "; ".join(f"{r.rule} {format_duration(r.minimum)}" for r in verdict.requirements)
    print(f"vacuum {ref.name}: retention {verdict.retention_hours}h, {mode} mode")
    print(f"needed: at least {verdict.minimum_hours}h ({needs})")
    if result.dry_run:
        print(f"dry run: {len(result.files)} file(s) would be deleted")
    else:
        print(f"deleted {len(result.files)} file(s)")
    for path in result.files:
        print(f"  {path}")
    if result.dry_run:
        if verdict.allowed:
            print(
                "a run with --delete is allowed"
                + (" (forced)" if verdict.forced and verdict.violated else "")
            )
        else:
            print(f"a run with --delete would be refused:\n{verdict.explain()}")
    elif verdict.forced and verdict.violated:
        print(f"forced past:\n{verdict.explain()}")
    return 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    """Write a checkpoint of the log at the current version."""
    _, ref = _ref(args, writes=True)
    print(f"checkpoint {ref.name}: written at version {operations.checkpoint(ref)}")
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    """Delete log files older than ``delta.logRetentionDuration``, unless a reader still needs them."""
    cfg, ref = _ref(args, writes=True)
    result = operations.cleanup(ref, cfg, force=args.force)
    print(
        f"cleanup {ref.name}: {result.removed} expired log file(s) deleted "
        f"(delta.logRetentionDuration {format_duration(result.verdict.log_retention)})"
    )
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """Print the table's commits, newest first."""
    _, ref = _ref(args)
    for line in operations.history_lines(ref, limit=args.limit or None):
        print(line)
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    """Restore an earlier version as a new commit (``--force`` for a table a streaming sink writes)."""
    cfg, ref = _ref(args, writes=True)
    result = operations.restore(ref, cfg, version=args.version, timestamp=args.timestamp, force=args.force)
    for warning in result.warnings:
        print(f"warning: {warning}")
    print(f"restore {ref.name}: version {result.target_version} restored as version {result.new_version}")
    return 0


def cmd_properties(args: argparse.Namespace) -> int:
    """Show the table's properties, or set some (one metadata commit)."""
    cfg, ref = _ref(args, writes=bool(args.set))
    if args.set:
        changes = operations.parse_assignments(args.set)
        warnings = operations.set_properties(
            ref, changes, force=args.force, retry=RetryPolicy(max_attempts=cfg.maintenance.retry_attempts)
        )
        for warning in warnings:
            print(f"warning: {warning}")
        print(f"properties {ref.name}: set {', '.join(f'{k}={v}' for k, v in changes.items())}")
    props = operations.properties(ref)
    if not props:
        print(f"{ref.name}: no table properties set")
    for key, value in props.items():
        print(f"  {key} = {value}")
    return 0


def cmd_readers(args: argparse.Namespace) -> int:
    """List the recorded Delta-source readers, or forget one that is gone for good."""
    cfg, ref = _ref(args, writes=bool(args.forget))
    if args.forget:
        operations.forget_reader(ref, args.forget)
        print(f"readers {ref.name}: forgot {args.forget!r}")
        return 0
    statuses = operations.readers(ref, cfg)
    if not statuses:
        print(f"{ref.name}: no Delta-source reader recorded")
    for s in statuses:
        print(
            f"  {s.record.reader}: may still read from version {s.needed_version}; newest position "
            f"{s.record.positions[-1][1] if s.record.positions else '?'}, last seen "
            f"{plain_utc(s.record.updated_ms, suffix=False)}"
        )
    return 0


def cmd_fold(args: argparse.Namespace) -> int:
    """Fold silver's changes into its snapshot once (``tables.silver_layout = "merge_on_read"``)."""
    from merge_on_read.fold_changes import fold_once
    from merge_on_read.table import silver_mor_table

    cfg = load(args, writes=True)
    if cfg.tables.silver_layout != "merge_on_read":
        raise MaintenanceError(
            "fold: silver is copy-on-write (tables.silver_layout); there are no changes to fold. Set "
            'tables.silver_layout = "merge_on_read" for the merge-on-read layout (DESIGN.md section 13).'
        )
    table = silver_mor_table(cfg)
    r = fold_once(table, retention=cfg.tables.silver_changes_retention, full=args.full)
    if r.change_rows == 0:
        print(f"fold: {table.snapshot_uri} held every change (through {r.folded_through})")
    else:
        print(
            f"fold: {r.change_rows} change rows ({r.keys} orders) into {table.snapshot_uri} as a new run, "
            f"through {r.folded_through}"
        )
    merged = (
        f"{r.runs_merged} runs merged ({r.files_rewritten} file(s), {r.bytes_rewritten:,} bytes rewritten)"
        if r.runs_merged
        else "no runs merged"
    )
    print(
        f"fold: {merged}; version {r.snapshot_version}, {r.runs} run(s), {r.rows_written} rows written, "
        f"{r.trimmed_rows} folded change rows trimmed, {r.seconds:.1f}s"
    )
    return 0


def cmd_auto(args: argparse.Namespace) -> int:
    """Run maintenance rounds every ``maintenance.interval`` until Ctrl-C (or one with ``--once``).

    The first Ctrl-C (or SIGTERM) stops after the running operation (a Delta commit is all or
    nothing, but an operation half done is wasted work); a second one interrupts at once.
    """
    from maintenance import auto

    cfg = load(args, writes=True)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        print("maintain auto: stopping after the current operation (Ctrl-C again to interrupt)", flush=True)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rounds = auto.run(cfg, once=args.once, stop=stop, report=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print("maintain auto: interrupted")
        return 130
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    print(f"maintain auto: stopped after {rounds} round(s)")
    return 0


def _table_command(
    sub: SubParsers, name: str, func: Callable[[argparse.Namespace], int], help_text: str
) -> argparse.ArgumentParser:
    p = add_command(sub, name, func=func, flags=("lakehouse",), help=help_text)
    p.add_argument("table", help="table under lakehouse.root (e.g. silver/orders), or a path/URI")
    return p


def register(subparsers: SubParsers) -> argparse.ArgumentParser:
    """Register ``lakestream maintain`` and its operations."""
    parent, sub = add_group(
        subparsers,
        "maintain",
        dest="operation",
        help="table maintenance: optimize, vacuum, checkpoint, cleanup, history, restore, properties, auto",
        description=__doc__,
    )

    p = _table_command(sub, "optimize", cmd_optimize, "compact small files, or Z-order with --zorder")
    p.add_argument("--zorder", default=None, help="comma-separated columns to Z-order by")
    p.add_argument(
        "--where",
        default=None,
        help="partitions to optimize, e.g. \"source = 'payments'\" (partition columns)",
    )
    p.add_argument(
        "--target-size-mb", type=int, default=None, help="file size to aim for (default: the table's)"
    )

    p = _table_command(sub, "vacuum", cmd_vacuum, "list (default) or delete files removed from the table")
    p.add_argument(
        "--retain-hours", type=int, default=None, help="default: delta.deletedFileRetentionDuration"
    )
    p.add_argument("--full", action="store_true", help="also files the log never had (orphans)")
    p.add_argument("--delete", action="store_true", help="delete the files (default: dry run, list them)")
    p.add_argument("--force", action="store_true", help="vacuum below what jobs and readers need")

    _table_command(sub, "checkpoint", cmd_checkpoint, "write a log checkpoint at the current version")

    p = _table_command(sub, "cleanup", cmd_cleanup, "delete log files older than delta.logRetentionDuration")
    p.add_argument("--force", action="store_true", help="even when a Delta-source reader still needs them")

    p = _table_command(sub, "history", cmd_history, "the table's commits, newest first")
    p.add_argument("--limit", type=int, default=20, help="commits to show (0: all)")

    p = _table_command(sub, "restore", cmd_restore, "restore an earlier version as a new commit")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--version", type=int, default=None)
    target.add_argument("--timestamp", default=None, help="RFC 3339, e.g. 2026-12-01T08:00:00Z")
    p.add_argument("--force", action="store_true", help="restore a table a streaming sink writes")

    p = _table_command(sub, "properties", cmd_properties, "show or set table properties")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    p.add_argument("--force", action="store_true", help="set values that break a lakestream reader or writer")

    p = _table_command(sub, "readers", cmd_readers, "Delta-source readers of the table and their positions")
    p.add_argument(
        "--forget", default=None, metavar="READER", help="drop the record of a reader gone for good"
    )

    p = add_command(
        sub,
        "fold",
        func=cmd_fold,
        flags=("lakehouse",),
        help="fold merge-on-read silver changes into silver/orders",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="then merge every sorted run into one (silver/orders holds one row per order)",
    )
    p = add_command(sub, "auto", func=cmd_auto, flags=("lakehouse",), help="scheduled maintenance rounds")
    p.add_argument("--once", action="store_true", help="one round, then exit")
    return parent
