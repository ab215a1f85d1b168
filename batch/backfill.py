"""The gold batch layer: recompute windows from bronze at one pinned version, and replace them in gold.

``recompute`` reads the bronze rows of ``[start, end)`` at one Delta version (file pruning by the
event-time statistics, only the columns the rule needs), applies ``lakestream.gold.gold_inputs`` and
``aggregate`` and returns every window of the range. ``backfill`` writes those rows (``layer =
batch``) to a staging table of its own, reads them back and checks them, then replaces the range in
gold in one Delta commit (replace by predicate), re-planned on a fresh snapshot when it loses a commit
race. The contract (also towards the speed layer's MERGE): DESIGN.md section 11.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from lakestream.config import Config
from lakestream.errors import FAILED
from lakestream.gold import (
    DELIVERY_ORDER,
    GOLD_SCHEMA,
    LAYER_BATCH,
    METRIC_NAMES,
    GoldSettings,
    WindowAlignmentError,
    aggregate,
    ensure_gold_table,
    gold_inputs,
    gold_rows,
    window_of,
    windows_of_range,
)
from lakestream.horizon import Horizon
from lakestream.time import format_duration, iso_utc, utc_from_ms
from maintenance.facts import TableRef
from maintenance.maintenance_errors import MaintenanceError, TableMissingError
from maintenance.operations import with_retries
from storage.delta_log import commit_ms, is_local_uri, local_path
from storage.recorded_horizon import recorded_horizon
from storage.retry_policy import RetryPolicy
from storage.sql_query import query
from storage.table_files import table_files
from storage.time_travel import OutOfReachError, open_table_at

UTC = timezone.utc

#: Commit metadata of a backfill's replace commit: its run id and the bronze version it read.
BACKFILL_KEY = "lakestream.backfill"
BRONZE_VERSION_KEY = "lakestream.bronzeVersion"

#: Where backfills stage their rows, under the lakehouse root (one table per run, removed after it).
STAGING_PREFIX = "_staging"

#: The bronze columns the batch layer reads (never ``raw``).
BRONZE_COLUMNS: tuple[str, ...] = (
    "event_id",
    "event_time",
    "source",
    "op",
    "amount",
    "order_id",
    "user_id",
    "quality",
    *DELIVERY_ORDER,
)


class RangeError(MaintenanceError):
    """``--from`` / ``--to`` do not make a range of whole windows; the message names the flag."""


class StagingCheckError(MaintenanceError):
    """The staged rows failed their check; gold was not touched and the staging table is kept."""

    exit_code = FAILED


@dataclass(frozen=True, slots=True)
class Recompute:
    """The metrics of every window of ``[start, end)`` as bronze at ``bronze_version`` has them."""

    start: datetime
    end: datetime
    #: ``METRICS_SCHEMA``, one row per window of the range, empty windows with zeros.
    metrics: pa.Table
    bronze_version: int
    #: The newest ingest time of the bronze rows read (``data_time_from = "ingest_time"``), or, when no
    #: row was read, the commit time of ``bronze_version`` (``"commit"``).
    data_time: datetime
    data_time_from: Literal["ingest_time", "commit"]
    #: Bronze rows read (every quality, duplicates included) and gold inputs made of them.
    rows_read: int
    inputs: int


def check_range(start: datetime, end: datetime, settings: GoldSettings) -> list[datetime]:
    """The window starts of ``[start, end)``, or ``RangeError`` naming ``--from`` / ``--to`` and the fix."""
    try:
        return windows_of_range(start, end, settings, names=("--from", "--to"))
    except WindowAlignmentError as exc:
        raise RangeError(f"{exc}; pass window-aligned times (gold.window)") from None
    except ValueError as exc:
        raise RangeError(f"{exc}; pass --from before --to") from None


class OpenWindowsError(RangeError):
    """The range reaches windows the speed layer may still update (refused unless forced)."""


def stream_horizon(bronze: DeltaTable, cfg: Config) -> Horizon | None:
    """The speed layer's horizon as bronze's snapshot records it (``lakestream.horizon``).

    Ingest records per Kafka partition the newest VALID event time (``watermark/<topic>/<partition>``,
    DESIGN.md section 9). The stream's watermark for a window is at least the lowest of them over the
    partitions that are not quiet, minus ``max_out_of_orderness`` and 1 ms; a quiet partition is raised
    to it when a run starts. None when no ingest job wrote bronze.
    """
    et = cfg.event_time
    return recorded_horizon(
        bronze.table_uri, et.max_out_of_orderness, et.quiet_after, version=bronze.version()
    )


def first_open_window(watermark: datetime, settings: GoldSettings) -> datetime:
    """The start of the oldest window the speed layer may still update at ``watermark``.

    A window ``[s, e)`` takes events until the watermark passes ``e + allowed_lateness``; the window
    holding ``watermark - allowed_lateness`` is the first whose end is not passed yet.
    """
    return window_of(watermark - settings.allowed_lateness, settings)[0]


@dataclass(frozen=True, slots=True)
class OpenFrom:
    """Where the stream may still update gold: its first open window and the horizon behind it."""

    first_open: datetime
    horizon: Horizon

    @property
    def watermark(self) -> datetime:
        """The horizon as a time."""
        return utc_from_ms(self.horizon.watermark_ms)

    def describe(self) -> str:
        """ "its watermark as bronze recorded it is T" and the quiet partitions left out of it."""
        text = f"its watermark as bronze recorded it is {iso_utc(self.watermark)}"
        quiet = self.horizon.quiet
        if quiet:
            shown = ", ".join(f"{k} (newest {iso_utc(utc_from_ms(v))})" for k, v in list(quiet.items())[:4])
            more = f" and {len(quiet) - 4} more" if len(quiet) > 4 else ""
            text += (
                f", not held back by the quiet partition{'s' if len(quiet) > 1 else ''} {shown}{more}, "
                "whose events older than it are late"
            )
        return text


def open_from(bronze: DeltaTable, cfg: Config, settings: GoldSettings) -> OpenFrom | None:
    """Where the stream may still update windows; None when no ingest job wrote bronze."""
    horizon = stream_horizon(bronze, cfg)
    if horizon is None:
        return None
    return OpenFrom(first_open_window(utc_from_ms(horizon.watermark_ms), settings), horizon)


def check_closed(
    end: datetime, bronze: DeltaTable, cfg: Config, settings: GoldSettings, *, flag: str = "--to"
) -> None:
    """``OpenWindowsError`` when ``[.., end)`` reaches windows the stream still updates.

    A batch row is never changed by the stream (section 11), so backfilling an open window would
    freeze it at what bronze holds now and drop the events still to come from it.
    """
    found = open_from(bronze, cfg, settings)
    if found is None:
        return
    first_open = found.first_open
    lateness = format_duration(settings.allowed_lateness)
    if end > first_open:
        raise OpenWindowsError(
            f"{flag} {iso_utc(end)}: the windows from {iso_utc(first_open)} on are still open to the "
            f"speed layer ({found.describe()}, and a window "
            f"takes events until gold.allowed_lateness = {lateness} after its end); a "
            "batch row is never updated by the stream, so it would miss their events still to come. "
            f"Pass {flag} {iso_utc(first_open)} or earlier, or --force to replace them anyway"
        )


def open_bronze(uri: str, version: int | None) -> DeltaTable:
    """Bronze at ``version`` (latest when None); errors name the table and ``--as-of``."""
    try:
        return open_table_at(uri, version, name="--as-of")
    except TableNotFoundError:
        raise TableMissingError(
            f"no bronze table at {uri}; run `lakestream ingest` first (or set lakehouse.root)"
        ) from None
    except OutOfReachError as exc:
        raise RangeError(str(exc)) from None


def _literal(t: datetime) -> str:
    return f"'{iso_utc(t)}'"


def range_predicate(column: str, start: datetime, end: datetime) -> str:
    """``column >= start AND column < end`` as a delta-rs SQL predicate."""
    return f"{column} >= {_literal(start)} AND {column} < {_literal(end)}"


def read_bronze(dt: DeltaTable, start: datetime, end: datetime) -> pa.Table:
    """The bronze rows with event time in ``[start, end)``: files pruned by their statistics, then rows."""
    columns = ", ".join(f'"{c}"' for c in BRONZE_COLUMNS)
    where = range_predicate("event_time", start, end)
    return query(f"SELECT {columns} FROM bronze WHERE {where}", bronze=dt)


def recompute(
    cfg: Config, bronze_uri: str, start: datetime, end: datetime, *, version: int | None = None
) -> Recompute:
    """Every window of ``[start, end)`` computed from bronze at one version (the latest when None)."""
    settings = GoldSettings.from_config(cfg)
    check_range(start, end, settings)
    dt = open_bronze(bronze_uri, version)
    pinned = dt.version()
    rows = read_bronze(dt, start, end)
    inputs = gold_inputs(rows)
    metrics = aggregate(inputs, settings, over=(start, end))
    newest = pc.max(rows["ingest_time"]).as_py() if rows.num_rows else None
    source: Literal["ingest_time", "commit"] = "ingest_time" if newest is not None else "commit"
    data_time = newest if newest is not None else _commit_time(bronze_uri, dt, pinned)
    return Recompute(
        start=start,
        end=end,
        metrics=metrics,
        bronze_version=pinned,
        data_time=data_time,
        data_time_from=source,
        rows_read=rows.num_rows,
        inputs=inputs.num_rows,
    )


def _commit_time(uri: str, dt: DeltaTable, version: int) -> datetime:
    committed = commit_ms(uri, version)
    if committed is not None:
        return utc_from_ms(committed)
    return utc_from_ms(int(dt.history(1)[0]["timestamp"]))


def check_rows(rows: pa.Table, start: datetime, end: datetime, settings: GoldSettings) -> list[str]:
    """What is wrong with staged gold rows for ``[start, end)``: empty when they are fit to replace it.

    One row per window of the range, in order; no nulls in columns that forbid them; metrics not
    negative (gmv may be: a refund is a negative payment); ``window_end = window_start + window``.
    """
    problems: list[str] = []
    columns = [(f.name, f.type) for f in rows.schema]
    if columns != [(f.name, f.type) for f in GOLD_SCHEMA]:
        problems.append(f"columns {columns} are not GOLD_SCHEMA's")
        return problems
    starts = rows["window_start"].to_pylist()
    want = windows_of_range(start, end, settings)
    if sorted(starts) != want:
        missing = sorted(set(want) - set(starts))
        extra = sorted(set(starts) - set(want))
        doubled = len(starts) - len(set(starts))
        problems.append(
            f"windows do not match the range: {len(missing)} missing, {len(extra)} outside it, "
            f"{doubled} more than once"
        )
    for f in GOLD_SCHEMA:
        if not f.nullable and rows[f.name].null_count:
            problems.append(f"{f.name}: {rows[f.name].null_count} null(s)")
    for name in METRIC_NAMES:
        if name != "gmv" and rows[name].null_count == 0 and rows.num_rows:
            low = pc.min(rows[name]).as_py()
            if low is not None and low < 0:
                problems.append(f"{name}: negative value {low}")
    ends = [
        e for s, e in zip(starts, rows["window_end"].to_pylist(), strict=True) if e != s + settings.window
    ]
    if ends:
        problems.append(f"window_end differs from window_start + {settings.window} in {len(ends)} row(s)")
    if set(rows["layer"].to_pylist()) - {LAYER_BATCH}:
        problems.append("layer: rows other than batch")
    return problems


@dataclass(frozen=True, slots=True)
class BackfillResult:
    """What a backfill did."""

    recompute: Recompute
    windows: int
    gold_version: int
    attempts: int
    staging_uri: str


def staging_uri(cfg: Config, gold_table: str, run_id: str) -> str:
    """The staging table of one backfill run: ``<root>/_staging/<gold table>/<run id>``."""
    return cfg.lakehouse.table_uri(f"{STAGING_PREFIX}/{gold_table}/{run_id}")


def _remove_table(uri: str) -> None:
    """Delete a staging table and, on a local disk, the folders it leaves empty, up to ``_staging``."""
    table_files(uri).delete_all()
    if not is_local_uri(uri):
        return
    path = Path(local_path(uri))
    for folder in path.parents:
        if not folder.is_dir() or any(folder.iterdir()):
            break
        folder.rmdir()
        if folder.name == STAGING_PREFIX:
            break


def backfill(
    cfg: Config,
    bronze_uri: str,
    start: datetime,
    end: datetime,
    *,
    version: int | None = None,
    retry: RetryPolicy | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    report: Callable[[str], None] = lambda _line: None,
    sleep: Callable[[float], None] = time.sleep,
    before_commit: Callable[[], object] | None = None,
    force: bool = False,
) -> BackfillResult:
    """Recompute ``[start, end)`` from bronze at one version and replace it in gold in one commit.

    On a lost commit race the replace is planned again on a fresh snapshot (``retry``); after the last
    attempt ``ConflictError`` (gold unchanged). Staged rows that fail ``check_rows`` raise
    ``StagingCheckError`` before gold is touched. ``before_commit`` runs after each attempt took its
    snapshot and before it commits (tests put a concurrent writer's commit there). Windows the speed
    layer may still update are refused (``OpenWindowsError``) unless ``force``.
    """
    settings = GoldSettings.from_config(cfg)
    check_range(start, end, settings)
    if not force:
        check_closed(end, open_bronze(bronze_uri, None), cfg, settings)
    result = recompute(cfg, bronze_uri, start, end, version=version)
    report(
        f"backfill {iso_utc(start)} .. {iso_utc(end)}: bronze at version {result.bronze_version}, "
        f"{result.rows_read} row(s) read, {result.inputs} input(s), {result.metrics.num_rows} window(s)"
    )
    rows = gold_rows(
        result.metrics,
        layer=LAYER_BATCH,
        data_time=result.data_time,
        source_version=result.bronze_version,
        updated_at=now(),
    )
    run_id = uuid.uuid4().hex[:12]
    staged_uri = staging_uri(cfg, cfg.gold.table, run_id)
    write_deltalake(staged_uri, rows, mode="error")
    staged = query("SELECT * FROM staged ORDER BY window_start", staged=DeltaTable(staged_uri))
    problems = check_rows(staged, start, end, settings)
    if problems:
        raise StagingCheckError(
            f"the staged rows of {iso_utc(start)} .. {iso_utc(end)} in {staged_uri} fail their check "
            f"({'; '.join(problems)}); gold is unchanged and the staging table is kept for inspection"
        )
    staged = staged.cast(GOLD_SCHEMA)
    ref = TableRef(cfg.gold.table, cfg.lakehouse.table_uri(cfg.gold.table))
    ensure_gold_table(ref.uri)
    predicate = range_predicate("window_start", start, end)
    commit = CommitProperties(
        custom_metadata={BACKFILL_KEY: run_id, BRONZE_VERSION_KEY: str(result.bronze_version)}
    )

    def attempt(dt: DeltaTable) -> dict[str, Any]:
        if before_commit is not None:
            before_commit()
        write_deltalake(dt, staged, mode="overwrite", predicate=predicate, commit_properties=commit)
        return {"version": dt.version()}

    _, attempts = with_retries(
        "backfill",
        ref,
        attempt,
        retry=retry or RetryPolicy(max_attempts=cfg.maintenance.retry_attempts),
        sleep=sleep,
        fix="Run the backfill again, or raise maintenance.retry_attempts.",
    )
    _remove_table(staged_uri)
    gold_version = DeltaTable(ref.uri).version()
    report(
        f"backfill: replaced {rows.num_rows} window(s) of {ref.name} in version {gold_version} "
        f"({attempts} attempt(s)); data_time {iso_utc(result.data_time)} (from the bronze "
        f"{'ingest times' if result.data_time_from == 'ingest_time' else 'commit time, no row in range'})"
    )
    return BackfillResult(
        recompute=result,
        windows=rows.num_rows,
        gold_version=gold_version,
        attempts=attempts,
        staging_uri=staged_uri,
    )


def read_gold(cfg: Config, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """The gold rows with ``window_start`` in ``[start, end)`` (none when the table does not exist yet)."""
    try:
        dt = DeltaTable(cfg.lakehouse.table_uri(cfg.gold.table))
    except TableNotFoundError:
        return []
    where = range_predicate("window_start", start, end)
    table = query(f"SELECT * FROM gold WHERE {where}", gold=dt)
    rows: list[dict[str, Any]] = table.sort_by("window_start").to_pylist()
    return rows
