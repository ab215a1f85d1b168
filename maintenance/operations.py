"""The maintenance operations on one Delta table, each safe beside the streaming jobs that write it.

OPTIMIZE (compaction or Z-order) rewrites files and can lose the race against a streaming MERGE
(delta-rs raises ``CommitFailedError``): it is planned again on a fresh snapshot with ``RetryPolicy``
backoff, and after the last attempt ``ConflictError`` says what to do. The streaming side needs
nothing from here: appends commit across a compaction (delta-rs retries them), and a MERGE whose files
were compacted away is re-planned by the sink's own retry (DESIGN.md section 3). VACUUM, log cleanup,
RESTORE and property changes are decided by the pure rules of ``maintenance.retention`` first.
Every commit made here carries ``lakestream.maintenance`` (the operation) in its commit metadata.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from lakestream.config import Config
from lakestream.run_folders import holds_runs
from lakestream.time import parse_time, plain_utc
from maintenance.facts import (
    TableRef,
    manifests,
    now_ms,
    reader_needs,
    retention_facts,
    written_by_sink,
)
from maintenance.maintenance_errors import ConflictError, MaintenanceError, RefusedError, TableMissingError
from maintenance.predicates import Filter, partition_filters
from maintenance.retention import (
    CleanupVerdict,
    VacuumVerdict,
    cleanup_verdict,
    log_retention,
    property_problems,
    restore_verdict,
    vacuum_verdict,
    whole_hours,
)
from maintenance.rewrites import check_rewrite, find_commit, rewrite_lock
from storage.delta_log import LOG_DIR
from storage.parquet_encoding import writer_properties
from storage.reader_positions import ReaderRecord, forget, read_records
from storage.retry_policy import RetryPolicy
from storage.time_travel import OutOfReachError, open_table_at

log = logging.getLogger(__name__)

MAINTENANCE_KEY = "lakestream.maintenance"


#: Commit metadata key of a unique id per maintenance commit (to find it in the log again).
MAINTENANCE_ID_KEY = "lakestream.maintenanceId"


def _props(operation: str, token: str = "") -> CommitProperties:
    metadata = {MAINTENANCE_KEY: operation}
    if token:
        metadata[MAINTENANCE_ID_KEY] = token
    return CommitProperties(custom_metadata=metadata)


def open_table(ref: TableRef) -> DeltaTable:
    """The table at its latest version, or ``TableMissingError`` naming where it looked."""
    try:
        return DeltaTable(ref.uri)
    except TableNotFoundError:
        raise TableMissingError(
            f"no Delta table at {ref.uri} (TABLE {ref.name!r}); `lakestream tables` lists the tables under "
            "the lakehouse root by the names maintain takes"
        ) from None


def with_retries(
    name: str,
    ref: TableRef,
    attempt: Callable[[DeltaTable], dict[str, Any]],
    *,
    retry: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
    fix: str,
) -> tuple[dict[str, Any], int]:
    """Run ``attempt`` on a fresh snapshot until it commits: (its result, attempts made).

    Only commit conflicts are retried; after ``retry.max_attempts`` of them ``ConflictError``.
    """

    def once(n: int) -> tuple[dict[str, Any], int]:
        return attempt(open_table(ref)), n

    def on_retry(n: int, exc: CommitFailedError, delay: float) -> None:
        log.info("%s of %s conflicted (%s); retry %d in %.2fs", name, ref.name, _first_line(exc), n, delay)

    def exhausted(n: int, exc: CommitFailedError) -> NoReturn:
        raise ConflictError(
            f"{name} of {ref.name} lost the commit race against concurrent writers {n} times "
            f"(last: {_first_line(exc)}); the table is unchanged. {fix}"
        ) from exc

    return retry.run(once, retry_on=CommitFailedError, exhausted=exhausted, on_retry=on_retry, sleep=sleep)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0]


@dataclass(frozen=True, slots=True)
class OptimizeResult:
    """What an OPTIMIZE did."""

    files_added: int
    files_removed: int
    partitions: int
    attempts: int
    version: int


def optimize(
    ref: TableRef,
    *,
    zorder: Sequence[str] = (),
    where: str | None = None,
    partition: Sequence[tuple[str, str]] = (),
    target_size: int | None = None,
    bloom_filters: Sequence[str] = (),
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
    tasks: int | None = None,
) -> OptimizeResult:
    """Compact small files (or Z-order by ``zorder``), in the partitions ``where`` selects.

    ``partition`` (column, value) pairs select one partition (the scheduled maintainer's way). The
    rewritten files carry bloom filters of ``bloom_filters`` (``tables.bloom_filter_columns``).
    ``tasks``: files rewritten at once (``maintenance.rewrite_tasks``; None: delta-rs' default, a task
    per core).
    ``target_size`` defaults to the table's ``delta.targetFileSize`` (delta-rs: else 100 MB).
    """
    policy = retry or RetryPolicy()
    token = uuid.uuid4().hex
    read_version = -1

    def attempt(dt: DeltaTable) -> dict[str, Any]:
        nonlocal read_version
        read_version = dt.version()
        if holds_runs(pa.table(dt.get_add_actions(flatten=True))["path"].to_pylist()):
            raise RefusedError(
                f"{ref.name} holds the sorted runs of merge-on-read silver, which an OPTIMIZE would mix; "
                "its folds merge them (`lakestream maintain fold --full` merges every run into one)"
            )
        filters: list[Filter] | None = [(k, "=", v) for k, v in partition] or None
        if where is not None:
            filters = [*(filters or []), *partition_filters(where, dt.metadata().partition_columns)]
        if zorder:
            missing = sorted(set(zorder) - set(dt.schema().to_arrow().names))
            if missing:
                raise MaintenanceError(
                    f"--zorder: {', '.join(missing)} not columns of {ref.name} "
                    f"(columns: {', '.join(dt.schema().to_arrow().names)})"
                )
            return dt.optimize.z_order(
                list(zorder),
                partition_filters=filters,
                target_size=target_size,
                writer_properties=writer_properties(
                    dt.schema().to_arrow().names, bloom_filters=bloom_filters
                ),
                commit_properties=_props("zorder", token),
                max_concurrent_tasks=tasks,
            )
        return dt.optimize.compact(
            partition_filters=filters,
            target_size=target_size,
            writer_properties=writer_properties(dt.schema().to_arrow().names, bloom_filters=bloom_filters),
            commit_properties=_props("optimize", token),
            max_concurrent_tasks=tasks,
        )

    name = "zorder" if zorder else "optimize"
    with rewrite_lock(ref, name):
        metrics, attempts = with_retries(
            name,
            ref,
            attempt,
            retry=policy,
            sleep=sleep,
            fix="Run it again when the streaming MERGE is less busy, limit it with --where to partitions the "
            "MERGE does not rewrite, or raise maintenance.retry_attempts.",
        )
        committed = find_commit(ref, after=read_version, key=MAINTENANCE_ID_KEY, token=token)
        if committed is not None:
            check_rewrite(ref, committed, name)
    return OptimizeResult(
        files_added=int(metrics.get("numFilesAdded", 0)),
        files_removed=int(metrics.get("numFilesRemoved", 0)),
        partitions=int(metrics.get("partitionsOptimized", 0)),
        attempts=attempts,
        version=open_table(ref).version(),
    )


@dataclass(frozen=True, slots=True)
class VacuumResult:
    """What a VACUUM would delete (dry run) or deleted, and the verdict of the retention rules."""

    verdict: VacuumVerdict
    files: tuple[str, ...]
    dry_run: bool
    full: bool


def vacuum(
    ref: TableRef,
    cfg: Config,
    *,
    retain_hours: int | None = None,
    dry_run: bool = True,
    full: bool = False,
    force: bool = False,
) -> VacuumResult:
    """List (dry run) or delete the files a VACUUM at ``retain_hours`` removes, if the rules allow it.

    A dry run always lists, with the verdict; a real run that the rules refuse raises ``RefusedError``.
    Full mode also deletes files the log does not know, which is where staged files are: refused while
    any candidate is staged, whatever ``force`` says.
    """
    dt = open_table(ref)
    facts = retention_facts(ref, dt, cfg)
    hours = whole_hours(facts.table_retention) if retain_hours is None else retain_hours
    candidates = dt.vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False, full=full)
    verdict = vacuum_verdict(facts, hours, force=force, full=full, candidates=candidates)
    if dry_run:
        return VacuumResult(verdict, tuple(sorted(candidates)), dry_run=True, full=full)
    if not verdict.allowed:
        hint = "" if verdict.staged_in_the_way else "\nrun with --force to vacuum anyway"
        raise RefusedError(f"vacuum of {ref.name} refused:\n{verdict.explain()}{hint}")
    deleted = dt.vacuum(
        retention_hours=hours,
        dry_run=False,
        enforce_retention_duration=False,
        full=full,
        commit_properties=_props("vacuum"),
    )
    return VacuumResult(verdict, tuple(sorted(deleted)), dry_run=False, full=full)


def checkpoint(ref: TableRef) -> int:
    """Write a log checkpoint at the current version; returns that version."""
    dt = open_table(ref)
    dt.create_checkpoint()
    return dt.version()


@dataclass(frozen=True, slots=True)
class CleanupResult:
    """What a log cleanup did."""

    verdict: CleanupVerdict
    #: Log files deleted.
    removed: int


def cleanup(ref: TableRef, cfg: Config, *, force: bool = False) -> CleanupResult:
    """Delete log files older than ``delta.logRetentionDuration`` (those a checkpoint makes redundant).

    Refused while a Delta-source reader may still read a commit that would go.
    """
    dt = open_table(ref)
    verdict = cleanup_verdict(
        now_ms=now_ms(),
        table_log_retention=log_retention(dt.metadata().configuration),
        checkpoint_interval=cfg.flink.checkpoint_interval,
        readers=reader_needs(ref, cfg),
        force=force,
    )
    if not verdict.allowed:
        raise RefusedError(
            f"log cleanup of {ref.name} refused:\n{verdict.explain()}\nrun with --force to clean up anyway"
        )
    files = ref.files()
    before = len(files.list(LOG_DIR, recursive=False))
    dt.cleanup_metadata()
    return CleanupResult(verdict, before - len(files.list(LOG_DIR, recursive=False)))


def _detail(entry: Mapping[str, Any]) -> str:
    metrics = entry.get("operationMetrics") or {}
    parts = []
    for key, label in (
        ("num_added_rows", "rows+"),
        ("num_output_rows", "rows out"),
        ("num_target_rows_inserted", "inserted"),
        ("num_target_rows_updated", "updated"),
        ("numFilesAdded", "files+"),
        ("numFilesRemoved", "files-"),
        ("num_target_files_added", "files+"),
        ("num_target_files_removed", "files-"),
        ("num_added_files", "files+"),
        ("num_removed_files", "files-"),
        ("numDeletedFiles", "deleted"),
        ("numRestoredFile", "restored"),
    ):
        if key in metrics:
            parts.append(f"{label} {metrics[key]}")
    if MAINTENANCE_KEY in entry:
        parts.append(f"maintenance: {entry[MAINTENANCE_KEY]}")
    if "lakestream.appVersions" in entry:
        versions = entry["lakestream.appVersions"]
        parts.append(f"sink checkpoints: {', '.join(f'{k}@{v}' for k, v in sorted(versions.items()))}")
    params = entry.get("operationParameters") or {}
    if "version" in params and entry.get("operation") == "RESTORE":
        parts.append(f"to version {params['version']}")
    if "properties" in params:
        parts.append(str(params["properties"]))
    return "; ".join(parts)


def history_lines(ref: TableRef, *, limit: int | None = 20) -> list[str]:
    """The table's commits, newest first, as aligned lines: version, time (UTC), operation, details."""
    entries = open_table(ref).history(limit)
    lines = [f"{'version':>8}  {'committed (UTC)':<19}  {'operation':<20}  details"]
    for e in entries:
        version, when, operation = (
            e.get("version", "?"),
            plain_utc(e.get("timestamp"), suffix=False),
            str(e.get("operation", "?")),
        )
        lines.append(f"{version:>8}  {when:<19}  {operation:<20}  {_detail(e)}")
    return lines


def resolve_restore_target(uri: str, *, version: int | None, timestamp: str | None) -> int:
    """The version ``--version`` or ``--timestamp`` names (the newest committed at or before it), when
    the table's log still reaches it."""
    if version is not None:
        at: int | datetime = version
    else:
        assert timestamp is not None
        at = parse_time(timestamp, name="--timestamp", error=MaintenanceError)
    try:
        return open_table_at(uri, at, name="--version" if version is not None else "--timestamp").version()
    except OutOfReachError as exc:
        raise MaintenanceError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What a RESTORE did."""

    target_version: int
    new_version: int
    warnings: tuple[str, ...]
    metrics: dict[str, Any]


def restore(
    ref: TableRef,
    cfg: Config,
    *,
    version: int | None = None,
    timestamp: str | None = None,
    force: bool = False,
) -> RestoreResult:
    """Restore the table to an earlier version, as a new commit (the history stays).

    A table a lakestream sink writes needs ``force`` (``maintenance.retention.restore_verdict``).
    """
    dt = open_table(ref)
    target = resolve_restore_target(ref.uri, version=version, timestamp=timestamp)
    files = ref.files()
    verdict = restore_verdict(
        target_version=target,
        current_version=dt.version(),
        written_by_sink=written_by_sink(ref, dt),
        staged_manifests=len(manifests(files)),
        readers=[r.reader for r in read_records(files)],
        force=force,
    )
    if not verdict.allowed:
        reasons = "\n".join(verdict.warnings)
        raise RefusedError(
            f"restore of {ref.name} to version {target} refused:\n{reasons}\n{verdict.refusal}".replace(
                "\n\n", "\n"
            )
        )
    try:
        with rewrite_lock(ref, "restore"):
            metrics = dt.restore(target, commit_properties=_props("restore"))
    except DeltaError as exc:
        raise MaintenanceError(
            f"restore of {ref.name} to version {target} failed: {exc}. If data files of that version are "
            "gone (VACUUM), that version can no longer be restored."
        ) from None
    return RestoreResult(target, open_table(ref).version(), verdict.warnings, metrics)


def parse_assignments(items: Sequence[str]) -> dict[str, str]:
    """``--set k=v`` values as a mapping; a malformed one fails with the flag named."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise MaintenanceError(
                f"--set {item!r}: expected KEY=VALUE, e.g. --set delta.logRetentionDuration='60 days'"
            )
        out[key.strip()] = value.strip()
    return out


def set_properties(
    ref: TableRef, changes: Mapping[str, str], *, force: bool = False, retry: RetryPolicy | None = None
) -> list[str]:
    """Set table properties (one metadata commit, retried across conflicts); returns the warnings.

    A streaming commit that races it is re-planned by the sink (a metadata change conflicts).
    """
    dt = open_table(ref)
    refusals, warnings = property_problems(
        changes, written_by_merge_sink=written_by_sink(ref, dt, merge_only=True)
    )
    if refusals and not force:
        raise RefusedError(
            f"properties of {ref.name}: refused:\n"
            + "\n".join(refusals)
            + "\nrun with --force to set them anyway"
        )

    def attempt(table: DeltaTable) -> dict[str, Any]:
        try:
            table.alter.set_table_properties(dict(changes), commit_properties=_props("properties"))
        except CommitFailedError:
            raise
        except DeltaError as exc:
            raise MaintenanceError(f"--set: delta-rs refuses {dict(changes)}: {exc}") from None
        return {}

    with_retries("set properties", ref, attempt, retry=retry or RetryPolicy(), fix="Run it again.")
    return warnings


def properties(ref: TableRef) -> dict[str, str]:
    """The table's properties (``delta.*`` and others), sorted by key."""
    return dict(sorted(open_table(ref).metadata().configuration.items()))


@dataclass(frozen=True, slots=True)
class ReaderStatus:
    """A recorded Delta-source reader and how far back it may still read."""

    record: ReaderRecord
    needed_version: int
    needed_time_ms: int | None


def readers(ref: TableRef, cfg: Config) -> list[ReaderStatus]:
    """The recorded readers of the table."""
    records = {r.reader: r for r in read_records(ref.files())}
    return [ReaderStatus(records[n.reader], n.version, n.version_time_ms) for n in reader_needs(ref, cfg)]


def forget_reader(ref: TableRef, reader: str) -> None:
    """Drop the position record of a reader that is gone for good (its needs no longer hold vacuum back)."""
    files = ref.files()
    if not forget(files, reader):
        known = [r.reader for r in read_records(files)]
        raise MaintenanceError(
            f"--forget {reader!r}: no such reader of {ref.name} (recorded: {', '.join(known) or 'none'})"
        )
