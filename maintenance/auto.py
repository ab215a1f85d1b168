"""``lakestream maintain auto``: rounds of compaction, log checkpoints, vacuum and log cleanup.

Each round looks at every table (``maintenance.tables``, or all under the lakehouse root) and
``plan_round`` decides, as a pure function of the table's file statistics, its last checkpoint and the
settings, what to do: compact (or Z-order) each partition that holds ``min_small_files`` files below
``small_file_mb``; checkpoint the log once ``checkpoint_every`` commits followed the last checkpoint;
every ``vacuum_every``, vacuum removed files at the table's retention and clean up expired log files,
each only when the retention rules allow it without ``--force``. An operation that conflicts past its
retries or is refused is reported and the round goes on; nothing is forced.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

import pyarrow as pa

from lakestream.config import Config, MaintenanceConfig
from lakestream.run_folders import holds_runs
from maintenance.facts import TableRef, last_checkpoint_version, now_ms, resolve_table, tables_under
from maintenance.maintenance_errors import MaintenanceError
from maintenance.operations import checkpoint, cleanup, open_table, optimize, vacuum
from storage.retry_policy import RetryPolicy
from storage.table_files import table_files

log = logging.getLogger(__name__)

ActionKind = Literal["compact", "zorder", "checkpoint", "vacuum", "cleanup"]
PartitionValues = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class PartitionFiles:
    """The small files of one partition (values in partition-column order; ``()``: unpartitioned)."""

    values: PartitionValues
    small_files: int
    small_bytes: int


@dataclass(frozen=True, slots=True)
class TableState:
    """What ``plan_round`` looks at for one table."""

    name: str
    version: int
    #: Version of the newest log checkpoint; None: the log has none.
    last_checkpoint: int | None
    partitions: tuple[PartitionFiles, ...]
    #: Whether the table holds a merge-on-read snapshot's sorted runs (never compacted: it would mix them).
    sorted_runs: bool = False


@dataclass(frozen=True, slots=True)
class Action:
    """One operation of a round, with why it was chosen."""

    kind: ActionKind
    table: str
    reason: str
    #: Partition values to limit a compaction to (``()``: the whole table).
    partition: PartitionValues = ()
    zorder: tuple[str, ...] = ()


def plan_round(
    state: TableState,
    settings: MaintenanceConfig,
    *,
    now_ms: int,
    last_vacuum_ms: int | None,
    compact: bool = True,
) -> list[Action]:
    """The operations one round runs on one table, in order: compaction (unless ``compact`` is false or
    the table holds sorted runs), checkpoint, vacuum, cleanup."""
    actions: list[Action] = []
    compact = compact and not state.sorted_runs
    zorder = settings.zorder_columns(state.name)
    for part in state.partitions:
        if not compact or part.small_files < settings.min_small_files:
            continue
        where = ", ".join(f"{k}={v}" for k, v in part.values) or "whole table"
        reason = (
            f"{part.small_files} files below {settings.small_file_mb} MB "
            f"({part.small_bytes / 1e6:.1f} MB) in {where}"
        )
        actions.append(
            Action(
                "zorder" if zorder else "compact", state.name, reason, partition=part.values, zorder=zorder
            )
        )
    behind = state.version - (state.last_checkpoint if state.last_checkpoint is not None else -1)
    if behind >= settings.checkpoint_every:
        actions.append(Action("checkpoint", state.name, f"{behind} commits since the last checkpoint"))
    due = last_vacuum_ms is None or now_ms - last_vacuum_ms >= settings.vacuum_every.total_seconds() * 1000
    if due and settings.vacuum:
        actions.append(Action("vacuum", state.name, f"every {settings.vacuum_every}"))
    if due and settings.cleanup_logs:
        actions.append(Action("cleanup", state.name, f"every {settings.vacuum_every}"))
    return actions


def small_files_by_partition(
    add_actions: pa.Table, partition_columns: Sequence[str], *, small_bytes: int
) -> tuple[PartitionFiles, ...]:
    """Per partition, the data files below ``small_bytes`` (from ``get_add_actions(flatten=True)``)."""
    sizes = add_actions.column("size_bytes").to_pylist()
    columns = [add_actions.column(f"partition.{c}").to_pylist() for c in partition_columns]
    found: dict[PartitionValues, list[int]] = {}
    for i, size in enumerate(sizes):
        values: PartitionValues = tuple(
            (c, None if col[i] is None else str(col[i]))
            for c, col in zip(partition_columns, columns, strict=True)
        )
        entry = found.setdefault(values, [0, 0])
        if size < small_bytes:
            entry[0] += 1
            entry[1] += size
    return tuple(PartitionFiles(v, n, b) for v, (n, b) in sorted(found.items(), key=lambda kv: str(kv[0])))


def table_state(ref: TableRef, settings: MaintenanceConfig) -> TableState:
    """The current file statistics and checkpoint of one table."""
    dt = open_table(ref)
    adds = pa.table(dt.get_add_actions(flatten=True))
    parts = small_files_by_partition(
        adds, dt.metadata().partition_columns, small_bytes=settings.small_file_mb * 1024 * 1024
    )
    runs = holds_runs(adds["path"].to_pylist()) if adds.num_rows else False
    return TableState(ref.name, dt.version(), last_checkpoint_version(ref), parts, runs)


def find_tables(root: str) -> list[str]:
    """Names (relative to ``root``) of the Delta tables under a lakehouse root, local or on a store."""
    return [name or "." for name in tables_under(table_files(root))]


@dataclass
class Maintainer:
    """Runs rounds over the configured tables; remembers when it last vacuumed each. Tables in
    ``not_compacted`` are checkpointed, vacuumed and cleaned up, never compacted."""

    cfg: Config
    report: Callable[[str], None] = print
    last_vacuum_ms: dict[str, int] = field(default_factory=dict)
    not_compacted: frozenset[str] = frozenset()

    def tables(self) -> list[str]:
        """The tables of this round."""
        return list(self.cfg.maintenance.tables) or find_tables(self.cfg.lakehouse.root)

    def run_round(self, stop: threading.Event | None = None) -> list[str]:
        """One round over every table; returns the report lines (also passed to ``report``)."""
        lines: list[str] = []

        def say(text: str) -> None:
            lines.append(text)
            self.report(text)

        settings = self.cfg.maintenance
        names = self.tables()
        if not names:
            say(f"maintain auto: no Delta tables under {self.cfg.lakehouse.root}")
        for name in names:
            if stop is not None and stop.is_set():
                break
            ref = resolve_table(self.cfg, name)
            try:
                state = table_state(ref, settings)
            except MaintenanceError as exc:
                say(f"{name}: skipped: {exc}")
                continue
            actions = plan_round(
                state,
                settings,
                now_ms=now_ms(),
                last_vacuum_ms=self.last_vacuum_ms.get(name),
                compact=name not in self.not_compacted,
            )
            if not actions:
                say(f"{name}: nothing to do (version {state.version})")
            for action in actions:
                if stop is not None and stop.is_set():
                    break
                say(self._run(ref, action))
        return lines

    def _run(self, ref: TableRef, action: Action) -> str:
        settings = self.cfg.maintenance
        try:
            if action.kind in ("compact", "zorder"):
                # A null partition value has no filter spelling in delta-rs: such a round takes the table.
                exact = [(k, v) for k, v in action.partition if v is not None]
                result = optimize(
                    ref,
                    zorder=action.zorder,
                    partition=exact if len(exact) == len(action.partition) else (),
                    bloom_filters=self.cfg.tables.bloom_filter_columns,
                    retry=RetryPolicy(max_attempts=settings.retry_attempts),
                    tasks=settings.rewrite_tasks,
                )
                return (
                    f"{ref.name}: {action.kind} ({action.reason}): {result.files_removed} files -> "
                    f"{result.files_added}, version {result.version}, {result.attempts} attempt(s)"
                )
            if action.kind == "checkpoint":
                return f"{ref.name}: checkpoint at version {checkpoint(ref)} ({action.reason})"
            if action.kind == "vacuum":
                self.last_vacuum_ms[ref.name] = now_ms()
                done = vacuum(ref, self.cfg, dry_run=False)
                return (
                    f"{ref.name}: vacuum at {done.verdict.retention_hours}h retention: "
                    f"{len(done.files)} removed files deleted"
                )
            cleaned = cleanup(ref, self.cfg)
            return f"{ref.name}: log cleanup: {cleaned.removed} expired log files deleted"
        except MaintenanceError as exc:
            return f"{ref.name}: {action.kind} not done: {exc}"


def run(
    cfg: Config,
    *,
    once: bool = False,
    stop: threading.Event | None = None,
    report: Callable[[str], None] = print,
) -> int:
    """Rounds every ``maintenance.interval`` until ``stop`` is set (one round with ``once``); rounds run."""
    maintainer = Maintainer(cfg, report=report)
    stop = stop or threading.Event()
    rounds = 0
    interval: timedelta = cfg.maintenance.interval
    while not stop.is_set():
        maintainer.run_round(stop)
        rounds += 1
        if once:
            break
        stop.wait(interval.total_seconds())
    return rounds
