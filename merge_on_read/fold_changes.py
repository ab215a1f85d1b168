"""The compaction of a merge-on-read table: fold the changes table into the snapshot, exactly once.

One fold appends the current rows of the keys changed above the snapshot's fold point, as one new sorted
run (``merge_on_read.sorted_runs``), in one commit whose txn action (``FOLD_APP``) records the new fold
point, so every change is folded exactly once, whatever crashes. Then, as ``CompactionPolicy`` picks
them, the newest runs are merged into one, key range by key range (one slice of every run in memory at
a time), in a commit that changes no row of the read path. So a fold costs about its changes, and the
whole table is rewritten only when the runs above the oldest grow to a set share of it. Folds hold the
table's maintenance lock; afterwards changes older than ``retention`` are trimmed, and each fold records
the snapshot's freshness (``FRESHNESS_KEY``). Contract: DESIGN.md section 13.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, NoReturn
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from lakestream.freshness import FRESHNESS_KEY, latest_freshness, newest
from lakestream.merge_on_read_rule import in_arrival_order
from lakestream.merge_reduce import reduce_guarded
from lakestream.merge_spec import quote_ident
from lakestream.run_folders import RUN_DIR, run_dir
from lakestream.time import iso_utc_ms
from maintenance.facts import TableRef, now_ms
from maintenance.rewrites import TableBusyError, rewrite_lock
from merge_on_read.key_ranges import KeyFile, cells, key_files
from merge_on_read.sorted_runs import CompactionPolicy, Run, compaction_plan, runs
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
#: Rows per snapshot file when neither table has a file to measure rows by; else ``file_rows_for``
#: derives them from the table's target file size.
FOLD_FILE_ROWS = 262_144
#: The fewest rows per file a derived size gives (a tiny target does not cut a run into crumbs).
MIN_FILE_ROWS = 1_024
#: Legacy folder of a fold's staging log (folds before sorted runs); an interrupted one's is cleared.
LEGACY_STAGE_DIR = "fold"
#: Commit metadata of a merge of runs: how many runs and rows it merged.
COMPACTION_KEY = "lakestream.runs_merged"


@dataclass(frozen=True)
class FoldResult:
    """What one fold did."""

    #: Change rows read and folded (0: the snapshot held every change).
    change_rows: int = 0
    #: Distinct keys among them (the orders folded): the rows of the run the fold appended.
    keys: int = 0
    #: Highest sequence the snapshot holds after the fold (None: it holds none yet).
    folded_through: int | None = None
    snapshot_version: int = -1
    #: Runs merged into one after the fold (0: none).
    runs_merged: int = 0
    #: Files and bytes the merge replaced (read and removed).
    files_rewritten: int = 0
    bytes_rewritten: int = 0
    #: Rows of the files written: the appended run and the merged one.
    rows_written: int = 0
    #: Bytes of the files written.
    bytes_written: int = 0
    #: Runs of the snapshot afterwards.
    runs: int = 0
    trimmed_rows: int = 0
    seconds: float = 0.0


def fold_once(
    table: MergeOnReadTable,
    *,
    retention: timedelta = DEFAULT_RETENTION,
    lock_wait_s: float = 600.0,
    max_attempts: int = 10,
    file_rows: int | None = None,
    policy: CompactionPolicy | None = None,
    full: bool = False,
) -> FoldResult:
    """Fold every change above the snapshot's fold point into it as a new run, merge runs as ``policy``
    (default: ``table.compaction``) says, or all of them with ``full``, then trim the changes table.

    ``file_rows``: rows per written file (None: ``file_rows_for`` the table's target size).
    """
    started = time.monotonic()
    ref = TableRef(table.snapshot_uri, table.snapshot_uri)
    with rewrite_lock(ref, "fold changes", wait_s=lock_wait_s):
        # The changes first, then the snapshot: a snapshot read later holds at least as much.
        changes = table.open_changes()
        snapshot = table.open_snapshot()
        clear_stage(table)
        per_file = file_rows or file_rows_for(table.target_file_size, _files(snapshot, table), changes)
        result = _append_run(table, changes, snapshot, max_attempts=max_attempts, file_rows=per_file)
        result = _merge_runs(
            table,
            snapshot,
            result,
            policy or table.compaction,
            full=full,
            file_rows=per_file,
            max_attempts=max_attempts,
        )
    trimmed = trim_changes(table, retention=retention, max_attempts=max_attempts)
    out = replace(result, trimmed_rows=trimmed, seconds=time.monotonic() - started)
    if out.change_rows or out.runs_merged:
        log.info("%s: %s", table.snapshot_uri, out)
    return out


def _files(snapshot: DeltaTable, table: MergeOnReadTable) -> list[KeyFile]:
    """The snapshot's files with their key ranges (``key_files``)."""
    files = key_files(pa.table(snapshot.get_add_actions(flatten=True)), table.spec.keys[0])
    if isinstance(files, str):
        raise ValueError(f"{table.snapshot_uri}: {files}; merge-on-read reads runs by their key statistics")
    return files


def _append_run(
    table: MergeOnReadTable,
    changes: DeltaTable | None,
    snapshot: DeltaTable,
    *,
    max_attempts: int,
    file_rows: int,
) -> FoldResult:
    """Write the changes above the fold point, one row per key, as a new run in one commit with the new
    fold point."""

    def attempt(_n: int) -> FoldResult:
        snapshot.update_incremental()
        through = folded_through(snapshot)
        rows = changes_above(changes, through, table)
        if rows.num_rows == 0:
            return FoldResult(folded_through=through, snapshot_version=snapshot.version())
        new_through = int(pc.max(rows[table.seq]).as_py())
        current = reduce_guarded(in_arrival_order(table.schema.empty_table(), rows, table.seq), table.spec)
        writer = RunWriter(table, run_dir(new_through), file_rows)
        try:
            writer.add(sort_by_key(current, table))
            adds = writer.close()
            metadata = {FRESHNESS_KEY: freshness(table, snapshot, current, new_through, changes)}
            props = CommitProperties(
                app_transactions=[Transaction(FOLD_APP, new_through)], custom_metadata=metadata
            )
            actions: list[AddAction | RemoveAction] = [*adds]
            snapshot.create_write_transaction(
                actions, mode="append", schema=snapshot.schema(), commit_properties=props
            )
        except BaseException:
            writer.abandon(snapshot)
            raise
        writer.done()
        snapshot.update_incremental()
        return FoldResult(
            change_rows=rows.num_rows,
            keys=current.num_rows,
            folded_through=new_through,
            snapshot_version=snapshot.version(),
            rows_written=current.num_rows,
            bytes_written=sum(a.size for a in adds),
        )

    return _retried(table, "the fold", attempt, max_attempts)


def _merge_runs(
    table: MergeOnReadTable,
    snapshot: DeltaTable,
    folded: FoldResult,
    policy: CompactionPolicy,
    *,
    full: bool,
    file_rows: int,
    max_attempts: int,
) -> FoldResult:
    """Merge the newest runs into one as ``policy`` picks them (all with ``full``), in one commit."""

    def attempt(_n: int) -> FoldResult:
        snapshot.update_incremental()
        found = runs(_files(snapshot, table))
        count = compaction_plan([r.size for r in found], policy, full=full)
        if count < 2:
            return replace(folded, snapshot_version=snapshot.version(), runs=len(found))
        chosen = found[-count:]
        writer = RunWriter(table, run_dir(chosen[-1].top), file_rows)
        try:
            merge_into(writer, table, snapshot, chosen)
            adds = writer.close(data_change=False)
            now = now_ms()
            removes = [RemoveAction(f.path, False, now, f.size, {}) for r in chosen for f in r.files]
            metadata = {COMPACTION_KEY: {"runs": count, "rows": writer.rows}}
            snapshot.create_write_transaction(
                [*adds, *removes],
                mode="append",
                schema=snapshot.schema(),
                commit_properties=CommitProperties(custom_metadata=metadata),
            )
        except BaseException:
            writer.abandon(snapshot)
            raise
        writer.done()
        snapshot.update_incremental()
        return replace(
            folded,
            snapshot_version=snapshot.version(),
            runs_merged=count,
            files_rewritten=len(removes),
            bytes_rewritten=sum(r.size for r in chosen),
            rows_written=folded.rows_written + writer.rows,
            bytes_written=folded.bytes_written + sum(a.size for a in adds),
            runs=len(found) - count + 1,
        )

    return _retried(table, "merging runs", attempt, max_attempts)


def _retried(
    table: MergeOnReadTable, what: str, attempt: Callable[[int], FoldResult], max_attempts: int
) -> FoldResult:
    """``attempt`` until it commits: a conflict means another writer (not a fold: those hold the lock)
    committed to the snapshot meanwhile, and the attempt is planned again."""

    def exhausted(n: int, exc: CommitFailedError) -> NoReturn:
        raise CommitFailedError(f"{table.snapshot_uri}: {what} conflicted {n} times; run it again") from exc

    return fold_retry(max_attempts).run(
        attempt,
        retry_on=CommitFailedError,
        exhausted=exhausted,
        on_retry=_log_conflict(table.snapshot_uri, what),
    )


def merge_into(
    writer: RunWriter, table: MergeOnReadTable, snapshot: DeltaTable, chosen: Sequence[Run]
) -> None:
    """The current rows of the keys of ``chosen`` (consecutive runs, oldest first) to ``writer``.

    Key range by key range: the ranges are the cells (``key_ranges.cells``) of the largest run's files,
    and each run is read file by file as the ranges reach its files, so memory holds about one file of
    each run. Within a range the runs' rows, oldest run first, are each key's rows in sequence order,
    and the read rule (``reduce_guarded``) folds them.
    """
    biggest = max(chosen, key=lambda r: r.rows)
    uppers: list[Any] = [c.lo for c in cells(biggest.files)][1:]
    cursors = [_RunCursor(table, snapshot, r) for r in chosen]
    for upper in [*uppers, None]:
        rows = pa.concat_tables([c.below(upper) for c in cursors])
        if rows.num_rows:
            writer.add(sort_by_key(reduce_guarded(rows, table.spec), table))


class _RunCursor:
    """A run's rows in key ranges: ``below(upper)`` gives the rows not given yet with key < ``upper``."""

    def __init__(self, table: MergeOnReadTable, snapshot: DeltaTable, run: Run) -> None:
        self._table = table
        self._snapshot = snapshot
        self._files = list(run.files)  # by lowest key
        self._next = 0
        self._held = table.schema.empty_table()

    def below(self, upper: Any) -> pa.Table:
        key = self._table.spec.keys[0]
        while self._next < len(self._files) and (upper is None or self._files[self._next].lo < upper):
            path = self._files[self._next].path
            read = scan(
                self._snapshot, self._table.schema, storage_options=self._table.storage_options, paths=[path]
            )
            self._held = pa.concat_tables([self._held, read])
            self._next += 1
        if upper is None:
            out, self._held = self._held, self._table.schema.empty_table()
            return out
        mask = pc.less(self._held[key], pa.scalar(upper, self._table.schema.field(key).type))
        out, self._held = self._held.filter(mask), self._held.filter(pc.invert(mask))
        return out


def sort_by_key(rows: pa.Table, table: MergeOnReadTable) -> pa.Table:
    """``rows`` sorted by the table's key."""
    return rows.take(pc.sort_indices(rows, sort_keys=[(table.spec.keys[0], "ascending")]))


class RunWriter:
    """Writes one run: rows added in key order, cut into files of ``file_rows`` rows, staged as a small
    Delta table in the run's folder of the snapshot (its log gives delta-rs' statistics of each file).

    ``close`` gives the add actions for the snapshot's commit; ``done`` (after it landed) deletes the
    staging log; ``abandon`` (it failed) deletes the staged files too, unless the commit landed.
    """

    def __init__(self, table: MergeOnReadTable, folder: str, file_rows: int) -> None:
        self.table = table
        self.folder = folder
        self.file_rows = max(1, file_rows)
        self.rows = 0
        self._uri = f"{table.snapshot_uri.rstrip('/')}/{folder}"
        self._fs = open_filesystem(table.snapshot_uri, table.storage_options)
        self._buffer = table.schema.empty_table()

    def add(self, rows: pa.Table) -> None:
        """Rows sorted by key, all above the keys added before."""
        self._buffer = pa.concat_tables([self._buffer, rows.select(self.table.schema.names)])
        while self._buffer.num_rows >= self.file_rows:
            self._write(self._buffer.slice(0, self.file_rows))
            self._buffer = self._buffer.slice(self.file_rows)

    def close(self, *, data_change: bool = True) -> list[AddAction]:
        """Write what is left; the staged files' add actions (paths relative to the snapshot)."""
        if self._buffer.num_rows:
            self._write(self._buffer)
            self._buffer = self.table.schema.empty_table()
        return staged_adds(self._fs, self.folder, data_change=data_change)

    def done(self) -> None:
        """The commit landed: delete the staging log (its files are the snapshot's)."""
        _delete(self._fs, f"{self.folder}/_delta_log")

    def abandon(self, snapshot: DeltaTable) -> None:
        """The commit failed: delete what was staged unless it landed all the same."""
        _abandon_stage(self._fs, snapshot, self.folder)

    def _write(self, rows: pa.Table) -> None:
        write_deltalake(
            self._uri,
            rows,
            mode="append",
            storage_options=dict(self.table.storage_options or {}) or None,
            writer_properties=writer_properties(
                rows.schema.names, bloom_filters=self.table.bloom_filter_columns
            ),
        )
        self.rows += rows.num_rows


def fold_retry(max_attempts: int) -> RetryPolicy:
    """The retries of a fold or trim that lost a commit race: 0.05 s doubling up to 2 s, no jitter."""
    return RetryPolicy(max_attempts=max_attempts, initial_backoff_s=0.05, max_backoff_s=2.0, jitter=0)


def _log_conflict(uri: str, what: str) -> Callable[[int, CommitFailedError, float], None]:
    """``RetryPolicy.run``'s ``on_retry``: log the conflicted attempt (counted from 0) of ``what``."""

    def on_retry(n: int, exc: CommitFailedError, _delay: float) -> None:
        log.info("%s: %s attempt %d conflicted (%s)", uri, what, n - 1, exc)

    return on_retry


def file_rows_for(target_bytes: int, snapshot_files: Sequence[KeyFile], changes: DeltaTable | None) -> int:
    """Rows per file that make a file of about ``target_bytes``, at the bytes per row of the snapshot's
    files, or of the changes table's (the same columns) while the snapshot has none;
    ``FOLD_FILE_ROWS`` when neither has a file."""
    rows, size = sum(f.rows for f in snapshot_files), sum(f.size for f in snapshot_files)
    if not rows and changes is not None:
        actions = pa.table(changes.get_add_actions(flatten=True))
        if actions.num_rows:
            rows = pc.sum(actions["num_records"]).as_py() or 0
            size = pc.sum(actions["size_bytes"]).as_py() or 0
    if rows and size:
        return max(MIN_FILE_ROWS, int(target_bytes * rows / size))
    return FOLD_FILE_ROWS


def _abandon_stage(fs: pafs.FileSystem, snapshot: DeltaTable, folder: str) -> None:
    """After a failed attempt: delete the files it staged, unless the commit landed all the same (a
    failure after the commit, in a post-commit hook), then the staging log."""
    try:
        staged = [a.path for a in staged_adds(fs, folder)]
        snapshot.update_incremental()
        live = set(pa.table(snapshot.get_add_actions(flatten=True))["path"].to_pylist())
    except Exception as exc:  # noqa: BLE001 - what cannot be checked stays for VACUUM
        log.warning("%s: left the staged files of a failed fold to VACUUM: %s", snapshot.table_uri, exc)
        return
    if not any(p in live for p in staged):
        for path in staged:
            _delete(fs, unquote(path), kind="file")
    _delete(fs, f"{folder}/_delta_log")


def staged_adds(fs: pafs.FileSystem, folder: str, *, data_change: bool = True) -> list[AddAction]:
    """The add actions of the staging log in ``folder`` of the snapshot, with paths relative to it
    (``data_change`` false for a merge of runs: it changes no row of the read path)."""
    out = []
    entries = fs.get_file_info(pafs.FileSelector(f"{folder}/_delta_log", allow_not_found=True))
    for info in sorted((e for e in entries if e.path.endswith(".json")), key=lambda e: e.path):
        with fs.open_input_stream(info.path) as fh:
            lines = fh.read().decode().splitlines()
        for line in lines:
            add = json.loads(line).get("add") if line.strip() else None
            if add:
                out.append(
                    AddAction(
                        path=f"{folder}/{add['path']}",
                        size=int(add["size"]),
                        partition_values={},
                        modification_time=int(add["modificationTime"]),
                        data_change=data_change,
                        stats=add.get("stats") or "",
                    )
                )
    return out


def clear_stage(table: MergeOnReadTable) -> bool:
    """Delete the staging logs an interrupted fold left in the snapshot's run folders (or in the legacy
    ``fold`` folder); whether there was one.

    Only the logs: their files are either the snapshot's (the commit landed) or no table's (VACUUM
    removes them). Run under the fold lock, so no fold is staging meanwhile.
    """
    fs = open_filesystem(table.snapshot_uri, table.storage_options)
    top = fs.get_file_info(pafs.FileSelector("", allow_not_found=True))
    folders = [e.base_name for e in top if e.type == pafs.FileType.Directory]
    logs = [f"{d}/_delta_log" for d in folders if d == LEGACY_STAGE_DIR or RUN_DIR.match(d)]
    found = [i.path for i in fs.get_file_info(logs) if i.type == pafs.FileType.Directory] if logs else []
    for path in found:
        log.info("%s: deleting %s, left by an interrupted fold", table.snapshot_uri, path)
        _delete(fs, path)
    return bool(found)


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
