"""Gather what the retention rules look at from a table folder: staged work, readers, versions.

Reads only: the sinks' manifests under ``_lakestream/manifests`` (every app prefix), the readers'
position records under ``_lakestream/readers`` and the commit times of the log. The rules themselves
are pure (``maintenance.retention``).
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
from storage.delta_log import DeltaLog, is_local_uri, local_path
from storage.reader_positions import read_records

#: Flink's default checkpoint timeout: a checkpoint that completes was started at most this long before.
CHECKPOINT_TIMEOUT = timedelta(minutes=10)


@dataclass(frozen=True, slots=True)
class TableRef:
    """A table as the user named it, and where it is."""

    name: str
    uri: str

    @property
    def local_root(self) -> Path | None:
        """The table folder on the local file system; None for object stores."""
        return Path(local_path(self.uri)) if is_local_uri(self.uri) else None


def resolve_table(cfg: Config, name: str) -> TableRef:
    """A table name under ``lakehouse.root`` (``silver/orders``), or an absolute path / URI as given."""
    if "://" in name or Path(name).is_absolute():
        return TableRef(name, name)
    return TableRef(name, cfg.lakehouse.table_uri(name))


def table_folders(base: Path) -> list[Path]:
    """Every folder under ``base`` that holds a ``_delta_log``, sorted, except those inside another
    table's folder (a fold's staging folder, ``merge_on_read.fold_changes``, while it runs)."""
    found = sorted(p.parent for p in base.rglob("_delta_log") if p.is_dir())
    tables = set(found)
    return [t for t in found if not any(parent in tables for parent in t.parents)]


def now_ms() -> int:
    """Wall clock in epoch milliseconds."""
    return int(time.time() * 1000)


def manifests(root: Path) -> list[Manifest]:
    """Every manifest of every app prefix staged in the table folder."""
    base = root / STAGING_ROOT / "manifests"
    if not base.is_dir():
        return []
    out: list[Manifest] = []
    for prefix_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        out.extend(StagingArea(root, unquote(prefix_dir.name)).list_all())
    return out


def _listing(root: Path, folders: Iterator[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for folder in folders:
        path = root if folder in ("", ".") else root / folder
        out[folder] = sorted(p.name for p in path.iterdir() if p.is_file()) if path.is_dir() else []
    return out


def staged_files(root: Path) -> frozenset[str]:
    """Paths (relative to the table root) that sinks staged and still own."""
    work = [
        StagedWork(
            files=tuple(f.path for f in m.files),
            token=m.token,
            staging_dirs=m.staging_dirs,
            pending=m.state == "pending",
        )
        for m in manifests(root)
    ]
    folders = {d for w in work if w.pending for d in w.staging_dirs}
    return protected_files(work, _listing(root, iter(sorted(folders))))


def restore_horizon(cfg: Config) -> timedelta:
    """How far behind its newest recorded position a reader's restore may go back: the checkpoint it
    restores from completed within a checkpoint timeout of being started, one interval after the last."""
    return 2 * cfg.flink.checkpoint_interval + CHECKPOINT_TIMEOUT


def reader_needs(ref: TableRef, cfg: Config) -> tuple[ReaderNeed, ...]:
    """Each recorded reader of a local table, with the oldest version it may still read and its time."""
    root = ref.local_root
    if root is None:
        return ()
    records = read_records(root)
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
    root = ref.local_root
    return RetentionFacts(
        now_ms=now_ms(),
        table_retention=deleted_file_retention(dt.metadata().configuration),
        checkpoint_interval=cfg.flink.checkpoint_interval,
        readers=reader_needs(ref, cfg),
        readers_known=root is not None,
        staged_files=staged_files(root) if root is not None else frozenset(),
    )


def written_by_sink(ref: TableRef, dt: DeltaTable, *, merge_only: bool = False) -> bool:
    """True when a lakestream streaming sink writes the table (its staging area, or its recent commits).

    ``merge_only``: a sink that MERGEs into it (merge sources staged, or MERGE commits of the sink).
    """
    root = ref.local_root
    if root is not None:
        staged = manifests(root)
        if staged and (not merge_only or any(m.kind == "merge_source" for m in staged)):
            return True
        if (root / STAGING_ROOT / "staging").is_dir() and merge_only:
            return True
    for entry in dt.history(100):
        if "lakestream.appVersions" in entry and (not merge_only or entry.get("operation") == "MERGE"):
            return True
    return False


def last_checkpoint_version(ref: TableRef) -> int | None:
    """Version of the newest log checkpoint (``_delta_log/_last_checkpoint``); None: none, or not local."""
    root = ref.local_root
    if root is None:
        return None
    try:
        text = (root / "_delta_log" / "_last_checkpoint").read_text(encoding="utf-8")
        return int(json.loads(text)["version"])
    except (FileNotFoundError, ValueError, KeyError):
        return None
