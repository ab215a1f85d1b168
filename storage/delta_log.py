"""Read a Delta table's log version by version: the actions of one commit, the snapshot at a version.

The commit JSON files are read directly because deltalake (1.6) exposes snapshots (``get_add_actions``)
and commit infos (``history``) but not one commit's ``add``/``remove``/``cdc`` actions with their
``dataChange`` flags, on which table-changes semantics rest; snapshots and metadata come from deltalake,
which handles checkpoints (DESIGN.md section 6). This is the one reader of commit files: the Delta
source, maintenance, and the demo's per-commit summary (:class:`TableLog`: rows added, the sinks'
``txn`` actions and counters, the ``ingest_time`` range) all read them here.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from lakestream.progress import PROGRESS_SEGMENT
from lakestream.time import parse_iso
from storage.parquet_read import read_parquet
from storage.read_errors import DeltaReadError, UnsupportedTableError

LOG_DIR = "_delta_log"
FileKind = Literal["add", "remove", "cdc"]
#: The txn version the sinks record for their end-of-input commit (Flink's end-of-input checkpoint id).
END_OF_INPUT = 2**63 - 1
#: Commit metadata key of the sinks' per-commit counters: the summed counters of the manifests a commit
#: takes (``Stager.prepare(n, counters=...)``).
COUNTERS_KEY = "lakestream.counters"


class DeltaLogError(DeltaReadError):
    """A commit file could not be understood; the message names the file."""


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


def location(root: str | Path, name: str) -> str:
    """Where ``name`` (``silver/orders``) is under ``root``: a local path joined, a URI with ``/``."""
    if is_local_uri(str(root)):
        return str(Path(local_path(str(root))) / name)
    return f"{str(root).rstrip('/')}/{name}"


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
    #: An ``add``'s statistics (JSON text) as written; only when the log is read with ``details``.
    stats: str | None = None


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
    #: ``txn`` actions: app id -> version (a sink's Flink checkpoint id).
    txn: Mapping[str, int] = field(default_factory=dict)
    #: The ``commitInfo`` action as written; only when the log is read with ``details``.
    info: Mapping[str, Any] = field(default_factory=dict)

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


def _file_action(kind: FileKind, body: Mapping[str, Any], *, details: bool = False) -> FileAction:
    return FileAction(
        kind=kind,
        path=str(body["path"]),
        size=int(body.get("size") or 0),
        # cdc actions carry dataChange=false by the protocol; removes without the flag default to true.
        data_change=bool(body.get("dataChange", kind != "cdc")),
        partition_values=dict(body.get("partitionValues") or {}),
        modification_time=int(body.get("modificationTime") or body.get("deletionTimestamp") or 0),
        has_deletion_vector=body.get("deletionVector") is not None,
        stats=body.get("stats") if details else None,
    )


def parse_commit(
    version: int, text: str | bytes, *, fallback_timestamp_ms: int = 0, details: bool = False
) -> Commit:
    """Parse one commit file (newline-delimited JSON actions).

    ``details`` keeps each ``add``'s statistics and the ``commitInfo``: the per-commit summary reads
    them; a streaming reader, which caches thousands of commits, does not need them.
    """
    adds: list[FileAction] = []
    removes: list[FileAction] = []
    cdcs: list[FileAction] = []
    metadata: TableMetadata | None = None
    txn: dict[str, int] = {}
    info: dict[str, Any] = {}
    timestamp: int | None = None
    operation: str | None = None
    raw = text.decode("utf-8") if isinstance(text, bytes) else text
    for line in raw.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "add" in action:
            adds.append(_file_action("add", action["add"], details=details))
        elif "remove" in action:
            removes.append(_file_action("remove", action["remove"]))
        elif "cdc" in action:
            cdcs.append(_file_action("cdc", action["cdc"]))
        elif "metaData" in action:
            metadata = _metadata_from_action(action["metaData"])
        elif "txn" in action:
            txn[str(action["txn"]["appId"])] = int(action["txn"]["version"])
        elif "commitInfo" in action:
            commit_info = action["commitInfo"]
            ts = commit_info.get("inCommitTimestamp", commit_info.get("timestamp"))
            timestamp = int(ts) if ts is not None else None
            operation = commit_info.get("operation")
            if details:
                info = dict(commit_info)
    return Commit(
        version=version,
        timestamp_ms=timestamp if timestamp is not None else fallback_timestamp_ms,
        operation=operation,
        adds=tuple(adds),
        removes=tuple(removes),
        cdcs=tuple(cdcs),
        metadata=metadata,
        txn=txn,
        info=info,
    )


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    """One file of a snapshot, with the event-time range its statistics give (for event-time order)."""

    action: FileAction
    event_min: Any = None
    event_max: Any = None


#: Commits ``DeltaLog.first_txn_commit`` walks after the first at or after its time: a writer's work lands
#: within a few checkpoints of the time it notes, and each checkpoint is one commit per writer.
_TXN_SEARCH_COMMITS = 256


class DeltaLog:
    """Version-by-version access to one table's log, with a small cache of parsed commits.

    ``details``: commits keep their statistics and ``commitInfo`` (:func:`parse_commit`).
    """

    def __init__(
        self,
        table_uri: str,
        *,
        storage_options: Mapping[str, str] | None = None,
        cache_size: int = 4096,
        details: bool = False,
    ) -> None:
        self.table_uri = local_path(table_uri) if is_local_uri(table_uri) else table_uri
        self.storage_options = dict(storage_options or {})
        self.fs = open_filesystem(self.table_uri, self.storage_options)
        self._cache: OrderedDict[int, Commit] = OrderedDict()
        self._cache_size = cache_size
        self._details = details

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

    def app_versions(self, version: int | None = None) -> dict[str, int]:
        """Every ``txn`` app id of the snapshot at ``version`` (latest when None) with its version.

        deltalake answers only app ids asked for by name; finding every app id of a kind (the progress
        ingest recorded per Kafka partition) takes the newest complete log checkpoint's ``txn`` column
        and the commits after it. Classic checkpoints, single or multi-part (what delta-rs writes).
        """
        infos = self.fs.get_file_info(pafs.FileSelector(LOG_DIR, allow_not_found=True))
        commits: set[int] = set()
        parts: dict[tuple[int, int], list[str]] = {}
        for info in infos:
            name = info.base_name
            stem, _, rest = name.partition(".")
            if len(stem) != 20 or not stem.isdigit():
                continue
            if rest == "json":
                commits.add(int(stem))
            elif rest == "checkpoint.parquet":
                parts.setdefault((int(stem), 1), []).append(info.path)
            elif rest.startswith("checkpoint.") and rest.endswith(".parquet"):
                numbers = rest[len("checkpoint.") : -len(".parquet")].split(".")
                if len(numbers) == 2 and all(n.isdigit() for n in numbers):
                    parts.setdefault((int(stem), int(numbers[1])), []).append(info.path)
        complete = [v for (v, n), paths in parts.items() if len(paths) == n]
        target = version if version is not None else max([*commits, *complete], default=-1)
        bases = [v for v in complete if v <= target]
        out: dict[str, int] = {}
        start = 0
        if bases:
            start = max(bases)
            n = next(n for (v, n) in parts if v == start and len(parts[(v, n)]) == n)
            for path in sorted(parts[(start, n)]):
                txn = read_parquet(path, self.fs, columns=["txn"]).column("txn")
                for entry in txn.drop_null().to_pylist():
                    out[str(entry["appId"])] = int(entry["version"])
            start += 1
        for v in range(start, target + 1):
            commit = self.read_commit(v)
            if commit is None:
                raise DeltaLogError(
                    f"{self.table_uri}: commit {v} is missing from _delta_log and no log checkpoint "
                    "covers it; the table's log is incomplete"
                )
            out.update(commit.txn)
        return out

    def has_commit(self, version: int) -> bool:
        """True when the commit file of ``version`` is in ``_delta_log``."""
        return bool(self.fs.get_file_info(commit_file(version)).type != pafs.FileType.NotFound)

    def read_commit(self, version: int) -> Commit | None:
        """The parsed commit, or None when its file does not exist (never written, or cleaned up).

        A file that is not a commit raises :class:`DeltaLogError` naming it.
        """
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
        try:
            commit = parse_commit(version, text, fallback_timestamp_ms=mtime, details=self._details)
        except (ValueError, KeyError, TypeError) as exc:
            where = f"{self.table_uri.rstrip('/')}/{path}"
            raise DeltaLogError(f"{where}: not a Delta commit file ({exc})") from exc
        self._cache[version] = commit
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return commit

    def first_txn_commit(
        self, reached: Callable[[Mapping[str, int]], bool], *, after_ms: int, at_most: int
    ) -> int | None:
        """The first version (at most ``at_most``) committed at or after ``after_ms`` whose ``txn`` actions
        satisfy ``reached``: a binary search on commit times, then a walk forward of at most
        ``_TXN_SEARCH_COMMITS`` commits. None when no such commit is in the log (or it was cleaned up).

        What a writer's commits record grows with each commit (a checkpoint id, a Kafka offset), so the
        first commit that reaches a value is the one that landed it.
        """
        versions = [v for v in self.commit_versions() if v <= at_most]
        lo, hi = 0, len(versions)
        while lo < hi:
            mid = (lo + hi) // 2
            commit = self.read_commit(versions[mid])
            if commit is not None and commit.timestamp_ms < after_ms:
                lo = mid + 1
            else:
                hi = mid
        for version in versions[lo : lo + _TXN_SEARCH_COMMITS]:
            commit = self.read_commit(version)
            if commit is not None and reached(commit.txn):
                return version
        return None

    def txn_before(self, version: int, app_ids: Collection[str]) -> dict[str, int]:
        """The version each of ``app_ids`` had in the snapshot before ``version`` (absent: none then).

        Walks back from ``version - 1`` (a writer's previous commit is usually a few commits back; parsed
        commits are cached), and replays the log (``app_versions``) only when the walk ends before it
        found them all.
        """
        wanted = set(app_ids)
        found: dict[str, int] = {}
        stop = max(-1, version - 1 - _TXN_SEARCH_COMMITS)
        for v in range(version - 1, stop, -1):
            commit = self.read_commit(v)
            if commit is None:
                break  # cleaned up: the log checkpoints know
            found.update({app: commit.txn[app] for app in wanted - found.keys() if app in commit.txn})
            if len(found) == len(wanted):
                return found
        else:
            if stop == -1:
                return found  # walked back to the first commit: the others had none
        return {app: v for app, v in self.app_versions(version - 1).items() if app in wanted}

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


def commit_ms(
    table_uri: str, version: int, *, storage_options: Mapping[str, str] | None = None
) -> int | None:
    """When ``version`` was committed (epoch ms, from its commit file); None when the file is gone."""
    commit = DeltaLog(table_uri, storage_options=storage_options, cache_size=0).read_commit(version)
    return commit.timestamp_ms if commit is not None else None


# -- the per-commit summary (the demo's live view and report) ------------------------------------------


@dataclass(frozen=True, slots=True)
class CommitSummary:
    """One Delta version as the demo shows it: what it added and removed, when, and which checkpoint
    it belongs to."""

    version: int
    timestamp_ms: int
    operation: str
    rows_added: int
    files_added: int
    files_removed: int
    #: Paths of the added files and their ``numRecords`` (None where a file has no statistics).
    added: dict[str, int | None] = field(default_factory=dict)
    removed: tuple[str, ...] = ()
    #: The sinks' ``txn`` actions: app id -> version (the checkpoint id, ``END_OF_INPUT`` at the end);
    #: not the progress values recorded as txn actions too.
    txn: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    #: ``operationMetrics`` of the commit (MERGE: rows inserted/updated, execution time).
    metrics: dict[str, Any] = field(default_factory=dict)
    #: Earliest and latest ``ingest_time`` of the added rows (epoch ms), from the files' min/max stats.
    ingest_min_ms: int | None = None
    ingest_max_ms: int | None = None

    @property
    def checkpoint(self) -> int | None:
        """The highest checkpoint id among the txn actions, None for a commit without one."""
        return max(self.txn.values()) if self.txn else None

    @property
    def is_checkpoint(self) -> bool:
        """True for a commit made by a sink at a Flink checkpoint or at end of input (has txn)."""
        return bool(self.txn)


def _epoch_ms(value: Any) -> int | None:
    """A statistic's timestamp (``2026-12-01T13:25:40.921Z``) as epoch milliseconds."""
    if not isinstance(value, str):
        return None
    try:
        return int(parse_iso(value).timestamp() * 1000)
    except ValueError:
        return None


def summarize(commit: Commit) -> CommitSummary:
    """The summary of a commit read with ``details`` (its statistics and ``commitInfo``)."""
    added: dict[str, int | None] = {}
    lows: list[int] = []
    highs: list[int] = []
    for add in commit.adds:
        stats = json.loads(add.stats) if add.stats else {}
        records = stats.get("numRecords")
        added[add.path] = int(records) if records is not None else None
        low = _epoch_ms((stats.get("minValues") or {}).get("ingest_time"))
        high = _epoch_ms((stats.get("maxValues") or {}).get("ingest_time"))
        if low is not None:
            lows.append(low)
        if high is not None:
            highs.append(high)
    removed = tuple(r.path for r in commit.removes)
    return CommitSummary(
        version=commit.version,
        timestamp_ms=commit.timestamp_ms,
        operation=commit.operation or "",
        rows_added=sum(n for n in added.values() if n is not None),
        files_added=len(added),
        files_removed=len(removed),
        added=added,
        removed=removed,
        # Progress values share the txn action (``lakestream.progress``) but are offsets and times.
        txn={app: v for app, v in commit.txn.items() if f":{PROGRESS_SEGMENT}:" not in app},
        counters={str(k): int(v) for k, v in (commit.info.get(COUNTERS_KEY) or {}).items()},
        metrics=dict(commit.info.get("operationMetrics") or {}),
        ingest_min_ms=min(lows) if lows else None,
        ingest_max_ms=max(highs) if highs else None,
    )


@dataclass
class TableLog:
    """A table's commits so far, read incrementally; its live files give the current row count.

    Reads from version 0, so it needs the table's JSON commits since its creation (Delta keeps them for
    ``delta.logRetentionDuration``, 30 days by default: always true for the demo's fresh tables).
    Commit files are immutable, so reading only the versions new since the last poll is cheap and
    never sees a half-applied commit.
    """

    #: A local folder or an object-store URI (``s3://bucket/table``; settings from the environment).
    path: str | Path
    commits: list[CommitSummary] = field(default_factory=list)
    _live: dict[str, int | None] = field(default_factory=dict)
    _log: DeltaLog = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._log = DeltaLog(str(self.path), cache_size=0, details=True)

    @property
    def exists(self) -> bool:
        """True once the table's first commit is there."""
        return self._log.has_commit(0)

    @property
    def version(self) -> int | None:
        """The newest version read, None before the table exists."""
        return self.commits[-1].version if self.commits else None

    @property
    def rows(self) -> int | None:
        """Rows in the table's current files; None when a live file has no ``numRecords``."""
        counts = self._live.values()
        return None if any(n is None for n in counts) else sum(n for n in counts if n is not None)

    @property
    def live_files(self) -> int:
        """Data files in the table at its newest version read."""
        return len(self._live)

    def poll(self) -> list[CommitSummary]:
        """Read every commit that appeared since the last poll and return them (oldest first)."""
        new: list[CommitSummary] = []
        version = 0 if self.version is None else self.version + 1
        while (commit := self._log.read_commit(version)) is not None:
            summary = summarize(commit)
            for removed in summary.removed:
                self._live.pop(removed, None)
            self._live.update(summary.added)
            self.commits.append(summary)
            new.append(summary)
            version += 1
        return new


class Snapshot(Protocol):
    """What :class:`AppVersions` needs of a ``deltalake.DeltaTable``."""

    def version(self) -> int:
        """The snapshot's table version."""
        ...

    def transaction_version(self, app_id: str) -> int | None:
        """The newest txn version of ``app_id`` in the snapshot."""
        ...


class AppVersions:
    """The newest ``txn`` version of each app id a sink asks for, kept current commit by commit.

    deltalake's ``transaction_version`` replays the log from the last Delta checkpoint at every call
    (one GET per commit on an object store), and a sink asks for each of its app ids at every Flink
    checkpoint. Here an app id is looked up once; later snapshots only read the commits added since.
    A commit that cannot be read any more (log cleanup) or a snapshot older than the last one starts
    over from deltalake.
    """

    def __init__(self, log: DeltaLog) -> None:
        self._log = log
        self._version: int | None = None
        self._known: dict[str, int | None] = {}

    def of(self, snapshot: Snapshot, app_id: str) -> int | None:
        """``app_id``'s txn version in ``snapshot`` (None: the table has no txn action of it)."""
        version = snapshot.version()
        if self._version is None or version < self._version:
            self._known.clear()
        else:
            for v in range(self._version + 1, version + 1) if self._known else ():
                commit = self._log.read_commit(v)
                if commit is None:
                    self._known.clear()
                    break
                for app, txn in commit.txn.items():
                    if app in self._known:
                        self._known[app] = txn
        self._version = version
        if app_id not in self._known:
            self._known[app_id] = snapshot.transaction_version(app_id)
        return self._known[app_id]


class Counted(Protocol):
    """What carries ``lakestream.counters``: a commit (``CommitSummary``), a staged manifest."""

    @property
    def counters(self) -> Mapping[str, int]:
        """Count per counter name."""
        ...


def counter_totals(items: Iterable[Counted]) -> dict[str, int]:
    """The counters of ``items`` added up per name, sorted by name (empty when none has any).

    Over a table's commits each count is there exactly once; over the manifests one commit takes, the
    totals are what that commit records.
    """
    total: dict[str, int] = {}
    for c in items:
        for name, value in c.counters.items():
            total[name] = total.get(name, 0) + value
    return dict(sorted(total.items()))


def checkpoints_committed(commits: Iterable[CommitSummary]) -> set[int]:
    """The Flink checkpoint ids (``END_OF_INPUT`` included) that ``commits`` carry txn actions for."""
    return {v for c in commits for v in c.txn.values()}
