"""Read a Delta table's log version by version: the actions of one commit, the snapshot at a version.

The commit JSON files are read directly because deltalake (1.6) exposes snapshots (``get_add_actions``)
and commit infos (``history``) but not one commit's ``add``/``remove``/``cdc`` actions with their
``dataChange`` flags, on which table-changes semantics rest; snapshots and metadata come from deltalake,
which handles checkpoints (DESIGN.md section 6).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from sources.errors import UnsupportedTableError

LOG_DIR = "_delta_log"
FileKind = Literal["add", "remove", "cdc"]


def commit_file(version: int) -> str:
    """Path of a commit file relative to the table root."""
    return f"{LOG_DIR}/{version:020d}.json"


def is_local_uri(uri: str) -> bool:
    """True for plain paths and ``file://`` URIs."""
    return "://" not in uri or uri.startswith("file://")


def local_path(uri: str) -> str:
    """Absolute local path of a local table URI."""
    if uri.startswith("file://"):
        return str(Path(unquote(urlparse(uri).path)).resolve())
    return str(Path(uri).resolve())


def open_filesystem(table_uri: str, storage_options: Mapping[str, str] | None = None) -> pafs.FileSystem:
    """A pyarrow filesystem whose paths are relative to the table root.

    The native local filesystem for local paths, deltalake's object-store handler
    (``DeltaStorageHandler``) for anything else, so every storage deltalake supports works with the same
    ``storage_options``.
    """
    if is_local_uri(table_uri):
        return pafs.SubTreeFileSystem(local_path(table_uri), pafs.LocalFileSystem())
    from deltalake.fs import DeltaStorageHandler

    return pafs.PyFileSystem(DeltaStorageHandler(table_uri, dict(storage_options or {})))


@dataclass(frozen=True, slots=True)
class FileAction:
    """One ``add`` / ``remove`` / ``cdc`` action (or one file of a snapshot)."""

    kind: FileKind
    #: As written in the log: relative (URI-encoded) or absolute URI.
    path: str
    size: int
    data_change: bool
    #: Delta-serialised strings from the log, or typed values from a snapshot; None = null.
    partition_values: Mapping[str, Any] = field(default_factory=dict)
    modification_time: int = 0
    has_deletion_vector: bool = False


@dataclass(frozen=True, slots=True)
class TableMetadata:
    """The parts of a ``metaData`` action the source acts on."""

    table_id: str
    schema_string: str
    partition_columns: tuple[str, ...]
    configuration: Mapping[str, str]

    @property
    def cdf_enabled(self) -> bool:
        """``delta.enableChangeDataFeed`` is on."""
        return str(self.configuration.get("delta.enableChangeDataFeed", "false")).lower() == "true"

    @property
    def column_mapping_mode(self) -> str:
        """``none``, ``name`` or ``id``."""
        return str(self.configuration.get("delta.columnMapping.mode", "none")).lower()

    def arrow_schema(self) -> pa.Schema:
        """The table schema as Arrow (logical names, deltalake's type mapping)."""
        return arrow_schema_from_delta_json(self.schema_string)


def arrow_schema_from_delta_json(schema_string: str) -> pa.Schema:
    """Delta ``schemaString`` -> pyarrow schema (string views normalised to plain strings)."""
    from deltalake import Schema

    return normalize_schema(pa.schema(Schema.from_json(schema_string).to_arrow()))


def normalize_type(t: pa.DataType) -> pa.DataType:
    """Plain string/binary instead of view/large variants, recursively (one Python-facing type per column)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t) or str(t) == "string_view":
        return pa.string()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or str(t) == "binary_view":
        return pa.binary()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(normalize_type(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(t.value_field.with_type(normalize_type(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(normalize_type(t.key_type), t.item_field.with_type(normalize_type(t.item_type)))
    return t


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    """:func:`normalize_type` on every field, metadata dropped."""
    return pa.schema([f.with_type(normalize_type(f.type)).remove_metadata() for f in schema])


@dataclass(frozen=True, slots=True)
class Commit:
    """The actions of one commit file that matter to a streaming reader."""

    version: int
    timestamp_ms: int
    operation: str | None
    adds: tuple[FileAction, ...] = ()
    removes: tuple[FileAction, ...] = ()
    cdcs: tuple[FileAction, ...] = ()
    metadata: TableMetadata | None = None

    @property
    def data_adds(self) -> tuple[FileAction, ...]:
        """``add`` actions with dataChange=true, in log order (the per-version file index)."""
        return tuple(a for a in self.adds if a.data_change)

    @property
    def data_removes(self) -> tuple[FileAction, ...]:
        """``remove`` actions with dataChange=true."""
        return tuple(r for r in self.removes if r.data_change)


def _metadata_from_action(meta: Mapping[str, Any]) -> TableMetadata:
    return TableMetadata(
        table_id=str(meta.get("id", "")),
        schema_string=str(meta.get("schemaString", "")),
        partition_columns=tuple(meta.get("partitionColumns") or ()),
        configuration={str(k): str(v) for k, v in (meta.get("configuration") or {}).items()},
    )


def _file_action(kind: FileKind, body: Mapping[str, Any]) -> FileAction:
    return FileAction(
        kind=kind,
        path=str(body["path"]),
        size=int(body.get("size") or 0),
        # cdc actions carry dataChange=false by the protocol; removes without the flag default to true.
        data_change=bool(body.get("dataChange", kind != "cdc")),
        partition_values=dict(body.get("partitionValues") or {}),
        modification_time=int(body.get("modificationTime") or body.get("deletionTimestamp") or 0),
        has_deletion_vector=body.get("deletionVector") is not None,
    )


def parse_commit(version: int, text: str | bytes, *, fallback_timestamp_ms: int = 0) -> Commit:
    """Parse one commit file (newline-delimited JSON actions)."""
    adds: list[FileAction] = []
    removes: list[FileAction] = []
    cdcs: list[FileAction] = []
    metadata: TableMetadata | None = None
    timestamp: int | None = None
    operation: str | None = None
    raw = text.decode("utf-8") if isinstance(text, bytes) else text
    for line in raw.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "add" in action:
            adds.append(_file_action("add", action["add"]))
        elif "remove" in action:
            removes.append(_file_action("remove", action["remove"]))
        elif "cdc" in action:
            cdcs.append(_file_action("cdc", action["cdc"]))
        elif "metaData" in action:
            metadata = _metadata_from_action(action["metaData"])
        elif "commitInfo" in action:
            info = action["commitInfo"]
            ts = info.get("inCommitTimestamp", info.get("timestamp"))
            timestamp = int(ts) if ts is not None else None
            operation = info.get("operation")
    return Commit(
        version=version,
        timestamp_ms=timestamp if timestamp is not None else fallback_timestamp_ms,
        operation=operation,
        adds=tuple(adds),
        removes=tuple(removes),
        cdcs=tuple(cdcs),
        metadata=metadata,
    )


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    """One file of a snapshot, with the event-time range its statistics give (for event-time order)."""

    action: FileAction
    event_min: Any = None
    event_max: Any = None


class DeltaLog:
    """Version-by-version access to one table's log, with a small cache of parsed commits."""

    def __init__(
        self, table_uri: str, *, storage_options: Mapping[str, str] | None = None, cache_size: int = 4096
    ) -> None:
        self.table_uri = local_path(table_uri) if is_local_uri(table_uri) else table_uri
        self.storage_options = dict(storage_options or {})
        self.fs = open_filesystem(self.table_uri, self.storage_options)
        self._cache: OrderedDict[int, Commit] = OrderedDict()
        self._cache_size = cache_size

    # -- listing and commits -------------------------------------------------------------------------
    def commit_versions(self) -> list[int]:
        """Versions whose commit JSON is still in ``_delta_log``, ascending."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(LOG_DIR, allow_not_found=True))
        except FileNotFoundError:
            return []
        versions = []
        for info in infos:
            name = info.base_name
            stem = name[: -len(".json")]
            if name.endswith(".json") and len(stem) == 20 and stem.isdigit():
                versions.append(int(stem))
        return sorted(versions)

    def read_commit(self, version: int) -> Commit | None:
        """The parsed commit, or None when its file does not exist (never written, or cleaned up)."""
        cached = self._cache.get(version)
        if cached is not None:
            self._cache.move_to_end(version)
            return cached
        path = commit_file(version)
        info = self.fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            return None
        with self.fs.open_input_stream(path) as fh:
            text = fh.read()
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime is not None else 0
        commit = parse_commit(version, text, fallback_timestamp_ms=mtime)
        self._cache[version] = commit
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return commit

    # -- snapshots (deltalake, checkpoint-aware) -----------------------------------------------------
    def table(self, version: int | None = None) -> Any:
        """A deltalake ``DeltaTable`` at ``version`` (latest when None)."""
        from deltalake import DeltaTable

        return DeltaTable(self.table_uri, version=version, storage_options=self.storage_options or None)

    def metadata_at(self, version: int) -> TableMetadata:
        """Table metadata in effect at ``version`` (after applying it)."""
        dt = self.table(version)
        meta = dt.metadata()
        return TableMetadata(
            table_id=str(meta.id),
            schema_string=dt.schema().to_json(),
            partition_columns=tuple(meta.partition_columns),
            configuration={str(k): str(v) for k, v in (meta.configuration or {}).items()},
        )

    def snapshot_files(self, version: int, *, event_time_column: str | None = None) -> list[SnapshotFile]:
        """Files live at ``version``, ordered by (modification time, path) like Spark's initial snapshot."""
        dt = self.table(version)
        actions = pa.table(dt.get_add_actions(flatten=True))
        names = set(actions.column_names)
        partition_cols = [n[len("partition.") :] for n in actions.column_names if n.startswith("partition.")]
        columns = {n: actions.column(n).to_pylist() for n in actions.column_names}
        event_min_col = event_max_col = None
        if event_time_column is not None:
            if f"partition.{event_time_column}" in names:
                event_min_col = event_max_col = f"partition.{event_time_column}"
            else:
                event_min_col = f"min.{event_time_column}" if f"min.{event_time_column}" in names else None
                event_max_col = f"max.{event_time_column}" if f"max.{event_time_column}" in names else None
        files: list[SnapshotFile] = []
        for i, path in enumerate(columns["path"]):
            action = FileAction(
                kind="add",
                path=str(path),
                size=int(columns["size_bytes"][i]),
                data_change=True,
                partition_values={c: columns[f"partition.{c}"][i] for c in partition_cols},
                modification_time=int(columns["modification_time"][i]),
                # get_add_actions does not expose deletion vectors: snapshot files are not checked for them.
                has_deletion_vector=False,
            )
            files.append(
                SnapshotFile(
                    action=action,
                    event_min=columns[event_min_col][i] if event_min_col else None,
                    event_max=columns[event_max_col][i] if event_max_col else None,
                )
            )
        files.sort(key=lambda f: (f.action.modification_time, f.action.path))
        return files

    # -- data files ----------------------------------------------------------------------------------
    def data_file(self, path: str) -> str:
        """Filesystem path (relative to the table root) of a path as written in the log."""
        if "://" in path:
            parsed = urlparse(path)
            if is_local_uri(self.table_uri) and parsed.scheme == "file":
                absolute = Path(unquote(parsed.path))
                if absolute.is_relative_to(self.table_uri):
                    return str(absolute.relative_to(self.table_uri))
            prefix = self.table_uri.rstrip("/") + "/"
            if not is_local_uri(self.table_uri) and path.startswith(prefix):
                return unquote(path[len(prefix) :])
            raise UnsupportedTableError(
                f"data file {path!r} lies outside the table root {self.table_uri}; shallow clones and "
                "absolute paths into other locations are not supported by the Delta source"
            )
        return unquote(path)

    def missing_files(self, actions: Sequence[FileAction]) -> list[str]:
        """Log paths of the files in ``actions`` that no longer exist (e.g. removed by VACUUM)."""
        if not actions:
            return []
        infos = self.fs.get_file_info([self.data_file(a.path) for a in actions])
        return [a.path for a, info in zip(actions, infos, strict=True) if info.type == pafs.FileType.NotFound]
