"""``reconcile``: gold against a recompute from bronze, recorded in ``ops/reconciliation``, fixed on request.

The recompute is the backfill's (``batch.backfill.recompute``, gold not written); the
comparison and the fix budget are the pure rules of ``lakestream.reconcile_rules``. Every run appends its
differences (all of them, with whether each exceeded the threshold and was fixed) to the
reconciliation table, which is also where the fix budget is counted. DESIGN.md section 11.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from batch.backfill import (
    BackfillResult,
    RangeError,
    Recompute,
    backfill,
    open_bronze,
    open_from,
    read_gold,
    recompute,
)
from lakestream.config import Config, ConfigError
from lakestream.gold import GoldSettings
from lakestream.reconcile_rules import Difference, compare, contiguous_runs, fix_allowed, fixes_on
from lakestream.standard import TIMESTAMP
from lakestream.time import iso_utc
from storage.sql_query import query

UTC = timezone.utc
VALUE = pa.decimal128(38, 2)

#: One row per difference found by one reconcile run.
RECONCILIATION_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("run_time", TIMESTAMP, nullable=False),
        pa.field("window_start", TIMESTAMP, nullable=False),
        pa.field("window_end", TIMESTAMP, nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("gold_value", VALUE, nullable=False),
        pa.field("recomputed_value", VALUE, nullable=False),
        pa.field("difference", VALUE, nullable=False),
        pa.field("exceeds_threshold", pa.bool_(), nullable=False),
        pa.field("bronze_version", pa.int64(), nullable=False),
        pa.field("fixed", pa.bool_(), nullable=False),
    ]
)


@dataclass(frozen=True, slots=True)
class ReconcileResult:
    """What one reconcile run found and did; ``code`` is its exit code."""

    run_id: str
    recompute: Recompute
    threshold: Decimal
    differences: list[Difference]
    exceeding: list[Difference]
    #: The ranges backfilled by ``--fix`` (empty without it, or when the budget was spent).
    fixed: list[BackfillResult] = field(default_factory=list)
    #: ``--fix`` was asked for but the day's fix budget was spent.
    budget_spent: bool = False
    fixes_today: int = 0
    #: The differences above the threshold left after the fix (re-checked), when it fixed.
    after: list[Difference] | None = None

    @property
    def code(self) -> int:
        """0 when nothing exceeds the threshold (after the fix, if one ran), else 1."""
        remaining = self.exceeding if self.after is None else self.after
        return 1 if remaining else 0


def fix_runs(cfg: Config) -> list[tuple[str, datetime]]:
    """(run id, run time) of the recorded reconcile runs that fixed something."""
    try:
        dt = DeltaTable(cfg.lakehouse.table_uri(cfg.reconcile.table))
    except TableNotFoundError:
        return []
    fixed = query("SELECT DISTINCT run_id, run_time FROM runs WHERE fixed", runs=dt)
    runs = zip(fixed["run_id"].to_pylist(), fixed["run_time"].to_pylist(), strict=True)
    return [(str(run_id), when) for run_id, when in runs]


def record(
    cfg: Config,
    run_id: str,
    run_time: datetime,
    differences: Sequence[Difference],
    *,
    threshold: Decimal,
    bronze_version: int,
    fixed: set[datetime],
) -> None:
    """Append the run's differences to the reconciliation table (created by the first append)."""
    if not differences:
        return
    rows = {
        "run_id": [run_id] * len(differences),
        "run_time": [run_time] * len(differences),
        "window_start": [d.window_start for d in differences],
        "window_end": [d.window_end for d in differences],
        "metric": [d.metric for d in differences],
        "gold_value": [d.gold for d in differences],
        "recomputed_value": [d.recomputed for d in differences],
        "difference": [d.difference for d in differences],
        "exceeds_threshold": [d.exceeds(threshold) for d in differences],
        "bronze_version": [bronze_version] * len(differences),
        "fixed": [d.window_start in fixed for d in differences],
    }
    table = pa.table(rows, schema=RECONCILIATION_SCHEMA)
    write_deltalake(cfg.lakehouse.table_uri(cfg.reconcile.table), table, mode="append")


def closed_end(
    cfg: Config, bronze_uri: str, start: datetime, end: datetime, report: Callable[[str], None]
) -> datetime:
    """``end``, or the start of the first window the speed layer may still update when that is earlier."""
    found = open_from(open_bronze(bronze_uri, None), cfg, GoldSettings.from_config(cfg))
    if found is None or found.first_open >= end:
        return end
    first_open = found.first_open
    if first_open <= start:
        raise RangeError(
            f"--from {iso_utc(start)}: every window of the range is still open to the speed layer "
            f"({found.describe()}; the first open window starts "
            f"{iso_utc(first_open)}): nothing to compare yet; pass --include-open to compare them anyway"
        )
    clipped = first_open
    report(
        f"reconcile: the windows from {iso_utc(first_open)} on are still open to the speed layer "
        f"({found.describe()}): compared up to "
        f"{iso_utc(clipped)} only (--include-open compares them too)"
    )
    return clipped


def reconcile(
    cfg: Config,
    bronze_uri: str,
    start: datetime,
    end: datetime,
    *,
    threshold: Decimal | None = None,
    fix: bool = False,
    version: int | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    report: Callable[[str], None] = lambda _line: None,
    show: Callable[[list[Difference], Decimal], None] = lambda _differences, _threshold: None,
    include_open: bool = False,
) -> ReconcileResult:
    """Compare gold with the recompute of ``[start, end)``; with ``fix``, backfill what exceeds the threshold.

    Fixes contiguous windows as one backfill each, at the bronze version compared against, at most
    ``reconcile.max_fixes_per_day`` fix runs per UTC day (counted from the reconciliation table), and
    re-checks gold afterwards. ``show`` gets the differences (and the threshold) before any fix. Windows
    the speed layer may still update are left out (their realtime rows are still filling up, and a fix
    would freeze them) unless ``include_open``; the range then ends at the first of them.
    """
    limit = cfg.reconcile.threshold if threshold is None else threshold
    if limit < 0:
        raise ConfigError(f"--threshold: must be zero or positive, got {limit}")
    run_id, run_time = uuid.uuid4().hex[:12], now()
    if not include_open:
        end = closed_end(cfg, bronze_uri, start, end, report)
    rec = recompute(cfg, bronze_uri, start, end, version=version)
    report(
        f"reconcile {iso_utc(start)} .. {iso_utc(end)}: bronze at version {rec.bronze_version}, "
        f"{rec.rows_read} row(s) read, {rec.metrics.num_rows} window(s)"
    )
    expected = rec.metrics.to_pylist()
    differences = compare(read_gold(cfg, start, end), expected)
    exceeding = [d for d in differences if d.exceeds(limit)]
    if differences:
        show(differences, limit)
    base = ReconcileResult(run_id, rec, limit, differences, exceeding)

    def save(fixed: set[datetime]) -> None:
        record(
            cfg,
            run_id,
            run_time,
            differences,
            threshold=limit,
            bronze_version=rec.bronze_version,
            fixed=fixed,
        )

    if not exceeding or not fix:
        save(set())
        return base
    previous = fix_runs(cfg)
    today = fixes_on(run_time.astimezone(UTC).date(), previous)
    if not fix_allowed(run_time, previous, cfg.reconcile.max_fixes_per_day):
        save(set())
        return ReconcileResult(
            run_id, rec, limit, differences, exceeding, budget_spent=True, fixes_today=today
        )
    settings = GoldSettings.from_config(cfg)
    done: list[BackfillResult] = []
    fixed: set[datetime] = set()
    try:
        for run_start, run_end in contiguous_runs({d.window_start for d in exceeding}, settings.window):
            done.append(
                backfill(cfg, bronze_uri, run_start, run_end, version=rec.bronze_version, report=report)
            )
            fixed |= {d.window_start for d in exceeding if run_start <= d.window_start < run_end}
    finally:
        save(fixed)
    after = [d for d in compare(read_gold(cfg, start, end), expected) if d.exceeds(limit)]
    return ReconcileResult(
        run_id, rec, limit, differences, exceeding, fixed=done, fixes_today=today + 1, after=after
    )
