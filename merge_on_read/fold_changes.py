"""The compaction of a merge-on-read table: fold the changes table into the snapshot, exactly once.

One fold writes the current rows of the keys changed above the snapshot's fold point into the snapshot,
in one commit whose txn action (``FOLD_APP``) records the new fold point, so every change is folded
exactly once, whatever crashes. The clustered fold (``replace_cells``) rewrites only the key ranges the
changes fall in, keeping the files sorted and disjoint; where that cannot apply it MERGEs instead.
Folds hold the table's maintenance lock; afterwards changes older than ``retention`` are trimmed, and
each fold records the snapshot's freshness (``FRESHNESS_KEY``). Contract: DESIGN.md section 13.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from typing import Any, NoReturn
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from lakestream.freshness import FRESHNESS_KEY, latest_freshness, newest
from lakestream.merge_on_read_rule import current_rows, in_arrival_order
from lakestream.merge_reduce import reduce_guarded
from lakestream.merge_spec import quote_ident
from lakestream.time import iso_utc_ms
from maintenance.facts import TableRef, now_ms
from maintenance.rewrites import TableBusyError, rewrite_lock
from merge_on_read.key_ranges import Cell, KeyFile, cells, key_files, owners
from merge_on_read.table import (
    FOLD_APP,
    MergeOnReadTable,
    changes_above,
    folded_through,
    open_snapshot_if_any,
    scan,
)
from storage.delta_log import open_filesystem
from storage.parquet_encoding import writer_properties
from storage.retry_policy import RetryPolicy

log = logging.getLogger(__name__)

DEFAULT_RETENTION = timedelta(minutes=10)
#: Rows per snapshot file a clustered fold writes when neither table has a file to measure rows by; else
#: ``file_rows_for`` derives them from the table's target file size. The newest keys' cell is rewritten
#: by every fold, so a fold costs about one file's rows plus its own.
FOLD_FILE_ROWS = 262_144
#: The fewest rows per file a derived size gives (a tiny target does not cut a cell into crumbs).
MIN_FILE_ROWS = 1_024
#: A touched cell with more rows than this (files that overlap, e.g. a copy-on-write table switched to
#: this layout) is folded by MERGE instead: the clustered fold holds one cell in memory.
MAX_CELL_ROWS = 1_000_000
#: The folder of the snapshot's table folder that a clustered fold writes its files to (they stay there;
#: the staging table's log is deleted once the fold committed).
STAGE_DIR = "fold"
STAGE_LOG = f"{STAGE_DIR}/_delta_log"


@dataclass(frozen=True)
class FoldResult:
    """What one fold did."""

    #: Change rows read and folded (0: the snapshot held every change).
    change_rows: int = 0
    #: Distinct keys among them (the orders folded).
    keys: int = 0
    #: Highest sequence the snapshot holds after the fold (None: it holds none yet).
    folded_through: int | None = None
    snapshot_version: int = -1
    files_rewritten: int = 0
    #: Rows of the files the fold wrote (the rewritten files' rows and the new keys).
    rows_written: int = 0
    #: Whether the fold replaced the touched key ranges (True) or MERGEd (False).
    clustered: bool = False
    trimmed_rows: int = 0
    seconds: float = 0.0


def fold_once(
    table: MergeOnReadTable,
    *,
    retention: timedelta = DEFAULT_RETENTION,
    lock_wait_s: float = 600.0,
    max_attempts: int = 10,
    file_rows: int | None = None,
    max_cell_rows: int = MAX_CELL_ROWS,
) -> FoldResult:
    """Fold every change above the snapshot's fold point into it, then trim the changes table.

    ``file_rows``: rows per file of a clustered fold (None: ``file_rows_for`` the table's target size).
    """
    started = time.monotonic()
    ref = TableRef(table.snapshot_uri, table.snapshot_uri)
    with rewrite_lock(ref, "fold changes", wait_s=lock_wait_s):
        # The changes first, then the snapshot: a snapshot read later holds at least as much.
        changes = table.open_changes()
        snapshot = table.open_snapshot()
        clear_stage(table)
        result = _fold(
            table,
            changes,
            snapshot,
            max_attempts=max_attempts,
            file_rows=file_rows,
            max_cell_rows=max_cell_rows,
        )
    trimmed = trim_changes(table, retention=retention, max_attempts=max_attempts)
    out = replace(result, trimmed_rows=trimmed, seconds=time.monotonic() - started)
    if out.change_rows:
        log.info("%s: %s", table.snapshot_uri, out)
    return out


def _fold(
    table: MergeOnReadTable,
    changes: DeltaTable | None,
    snapshot: DeltaTable,
    *,
    max_attempts: int,
    file_rows: int | None,
    max_cell_rows: int,
) -> FoldResult:

    def attempt(_n: int) -> FoldResult:
        snapshot.update_incremental()
        through = folded_through(snapshot)
        rows = changes_above(changes, through, table)
        if rows.num_rows == 0:
            return FoldResult(folded_through=through, snapshot_version=snapshot.version())
        new_through = int(pc.max(rows[table.seq]).as_py())
        plan = cell_plan(snapshot, table, rows, max_cell_rows=max_cell_rows)
        props = partial(_commit_properties, table, snapshot, changes, new_through)
        if isinstance(plan, CellPlan):
            per_file = file_rows or file_rows_for(table.target_file_size, plan.cells, changes)
            rewritten, written = replace_cells(table, snapshot, rows, plan, props, file_rows=per_file)
        else:
            log.info("%s: fold by MERGE: %s", table.snapshot_uri, plan)
            rewritten, written = _merge(table, snapshot, rows, props)
        snapshot.update_incremental()
        return FoldResult(
            change_rows=rows.num_rows,
            keys=distinct_keys(rows, table.spec.keys),
            folded_through=new_through,
            snapshot_version=snapshot.version(),
            files_rewritten=rewritten,
            rows_written=written,
            clustered=isinstance(plan, CellPlan),
        )

    def exhausted(n: int, exc: CommitFailedError) -> NoReturn:
        raise CommitFailedError(f"{table.snapshot_uri}: the fold conflicted {n} times; run it again") from exc

    # A conflict: another writer (not a fold: those hold the lock) committed to the snapshot meanwhile.
    return fold_retry(max_attempts).run(
        attempt,
        retry_on=CommitFailedError,
        exhausted=exhausted,
        on_retry=_log_conflict(table.snapshot_uri, "fold"),
    )


def fold_retry(max_attempts: int) -> RetryPolicy:
    """The retries of a fold or trim that lost a commit race: 0.05 s doubling up to 2 s, no jitter."""
    return RetryPolicy(max_attempts=max_attempts, initial_backoff_s=0.05, max_backoff_s=2.0, jitter=0)


def _log_conflict(uri: str, what: str) -> Callable[[int, CommitFailedError, float], None]:
    """``RetryPolicy.run``'s ``on_retry``: log the conflicted attempt (counted from 0) of ``what``."""

    def on_retry(n: int, exc: CommitFailedError, _delay: float) -> None:
        log.info("%s: %s attempt %d conflicted (%s)", uri, what, n - 1, exc)

    return on_retry


def file_rows_for(target_bytes: int, snapshot_cells: Sequence[Cell], changes: DeltaTable | None) -> int:
    """Rows per file that make a file of about ``target_bytes``, at the bytes per row of the snapshot's
    files (its cells), or of the changes table's (the same columns) while the snapshot has none;
    ``FOLD_FILE_ROWS`` when neither has a file."""
    files = [f for c in snapshot_cells for f in c.files]
    rows, size = sum(f.rows for f in files), sum(f.size for f in files)
    if not rows and changes is not None:
        actions = pa.table(changes.get_add_actions(flatten=True))
        if actions.num_rows:
            rows = pc.sum(actions["num_records"]).as_py() or 0
            size = pc.sum(actions["size_bytes"]).as_py() or 0
    if rows and size:
        return max(MIN_FILE_ROWS, int(target_bytes * rows / size))
    return FOLD_FILE_ROWS


def distinct_keys(rows: pa.Table, keys: tuple[str, ...]) -> int:
    """How many distinct keys (tuples of the key columns) ``rows`` holds."""
    return int(rows.select(list(keys)).group_by(list(keys)).aggregate([]).num_rows)


def _commit_properties(
    table: MergeOnReadTable,
    snapshot: DeltaTable,
    changes: DeltaTable | None,
    through: int,
    written: pa.Table,
) -> CommitProperties:
    """The fold commit's txn action (the new fold point) and freshness, ``written`` the rows it writes."""
    metadata = {FRESHNESS_KEY: freshness(table, snapshot, written, through, changes)}
    return CommitProperties(app_transactions=[Transaction(FOLD_APP, through)], custom_metadata=metadata)


def _merge(
    table: MergeOnReadTable,
    snapshot: DeltaTable,
    rows: pa.Table,
    props: Callable[[pa.Table], CommitProperties],
) -> tuple[int, int]:
    """MERGE the change rows, folded per key, into the snapshot: (files rewritten, rows written)."""
    source = reduce_guarded(in_arrival_order(table.schema.empty_table(), rows, table.seq), table.spec)
    metrics = (
        snapshot.merge(
            source,
            table.spec.merge_predicate("s", "t"),
            source_alias="s",
            target_alias="t",
            streamed_exec=False,  # derive the key-range file filter from the source (sinks.committer)
            writer_properties=writer_properties(
                snapshot.schema().to_arrow().names, bloom_filters=table.bloom_filter_columns
            ),
            commit_properties=props(source),
        )
        .when_matched_update(table.spec.update_expressions(table.schema, "s", "t"))
        .when_not_matched_insert_all()
        .execute()
    )
    return int(metrics.get("num_target_files_removed", 0)), int(metrics.get("num_output_rows", 0))


@dataclass(frozen=True)
class CellPlan:
    """A clustered fold: the snapshot's cells, the ones the change rows touch, and each row's cell."""

    cells: list[Cell]
    touched: list[int]
    #: Per change row, the index of the cell owning its key (all zeros when there are no cells).
    owner: npt.NDArray[np.int64]


def cell_plan(
    snapshot: DeltaTable, table: MergeOnReadTable, rows: pa.Table, *, max_cell_rows: int = MAX_CELL_ROWS
) -> CellPlan | str:
    """How to fold ``rows`` cell by cell, or why not (the fold MERGEs instead)."""
    if len(table.spec.keys) != 1:
        return f"the key has {len(table.spec.keys)} columns"
    key = table.spec.keys[0]
    kind = table.schema.field(key).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)):
        return f"the key column {key!r} is {kind}"
    config = snapshot.metadata().configuration
    if str(config.get("delta.enableChangeDataFeed", "false")).lower() == "true":
        return "the snapshot has a change data feed (a MERGE writes its change files)"
    keys = np.asarray(rows[key].to_numpy(zero_copy_only=False))
    files = key_files(pa.table(snapshot.get_add_actions(flatten=True)), key)
    if isinstance(files, str):
        return f"the snapshot: {files}"
    if not files:
        return CellPlan([], [], np.zeros(len(keys), dtype=np.int64))
    found = cells(files)
    owner = owners(found, keys)
    touched = sorted({int(i) for i in np.unique(owner)})
    biggest = max(found[i].rows for i in touched)
    if biggest > max_cell_rows:
        return f"a touched key range holds {biggest:,} rows (above {max_cell_rows:,}: the files overlap)"
    return CellPlan(found, touched, owner)


def replace_cells(
    table: MergeOnReadTable,
    snapshot: DeltaTable,
    rows: pa.Table,
    plan: CellPlan,
    props: Callable[[pa.Table], CommitProperties],
    *,
    file_rows: int = FOLD_FILE_ROWS,
) -> tuple[int, int]:
    """Rewrite the touched cells with their change rows folded in, in one commit: (files removed, rows
    written).

    Cell by cell (one in memory at a time): its files' rows and its change rows give the current rows
    of its keys (``current_rows``, the read rule), sorted by key and cut into files of about
    ``file_rows`` rows that stay inside the cell. The new files are written to the snapshot's
    ``STAGE_DIR`` folder as a small Delta table, whose log gives their statistics; one commit then adds
    them, removes the cells' old files and records the fold point, and the staging log is deleted.
    """
    key = table.spec.keys[0]
    stage_uri = f"{table.snapshot_uri.rstrip('/')}/{STAGE_DIR}"
    fs = open_filesystem(table.snapshot_uri, table.storage_options)
    options = dict(table.storage_options or {}) or None
    removed: list[KeyFile] = []
    newest: list[pa.Table] = []
    written = 0
    try:
        for i in plan.touched or [0]:
            # One touched cell owns every change row: no filtered copy of them.
            mine = rows if len(plan.touched) <= 1 else rows.filter(pa.array(plan.owner == i))
            if plan.cells:
                cell = plan.cells[i]
                removed.extend(cell.files)
                paths = [f.path for f in cell.files]
                base = scan(snapshot, table.schema, storage_options=table.storage_options, paths=paths)
            else:
                base = table.schema.empty_table()
            current = current_rows(base, mine, table.spec, table.seq)
            del base, mine  # not needed for the sort and the writes
            written += current.num_rows
            if table.event_time is not None:
                newest.append(current.select([table.event_time]))
            # Sorted by key one file at a time: no sorted copy of the whole cell.
            order = pc.sort_indices(current, sort_keys=[(key, "ascending")])
            for start, stop in _cut(current.num_rows, file_rows):
                write_deltalake(
                    stage_uri,
                    current.take(order[start:stop]),
                    mode="append",
                    storage_options=options,
                    writer_properties=writer_properties(
                        current.schema.names, bloom_filters=table.bloom_filter_columns
                    ),
                )
            del current, order
        adds = _staged_adds(fs)
        now = now_ms()
        removes = [RemoveAction(f.path, True, now, f.size, {}) for f in removed]
        snapshot.create_write_transaction(
            [*adds, *removes],
            mode="append",
            schema=snapshot.schema(),
            commit_properties=props(pa.concat_tables(newest) if newest else pa.table({})),
        )
    except BaseException:
        _abandon_stage(fs, snapshot)
        raise
    _delete(fs, STAGE_LOG)  # its files are the snapshot's now
    return len(removed), written


def _abandon_stage(fs: pafs.FileSystem, snapshot: DeltaTable) -> None:
    """After a failed attempt: delete the files it staged, unless the commit landed all the same (a
    failure after the commit, in a post-commit hook), then the staging log."""
    try:
        staged = [a.path for a in _staged_adds(fs)]
        snapshot.update_incremental()
        live = set(pa.table(snapshot.get_add_actions(flatten=True))["path"].to_pylist())
    except Exception as exc:  # noqa: BLE001 - what cannot be checked stays for VACUUM
        log.warning("%s: left the staged files of a failed fold to VACUUM: %s", snapshot.table_uri, exc)
        return
    if not any(p in live for p in staged):
        for path in staged:
            _delete(fs, unquote(path), kind="file")
    _delete(fs, STAGE_LOG)


def _cut(rows: int, file_rows: int) -> list[tuple[int, int]]:
    """``rows`` rows in order, cut into parts of equal size of at most ``file_rows`` rows (none if
    empty): each part's ``(start, stop)``."""
    parts = max(1, -(-rows // max(1, file_rows)))
    size = -(-rows // parts)
    return [(k * size, min(rows, (k + 1) * size)) for k in range(parts) if k * size < rows]


def _staged_adds(fs: pafs.FileSystem) -> list[AddAction]:
    """The add actions of the staging table's log, with paths relative to the snapshot."""
    out = []
    entries = fs.get_file_info(pafs.FileSelector(STAGE_LOG, allow_not_found=True))
    for info in sorted((e for e in entries if e.path.endswith(".json")), key=lambda e: e.path):
        with fs.open_input_stream(info.path) as fh:
            lines = fh.read().decode().splitlines()
        for line in lines:
            add = json.loads(line).get("add") if line.strip() else None
            if add:
                out.append(
                    AddAction(
                        path=f"{STAGE_DIR}/{add['path']}",
                        size=int(add["size"]),
                        partition_values={},
                        modification_time=int(add["modificationTime"]),
                        data_change=True,
                        stats=add.get("stats") or "",
                    )
                )
    return out


def clear_stage(table: MergeOnReadTable) -> bool:
    """Delete the staging log an interrupted fold left in the snapshot's folder; whether there was one.

    Only the log: its files are either the snapshot's (the commit landed) or no table's (VACUUM removes
    them). Run under the fold lock, so no fold is staging meanwhile.
    """
    fs = open_filesystem(table.snapshot_uri, table.storage_options)
    if fs.get_file_info(STAGE_LOG).type != pafs.FileType.Directory:
        return False
    log.info("%s: deleting %s, left by an interrupted fold", table.snapshot_uri, STAGE_LOG)
    _delete(fs, STAGE_LOG)
    return True


def _delete(fs: pafs.FileSystem, path: str, kind: str = "dir") -> None:
    try:
        if kind == "dir":
            fs.delete_dir(path)
        else:
            fs.delete_file(path)
    except (FileNotFoundError, OSError) as exc:
        log.warning("could not delete %s (VACUUM removes what is left): %s", path, exc)


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
        mine = pc.max(source[table.event_time]).as_py() if source.num_rows else None
        out["newest_event_time"] = newest(mine, previous)
    return out


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

    def exhausted(n: int, _exc: CommitFailedError) -> int:
        log.warning("%s: trim conflicted %d times; the next fold tries again", table.changes_uri, n)
        return 0

    try:
        with rewrite_lock(TableRef(table.changes_uri, table.changes_uri), "trim folded changes", wait_s=5.0):
            return fold_retry(max_attempts).run(
                lambda _n: _delete_through(changes, table.seq, point),
                retry_on=CommitFailedError,  # the job appended meanwhile
                exhausted=exhausted,
                on_retry=_log_conflict(table.changes_uri, "trim"),
            )
    except TableBusyError as exc:
        log.info("%s: %s; the next fold trims", table.changes_uri, exc)
        return 0


def _delete_through(changes: DeltaTable, seq: str, point: int) -> int:
    """Delete the change rows of sequence <= ``point``; rows deleted."""
    changes.update_incremental()
    metrics = changes.delete(f"{quote_ident(seq)} <= {point}")
    return int(metrics.get("num_deleted_rows", 0))


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
