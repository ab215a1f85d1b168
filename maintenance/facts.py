"""Gather what the retention rules look at from a table's files: staged work, readers, versions.

Reads only, through ``storage.table_files`` (a local folder or an object store alike): the sinks'
manifests under ``_lakestream/manifests`` (every app prefix), the readers' position records under
``_lakestream/readers`` and the commit times of the log; and finds the tables under a lakehouse root.
The rules themselves are pure (``maintenance.retention``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote

from deltalake import DeltaTable

from lakestream.config import Config
from maintenance.retention import (
    ReaderNeed,
    RetentionFacts,
    StagedWork,
    deleted_file_retention,
    protected_files,
)
from sinks.staging import STAGING_ROOT, Manifest, StagingArea
from storage.delta_log import LOG_DIR, DeltaLog
from storage.reader_positions import read_records
from storage.table_files import TableFiles, table_files

#: Flink's default checkpoint timeout: a checkpoint that completes was started at most this long before.
CHECKPOINT_TIMEOUT = timedelta(minutes=10)


@dataclass(frozen=True, slots=True)
class TableRef:
    """A table as the user named it, and where it is."""

    name: str
    uri: str

    def files(self) -> TableFiles:
        """The table's files (an object store's settings come from the environment, as delta-rs')."""
        return table_files(self.uri)


def resolve_table(cfg: Config, name: str) -> TableRef:
    """A table name under ``lakehouse.root`` (``silver/orders``), or an absolute path / URI as given."""
    if "://" in name or Path(name).is_absolute():
        return TableRef(name, name)
    return TableRef(name, cfg.lakehouse.table_uri(name))


def tables_under(root: TableFiles) -> list[str]:
    """Every folder under ``root`` that holds a ``_delta_log`` (relative, ``/``-separated; "" for the
    root itself), sorted, except those inside another table's folder (a fold's staging folder,
    ``merge_on_read.fold_changes``, while it runs): a walk that lists folders only, and stops at tables,
    so a table's own files are never listed."""
    found: list[str] = []
    pending = [""]
    while pending:
        folder = pending.pop()
        folders = root.list_folders(folder)
        if LOG_DIR in folders:
            found.append(folder)
        else:
            pending.extend(f"{folder}/{name}" if folder else name for name in folders)
    return sorted(found, key=lambda name: name.split("/"))


def now_ms() -> int:
    """Wall clock in epoch milliseconds."""
    return int(time.time() * 1000)


def manifests(files: TableFiles) -> list[Manifest]:
    """Every manifest of every app prefix staged in the table."""
    out: list[Manifest] = []
    for prefix in files.list_folders(f"{STAGING_ROOT}/manifests"):
        out.extend(StagingArea(files, unquote(prefix)).list_all())
    return out


def _listing(files: TableFiles, folders: Iterator[str]) -> dict[str, list[str]]:
    return {
        folder: [f.path.rpartition("/")[2] for f in files.list(folder, recursive=False)] for folder in folders
    }


def staged_files(files: TableFiles) -> frozenset[str]:
    """Paths (relative to the table root) that sinks staged and still own."""
    work = [
        StagedWork(
            files=tuple(f.path for f in m.files),
            token=m.token,
            staging_dirs=m.staging_dirs,
            pending=m.state == "pending",
        )
        for m in manifests(files)
    ]
    folders = {d for w in work if w.pending for d in w.staging_dirs}
    return protected_files(work, _listing(files, iter(sorted(folders))))


def restore_horizon(cfg: Config) -> timedelta:
    """How far behind its newest recorded position a reader's restore may go back: the checkpoint it
    restores from completed within a checkpoint timeout of being started, one interval after the last."""
    return 2 * cfg.flink.checkpoint_interval + CHECKPOINT_TIMEOUT


def reader_needs(ref: TableRef, cfg: Config) -> tuple[ReaderNeed, ...]:
    """Each recorded reader of the table, with the oldest version it may still read and its time."""
    records = read_records(ref.files())
    if not records:
        return ()
    log = DeltaLog(ref.uri)
    latest = log.table().version()
    horizon_ms = int(restore_horizon(cfg).total_seconds() * 1000)
    out = []
    for record in records:
        version = record.needed_version(horizon_ms)
        commit = log.read_commit(version) if version <= latest else None
        missing = version <= latest and commit is None
        out.append(
            ReaderNeed(
                reader=record.reader,
                version=version,
                version_time_ms=(0 if missing else commit.timestamp_ms if commit is not None else None),
                last_seen_ms=record.updated_ms,
                commit_missing=missing,
            )
        )
    return tuple(out)


def retention_facts(ref: TableRef, dt: DeltaTable, cfg: Config) -> RetentionFacts:
    """The facts ``maintenance.retention`` decides a VACUUM on, for the table at ``ref``."""
    return RetentionFacts(
        now_ms=now_ms(),
        table_retention=deleted_file_retention(dt.metadata().configuration),
        checkpoint_interval=cfg.flink.checkpoint_interval,
        readers=reader_needs(ref, cfg),
        staged_files=staged_files(ref.files()),
    )


def written_by_sink(ref: TableRef, dt: DeltaTable, *, merge_only: bool = False) -> bool:
    """True when a lakestream streaming sink writes the table (its staging area, or its recent commits).

    ``merge_only``: a sink that MERGEs into it (merge sources staged, or MERGE commits of the sink).
    """
    files = ref.files()
    staged = manifests(files)
    if staged and (not merge_only or any(m.kind == "merge_source" for m in staged)):
        return True
    if merge_only and "staging" in files.list_folders(STAGING_ROOT):
        return True
    for entry in dt.history(100):
        if "lakestream.appVersions" in entry and (not merge_only or entry.get("operation") == "MERGE"):
            return True
    return False


def last_checkpoint_version(ref: TableRef) -> int | None:
    """Version of the newest log checkpoint (``_delta_log/_last_checkpoint``); None when there is none."""
    data = ref.files().read(f"{LOG_DIR}/_last_checkpoint")
    try:
        return None if data is None else int(json.loads(data)["version"])
    except (ValueError, KeyError, TypeError):
        return None
