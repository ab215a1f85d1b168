"""Durable record of work staged for a checkpoint but not yet in the Delta log: the manifests.

A manifest is the only link between staged files and their checkpoint, so it is replaced atomically
(``TableFiles.write_atomic``: rename on a disk, one PUT on an object store) as ``pending`` before the
first data byte and as ``prepared`` once every file is durable; only ``prepared`` ones are committed
(DESIGN.md section 3). Layout under the table root, names percent-encoded, in folders Delta and VACUUM
skip::

    _lakestream/manifests/<app_prefix>/<run_id>/<subtask>/<checkpoint:020d>.json
    _lakestream/staging/<app_prefix>/<run_id>/<subtask>/<checkpoint:020d>-<token>.arrow   (merge sources)
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from storage.local_files import path_segment
from storage.table_files import TableFiles, table_files

ManifestState = Literal["pending", "prepared"]
ManifestKind = Literal["data_files", "merge_source"]

STAGING_ROOT = "_lakestream"
MANIFEST_FORMAT = 1


def app_id_for(app_prefix: str, run_id: str, subtask: int) -> str:
    """The Delta txn app id of one subtask of one run."""
    return f"{app_prefix}:{run_id}:{subtask}"


@dataclass(frozen=True)
class StagedFile:
    """One file written at PRECOMMIT, with what its Delta ``add`` action will say."""

    #: Relative to the table root, as on disk (posix separators, partition folders escaped once).
    path: str
    size_bytes: int
    num_rows: int
    partition_values: dict[str, str | None] = field(default_factory=dict)
    #: Delta statistics JSON (empty for merge sources, which never enter the log).
    stats: str = ""
    modification_time_ms: int = 0


@dataclass(frozen=True)
class Manifest:
    """What one subtask staged for one checkpoint."""

    app_prefix: str
    run_id: str
    subtask: int
    checkpoint_id: int
    state: ManifestState
    kind: ManifestKind
    #: Every file of this prepare has ``token`` in its name; lets a pending manifest find partial files.
    token: str
    #: Folders (relative to the table root) where files carrying ``token`` may exist.
    staging_dirs: tuple[str, ...]
    files: tuple[StagedFile, ...] = ()
    created_ms: int = 0
    #: Counts the operator attached to this checkpoint's work (``prepare(n, counters=...)``); the commit
    #: that takes this manifest adds them into its ``lakestream.counters`` metadata, so each is recorded
    #: in the table exactly once. Absent in manifests of earlier versions: read as none.
    counters: dict[str, int] = field(default_factory=dict)
    #: Where the writer's input stands once this checkpoint's rows are in (``lakestream.progress``): the
    #: commit that takes this manifest records each value as a txn action, the later checkpoint's value
    #: winning, so a table's progress always describes exactly the rows committed. Absent in manifests
    #: of earlier versions: read as none.
    progress: dict[str, int] = field(default_factory=dict)

    @property
    def app_id(self) -> str:
        """Delta txn app id this manifest commits under."""
        return app_id_for(self.app_prefix, self.run_id, self.subtask)

    def committed_in(self, txn_version: int | None) -> bool:
        """Whether a table whose txn version for this app id is ``txn_version`` already holds this work."""
        return txn_version is not None and txn_version >= self.checkpoint_id

    @property
    def num_rows(self) -> int:
        """Rows staged (before any merge pre-reduction)."""
        return sum(f.num_rows for f in self.files)

    @property
    def size_bytes(self) -> int:
        """Bytes staged on disk."""
        return sum(f.size_bytes for f in self.files)

    def to_json(self) -> str:
        """Serialized form; stable field names, versioned by ``format``."""
        doc: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "app_prefix": self.app_prefix,
            "run_id": self.run_id,
            "subtask": self.subtask,
            "app_id": self.app_id,
            "checkpoint_id": self.checkpoint_id,
            "state": self.state,
            "kind": self.kind,
            "token": self.token,
            "staging_dirs": list(self.staging_dirs),
            "created_ms": self.created_ms,
            "counters": dict(sorted(self.counters.items())),
            "progress": dict(sorted(self.progress.items())),
            "files": [
                {
                    "path": f.path,
                    "size_bytes": f.size_bytes,
                    "num_rows": f.num_rows,
                    "partition_values": f.partition_values,
                    "stats": f.stats,
                    "modification_time_ms": f.modification_time_ms,
                }
                for f in self.files
            ],
        }
        return json.dumps(doc, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse a manifest; rejects formats this code does not know."""
        doc = json.loads(text)
        if doc.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"unknown manifest format {doc.get('format')!r} (expected {MANIFEST_FORMAT})")
        return cls(
            app_prefix=doc["app_prefix"],
            run_id=doc["run_id"],
            subtask=int(doc["subtask"]),
            checkpoint_id=int(doc["checkpoint_id"]),
            state=doc["state"],
            kind=doc["kind"],
            token=doc["token"],
            staging_dirs=tuple(doc["staging_dirs"]),
            created_ms=int(doc["created_ms"]),
            counters={str(k): int(v) for k, v in doc.get("counters", {}).items()},
            progress={str(k): int(v) for k, v in doc.get("progress", {}).items()},
            files=tuple(
                StagedFile(
                    path=f["path"],
                    size_bytes=int(f["size_bytes"]),
                    num_rows=int(f["num_rows"]),
                    partition_values=dict(f["partition_values"]),
                    stats=f["stats"],
                    modification_time_ms=int(f["modification_time_ms"]),
                )
                for f in doc["files"]
            ),
        )


def new_token() -> str:
    """Unique per prepare; goes into every staged file name."""
    return uuid.uuid4().hex


def now_ms() -> int:
    """Wall clock in epoch milliseconds (Delta's time unit)."""
    return int(time.time() * 1000)


class StagingArea:
    """Manifests and merge sources of one app prefix under one table root (local or object store)."""

    def __init__(self, files: TableFiles, app_prefix: str) -> None:
        self.files = files
        self.app_prefix = app_prefix
        self.manifest_root = f"{STAGING_ROOT}/manifests/{path_segment(app_prefix)}"
        self.staging_root = f"{STAGING_ROOT}/staging/{path_segment(app_prefix)}"

    @classmethod
    def of_table(
        cls, table_uri: str, app_prefix: str, options: Mapping[str, str] | None = None
    ) -> StagingArea:
        """The staging area of ``app_prefix`` in the table at ``table_uri`` (``options``: delta-rs')."""
        return cls(table_files(table_uri, options), app_prefix)

    @property
    def table_uri(self) -> str:
        """The table root as its files know it."""
        return self.files.uri

    def manifest_path(self, run_id: str, subtask: int, checkpoint_id: int) -> str:
        """Where the manifest of (run, subtask, checkpoint) lives, relative to the table root."""
        return f"{self.manifest_root}/{path_segment(run_id)}/{subtask}/{checkpoint_id:020d}.json"

    def merge_source_dir(self, run_id: str, subtask: int) -> str:
        """Folder of a subtask's staged MERGE sources, relative to the table root."""
        return f"{self.staging_root}/{path_segment(run_id)}/{subtask}"

    def write(self, manifest: Manifest) -> None:
        """Durably (re)write a manifest."""
        path = self.manifest_path(manifest.run_id, manifest.subtask, manifest.checkpoint_id)
        self.files.write_atomic(path, manifest.to_json().encode("utf-8"))

    def delete(self, manifest: Manifest) -> None:
        """Remove a manifest (idempotent)."""
        self.files.delete(self.manifest_path(manifest.run_id, manifest.subtask, manifest.checkpoint_id))

    def read(self, relative_path: str) -> Manifest | None:
        """The manifest at ``relative_path`` (relative to the table root), or None if it is gone."""
        data = self.files.read(relative_path)
        return None if data is None else Manifest.from_json(data.decode("utf-8"))

    def list_all(self) -> list[Manifest]:
        """Every manifest of this app prefix, all runs and subtasks, sorted by (checkpoint, subtask)."""
        found = []
        for f in self.files.list(self.manifest_root):
            parts = f.path[len(self.manifest_root) + 1 :].split("/")
            # <run>/<subtask>/<checkpoint>.json; a torn local replace leaves a dot-named temp file
            if len(parts) == 3 and parts[2].endswith(".json") and not parts[2].startswith("."):
                manifest = self.read(f.path)
                if manifest is not None:
                    found.append(manifest)
        return sorted(found, key=lambda m: (m.checkpoint_id, m.run_id, m.subtask))

    def delete_staged_files(self, manifest: Manifest) -> None:
        """Delete what a manifest staged: the listed files, and for pending ones any file with its token."""
        for f in manifest.files:
            self.files.delete(f.path)
        if manifest.state == "pending":
            for d in manifest.staging_dirs:
                for found in self.files.list("" if d == "." else d, recursive=False):
                    if manifest.token in found.path.rsplit("/", 1)[-1]:
                        self.files.delete(found.path)

    def abort(self, manifest: Manifest) -> None:
        """Undo a prepare that will never be committed: its files, then the manifest naming them."""
        self.delete_staged_files(manifest)
        self.delete(manifest)

    def discard_committed(self, manifest: Manifest) -> None:
        """After its Delta commit: data files belong to the table now; a merge source and the manifest go."""
        if manifest.kind == "merge_source":
            self.delete_staged_files(manifest)
        self.delete(manifest)

    def remove_empty_run_dirs(self, keep_run_id: str) -> None:
        """Tidy the folders of finished runs; the live run's folders stay (other subtasks use them)."""
        for root in (self.manifest_root, self.staging_root):
            self.files.remove_empty_folders(root, keep=path_segment(keep_run_id))
