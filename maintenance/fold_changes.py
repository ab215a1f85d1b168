"""The compaction of a merge-on-read table: fold the changes table into the snapshot, exactly once.

One fold reads the change rows above the snapshot's fold point, folds them per key in sequence order
with the table's rule, and MERGEs them into the snapshot in one commit whose txn action
(``FOLD_APP``) records the highest sequence folded: the next fold starts above it, so every change is
folded once, also after a crash at any point (the MERGE commit is atomic). The MERGE rewrites only the
snapshot files whose key range holds a folded key. Folds take the snapshot's maintenance lock (one
rewrite of a table at a time, as OPTIMIZE does). Then changes that a snapshot commit older than
``retention`` already holds are deleted from the changes table, so a reader whose snapshot version is
up to ``retention`` old still finds every change above it. The freshness of the snapshot (what it
holds) is written in each fold's commit metadata (``FRESHNESS_KEY``). DESIGN.md section 13.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError

from lakestream.freshness import FRESHNESS_KEY, latest_freshness, newest
from lakestream.merge_on_read import in_arrival_order
from lakestream.merge_reduce import reduce_guarded
from lakestream.merge_spec import quote_ident
from lakestream.time_args import iso_utc
from maintenance.facts import TableRef, now_ms
from maintenance.rewrites import TableBusyError, rewrite_lock
from sources.merge_on_read import (
    FOLD_APP,
    MergeOnReadTable,
    changes_above,
    folded_through,
    open_snapshot_if_any,
)

log = logging.getLogger(__name__)

DEFAULT_RETENTION = timedelta(minutes=10)


@dataclass(frozen=True)
class FoldResult:
    """What one fold did."""

    #: Change rows read and folded (0: the snapshot held every change).
    change_rows: int = 0
    keys: int = 0
    #: Highest sequence the snapshot holds after the fold (None: it holds none yet).
    folded_through: int | None = None
    snapshot_version: int = -1
    files_rewritten: int = 0
    trimmed_rows: int = 0
    seconds: float = 0.0


def fold_once(
    table: MergeOnReadTable,
    *,
    retention: timedelta = DEFAULT_RETENTION,
    lock_wait_s: float = 600.0,
    max_attempts: int = 10,
) -> FoldResult:
    """Fold every change above the snapshot's fold point into it, then trim the changes table."""
    started = time.monotonic()
    ref = TableRef(table.snapshot_uri, table.snapshot_uri)
    with rewrite_lock(ref, "fold changes", wait_s=lock_wait_s):
        # The changes first, then the snapshot: a snapshot read later holds at least as much.
        changes = table.open_changes()
        snapshot = table.open_snapshot()
        result = _fold(table, changes, snapshot, max_attempts=max_attempts)
    trimmed = trim_changes(table, retention=retention, max_attempts=max_attempts)
    out = replace(result, trimmed_rows=trimmed, seconds=time.monotonic() - started)
    if out.change_rows:
        log.info("%s: %s", table.snapshot_uri, out)
    return out


def _fold(
    table: MergeOnReadTable, changes: DeltaTable | None, snapshot: DeltaTable, *, max_attempts: int
) -> FoldResult:
    for attempt in range(max_attempts):
        snapshot.update_incremental()
        through = folded_through(snapshot)
        rows = changes_above(changes, through, table)
        if rows.num_rows == 0:
            return FoldResult(folded_through=through, snapshot_version=snapshot.version())
        source = reduce_guarded(in_arrival_order(table.schema.empty_table(), rows, table.seq), table.spec)
        new_through = int(pc.max(rows[table.seq]).as_py())
        metadata = {FRESHNESS_KEY: freshness(table, snapshot, source, new_through, changes)}
        props = CommitProperties(
            app_transactions=[Transaction(FOLD_APP, new_through)], custom_metadata=metadata
        )
        try:
            metrics = (
                snapshot.merge(
                    source,
                    table.spec.merge_predicate("s", "t"),
                    source_alias="s",
                    target_alias="t",
                    streamed_exec=False,  # derive the key-range file filter from the source (sinks.committer)
                    commit_properties=props,
                )
                .when_matched_update(table.spec.update_expressions(table.schema, "s", "t"))
                .when_not_matched_insert_all()
                .execute()
            )
        except CommitFailedError as exc:
            # Another writer (not a fold: those hold the lock) committed to the snapshot meanwhile.
            log.info("%s: fold attempt %d conflicted (%s)", table.snapshot_uri, attempt, exc)
            time.sleep(min(2.0, 0.05 * 2**attempt))
            continue
        snapshot.update_incremental()
        return FoldResult(
            change_rows=rows.num_rows,
            keys=source.num_rows,
            folded_through=new_through,
            snapshot_version=snapshot.version(),
            files_rewritten=int(metrics.get("num_target_files_removed", 0)),
        )
    raise CommitFailedError(f"{table.snapshot_uri}: the fold conflicted {max_attempts} times; run it again")


def freshness(
    table: MergeOnReadTable,
    snapshot: DeltaTable,
    source: pa.Table,
    through: int,
    changes: DeltaTable | None,
) -> dict[str, Any]:
    """What the snapshot holds once ``source`` is folded in: the fold point, the changes table version
    read, the newest event time (the greater of the previous fold's and the source's) and when."""
    out: dict[str, Any] = {
        "folded_through": through,
        "changes_version": None if changes is None else changes.version(),
        "folded_at": iso_utc_ms(now_ms()),
    }
    if table.event_time is not None:
        previous = snapshot_freshness(snapshot).get("newest_event_time")
        out["newest_event_time"] = newest(pc.max(source[table.event_time]).as_py(), previous)
    return out


def iso_utc_ms(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC text."""
    from datetime import datetime, timezone

    return iso_utc(datetime.fromtimestamp(ms / 1000, tz=timezone.utc))


def snapshot_freshness(snapshot: DeltaTable) -> dict[str, Any]:
    """The freshness the newest fold wrote (empty before the first fold)."""
    return latest_freshness(snapshot.history(limit=50))


def trim_point(snapshot: DeltaTable, retention: timedelta) -> int | None:
    """The highest fold point of a snapshot commit at least ``retention`` old (None: there is none)."""
    cutoff = now_ms() - int(retention.total_seconds() * 1000)
    for entry in snapshot.history(limit=200):
        value = entry.get(FRESHNESS_KEY)
        if isinstance(value, dict) and int(entry.get("timestamp", 0)) <= cutoff:
            return int(value["folded_through"])
    return None


def trim_changes(table: MergeOnReadTable, *, retention: timedelta, max_attempts: int = 10) -> int:
    """Delete the change rows a snapshot commit older than ``retention`` holds; rows deleted.

    Under the changes table's maintenance lock, so an OPTIMIZE of it does not rewrite what is being
    deleted; when another rewrite holds the lock, the next fold trims.
    """
    changes = table.open_changes()
    snapshot = open_snapshot_if_any(table)
    if changes is None or snapshot is None:
        return 0
    point = trim_point(snapshot, retention)
    if point is None or not _has_rows_through(changes, table.seq, point):
        return 0
    try:
        with rewrite_lock(TableRef(table.changes_uri, table.changes_uri), "trim folded changes", wait_s=5.0):
            for attempt in range(max_attempts):
                try:
                    changes.update_incremental()
                    metrics = changes.delete(f"{quote_ident(table.seq)} <= {point}")
                    return int(metrics.get("num_deleted_rows", 0))
                except CommitFailedError as exc:  # the job appended meanwhile
                    log.info("%s: trim attempt %d conflicted (%s)", table.changes_uri, attempt, exc)
                    time.sleep(min(2.0, 0.05 * 2**attempt))
    except TableBusyError as exc:
        log.info("%s: %s; the next fold trims", table.changes_uri, exc)
        return 0
    log.warning("%s: trim conflicted %d times; the next fold tries again", table.changes_uri, max_attempts)
    return 0


def _has_rows_through(changes: DeltaTable, seq: str, point: int) -> bool:
    """Whether some data file of the changes table may hold a sequence <= ``point`` (file statistics)."""
    actions = pa.table(changes.get_add_actions(flatten=True))
    column = f"min.{seq}"
    if actions.num_rows == 0:
        return False
    if column not in actions.column_names:
        return True
    mins = actions[column]
    return bool(pc.any(pc.or_(pc.is_null(mins), pc.less_equal(mins, point))).as_py())


def pending_changes(table: MergeOnReadTable) -> tuple[int, int]:
    """(change rows, data files) above the snapshot's fold point, from the changes table's file statistics
    (each commit adds one file; an OPTIMIZE of the changes table merges them)."""
    changes = table.open_changes()
    if changes is None:
        return 0, 0
    snapshot = open_snapshot_if_any(table)
    through = None if snapshot is None else folded_through(snapshot)
    actions = pa.table(changes.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return 0, 0
    seqs = actions[f"max.{table.seq}"] if f"max.{table.seq}" in actions.column_names else None
    if seqs is None:
        return int(pc.sum(actions["num_records"]).as_py() or 0), actions.num_rows
    keep = pc.fill_null(pc.greater(seqs, -1 if through is None else through), True)
    rows = pc.sum(pc.filter(actions["num_records"], keep)).as_py() or 0
    return int(rows), int(pc.sum(pc.cast(keep, pa.int64())).as_py() or 0)
