"""Plan the next batch of a Delta stream: from an offset to the files (or CDF versions) of one poll.

Pure with respect to Flink, so what a stream emits is decided and tested without a cluster: given the
table's log, an offset and the options, :meth:`BatchPlanner.plan` returns what to read and the offset
after it. The semantics are Spark's Delta source's (table changes vs CDF, admission control, initial
snapshot order, data loss), stated in DESIGN.md section 6.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from sources.errors import (
    ChangeDataFeedNotEnabledError,
    DataChangeError,
    DataLossError,
    DeltaSourceError,
    SourceOptionsError,
    StartingPointError,
    UnsupportedTableError,
)
from sources.offsets import SourceOffset
from sources.options import DeltaSourceOptions
from sources.schema_compat import check_version_schema
from storage.delta_log import Commit, DeltaLog, FileAction, SnapshotFile, TableMetadata


@dataclass(frozen=True, slots=True)
class PlannedFile:
    """A data file to emit, attributed to a commit version."""

    version: int
    index: int
    action: FileAction
    commit_timestamp_ms: int
    #: ``insert`` for snapshot files in CDF mode; None in table-changes mode.
    change_type: str | None = None


@dataclass(frozen=True, slots=True)
class PlannedCdfVersion:
    """One whole version of the change data feed."""

    version: int
    commit_timestamp_ms: int
    #: The files its changes come from (cdc files, else data adds and removes): sizes and existence.
    files: tuple[FileAction, ...]

    @property
    def num_bytes(self) -> int:
        """Total size of the version's change files."""
        return sum(f.size for f in self.files)


@dataclass(frozen=True, slots=True)
class Backlog:
    """What is still to emit after a plan, for the source metrics."""

    latest_version: int
    versions_behind: int
    files_outstanding: int
    bytes_outstanding: int
    #: False when the look-ahead was capped (counts are then lower bounds).
    exact: bool = True


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """The work of one poll and the offset once it is emitted."""

    start: SourceOffset
    end: SourceOffset
    files: tuple[PlannedFile, ...] = ()
    cdf_versions: tuple[PlannedCdfVersion, ...] = ()
    #: Event-time column to sort the batch's rows by (snapshot parts in event-time order).
    sort_by: str | None = None
    #: Versions whose commit file was gone (only with fail_on_data_loss=False).
    skipped_versions: tuple[int, ...] = ()
    #: Log paths of data files that were gone (only with fail_on_data_loss=False).
    skipped_files: tuple[str, ...] = ()
    latest_version: int = -1

    @property
    def num_files(self) -> int:
        """Data files (or CDF change files) this batch reads."""
        return len(self.files) + sum(len(v.files) for v in self.cdf_versions)

    @property
    def num_bytes(self) -> int:
        """Bytes of the files this batch reads."""
        return sum(f.action.size for f in self.files) + sum(v.num_bytes for v in self.cdf_versions)

    @property
    def has_data(self) -> bool:
        """True when the batch reads anything (an empty plan may still move the offset)."""
        return bool(self.files or self.cdf_versions)

    @property
    def versions(self) -> tuple[int, ...]:
        """Commit versions the batch's rows are attributed to, ascending."""
        return tuple(sorted({f.version for f in self.files} | {v.version for v in self.cdf_versions}))


@dataclass
class _Admission:
    """Spark's AdmissionLimits: files are a hard cap, bytes a soft one, and the first unit always fits."""

    files_left: int | None
    bytes_left: int | None
    admitted_any: bool = False

    def has_capacity(self) -> bool:
        return (self.files_left is None or self.files_left > 0) and (
            self.bytes_left is None or self.bytes_left > 0
        )

    def fits(self, files: int, nbytes: int) -> bool:
        """Whole-unit admission (CDF versions, event-time groups)."""
        if not self.admitted_any:
            return True
        return (self.files_left is None or self.files_left - files >= 0) and (
            self.bytes_left is None or self.bytes_left - nbytes >= 0
        )

    def take(self, files: int, nbytes: int) -> None:
        self.admitted_any = True
        if self.files_left is not None:
            self.files_left -= files
        if self.bytes_left is not None:
            self.bytes_left -= nbytes


def _ts_ms(ts: datetime) -> int:
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=timezone.utc)
    return int(ts.timestamp() * 1000)


@dataclass
class _SnapshotCache:
    version: int
    files: list[SnapshotFile]
    #: Indivisible groups as (start, end) index ranges (one per file without event-time order).
    groups: list[tuple[int, int]] = field(default_factory=list)
    commit_timestamp_ms: int = 0


class BatchPlanner:
    """Plans polls for one table; keeps parsed commits, the snapshot listing and metadata between polls."""

    def __init__(self, log: DeltaLog, options: DeltaSourceOptions, read_schema: pa.Schema) -> None:
        self.log = log
        self.options = options
        self.read_schema = read_schema
        if options.event_time_order is not None and options.event_time_order not in read_schema.names:
            raise SourceOptionsError(
                f"event_time_order: column {options.event_time_order!r} is not in the table "
                f"(columns: {', '.join(read_schema.names)})"
            )
        #: (version v, metadata in effect before v) for the offset the next plan starts from.
        self._meta: tuple[int, TableMetadata] | None = None
        self._snapshot: _SnapshotCache | None = None

    # -- starting point ------------------------------------------------------------------------------
    def latest_version(self) -> int:
        """Newest committed version."""
        versions = self.log.commit_versions()
        if not versions:
            raise DeltaSourceError(f"{self.log.table_uri} is not a Delta table (no commits in _delta_log)")
        return versions[-1]

    def initial_offset(self) -> SourceOffset:
        """Resolve the options' starting point against the table as it is now (done once per stream)."""
        versions = self.log.commit_versions()
        if not versions:
            raise DeltaSourceError(f"{self.log.table_uri} is not a Delta table (no commits in _delta_log)")
        latest = versions[-1]
        table_id = self.log.metadata_at(latest).table_id
        opts = self.options
        order = opts.event_time_order or ""
        if opts.has_snapshot:
            return SourceOffset(latest, 0, in_snapshot=True, table_id=table_id, snapshot_order=order)
        if opts.starting_version == "latest":
            return SourceOffset(latest + 1, table_id=table_id)
        if isinstance(opts.starting_version, int):
            if opts.starting_version > latest:
                raise StartingPointError(
                    f"starting_version {opts.starting_version} is beyond the latest version {latest} of "
                    f"{self.log.table_uri}; use starting_version='latest' to read only future commits"
                )
            return SourceOffset(opts.starting_version, table_id=table_id)
        assert opts.starting_timestamp is not None
        return SourceOffset(self._version_at(opts.starting_timestamp, versions), table_id=table_id)

    def _version_at(self, ts: datetime, versions: Sequence[int]) -> int:
        """First version committed at or after ``ts`` (Spark semantics; binary search on commit times)."""
        target = _ts_ms(ts)
        lo, hi = 0, len(versions)
        while lo < hi:
            mid = (lo + hi) // 2
            commit = self.log.read_commit(versions[mid])
            if commit is not None and commit.timestamp_ms >= target:
                hi = mid
            else:
                lo = mid + 1
        if lo == len(versions):
            last = self.log.read_commit(versions[-1])
            last_ts = datetime.fromtimestamp((last.timestamp_ms if last else 0) / 1000, tz=timezone.utc)
            raise StartingPointError(
                f"starting_timestamp {ts.isoformat()} is after the latest commit of {self.log.table_uri} "
                f"(version {versions[-1]} at {last_ts.isoformat()}); use starting_version='latest' to read "
                "only future commits"
            )
        return versions[lo]

    # -- metadata tracking ---------------------------------------------------------------------------
    def _metadata_before(self, offset: SourceOffset) -> TableMetadata:
        """Metadata in effect before ``offset.version`` (at the snapshot version for a snapshot offset)."""
        key = offset.version
        if self._meta is not None and self._meta[0] == key:
            return self._meta[1]
        from deltalake.exceptions import DeltaError

        candidates = [key] if offset.in_snapshot else [key - 1, key]
        meta: TableMetadata | None = None
        for v in candidates:
            if v < 0:
                continue
            try:
                meta = self.log.metadata_at(v)
                break
            except DeltaError:
                continue
        if meta is None:
            # Version 0 carries its own metaData; anything else unreadable is a log gap, found later.
            if key == 0 and not offset.in_snapshot:
                meta = TableMetadata("", "", (), {})
            else:
                meta = self.log.metadata_at(self.latest_version())
        else:
            self._check_metadata(meta, version=max(key - (0 if offset.in_snapshot else 1), 0))
        offset.check_table(meta.table_id, self.log.table_uri)
        self._meta = (key, meta)
        return meta

    def _check_metadata(self, meta: TableMetadata, *, version: int) -> None:
        if meta.column_mapping_mode not in ("", "none"):
            raise UnsupportedTableError(
                f"{self.log.table_uri} uses column mapping "
                f"(delta.columnMapping.mode={meta.column_mapping_mode!r}); the Delta source reads data files "
                "by physical column name and does not support it yet"
            )
        if meta.schema_string:
            check_version_schema(
                self.read_schema, meta.arrow_schema(), version=version, mode=self.options.schema_changes
            )

    # -- planning ------------------------------------------------------------------------------------
    def plan(self, offset: SourceOffset) -> BatchPlan:
        """The next batch from ``offset`` (possibly empty: nothing new, or only offset movement)."""
        if offset.in_snapshot:
            return self._plan_snapshot(offset)
        return self._plan_versions(offset)

    def _limits(self) -> _Admission:
        return _Admission(self.options.effective_max_files, self.options.max_bytes_per_trigger)

    def _snapshot_for(self, offset: SourceOffset) -> _SnapshotCache:
        if self._snapshot is not None and self._snapshot.version == offset.version:
            return self._snapshot
        order = self.options.event_time_order
        if offset.index > 0 and offset.snapshot_order != (order or ""):
            raise SourceOptionsError(
                f"event_time_order changed from {offset.snapshot_order or None!r} to {order!r} while the "
                f"initial snapshot (version {offset.version}) was partly emitted: file positions would no "
                "longer match; restore the previous setting until the snapshot is done"
            )
        files = self.log.snapshot_files(offset.version, event_time_column=order)
        groups: list[tuple[int, int]]
        if order is None:
            groups = [(i, i + 1) for i in range(len(files))]
        elif any(f.event_min is None or f.event_max is None for f in files):
            # Without statistics a file may overlap any other: the snapshot is one indivisible group.
            groups = [(0, len(files))] if files else []
        else:
            files.sort(key=lambda f: (f.event_min, f.event_max, f.action.path))
            groups = []
            start = 0
            group_max: Any = None
            for i, f in enumerate(files):
                if i > start and f.event_min >= group_max:
                    groups.append((start, i))
                    start = i
                    group_max = f.event_max
                else:
                    group_max = f.event_max if group_max is None else max(group_max, f.event_max)
            if files:
                groups.append((start, len(files)))
        commit = self.log.read_commit(offset.version)
        ts = (
            commit.timestamp_ms
            if commit is not None
            else max((f.action.modification_time for f in files), default=0)
        )
        self._snapshot = _SnapshotCache(offset.version, files, groups, ts)
        return self._snapshot

    def _plan_snapshot(self, offset: SourceOffset) -> BatchPlan:
        meta = self._metadata_before(offset)
        snap = self._snapshot_for(offset)
        limits = self._limits()
        change_type = "insert" if self.options.mode == "cdf" else None
        chosen: list[PlannedFile] = []
        end_index = offset.index
        for start, stop in snap.groups:
            if stop <= offset.index:
                continue
            start = max(start, offset.index)
            size = sum(snap.files[i].action.size for i in range(start, stop))
            if not limits.has_capacity():
                break
            # A single file obeys the soft byte limit like a log file; a group must fit as a whole.
            if stop - start > 1 and not limits.fits(stop - start, size):
                break
            limits.take(stop - start, size)
            chosen.extend(
                PlannedFile(offset.version, i, snap.files[i].action, snap.commit_timestamp_ms, change_type)
                for i in range(start, stop)
            )
            end_index = stop
        if end_index >= len(snap.files):
            end = offset.advance_to(offset.version + 1)
            self._meta = (offset.version + 1, meta)
            self._snapshot = None
        else:
            end = offset.advance_to(offset.version, end_index, in_snapshot=True)
        kept, skipped = self._drop_missing(chosen, version=offset.version, meta=meta)
        latest = self.latest_version()
        return BatchPlan(
            start=offset,
            end=end,
            files=tuple(kept),
            sort_by=self.options.event_time_order,
            skipped_files=tuple(skipped),
            latest_version=latest,
        )

    def _drop_missing(
        self, files: list[PlannedFile], *, version: int, meta: TableMetadata
    ) -> tuple[list[PlannedFile], list[str]]:
        missing = set(self.log.missing_files([f.action for f in files]))
        if not missing:
            return files, []
        if self.options.fail_on_data_loss:
            first = min(f.version for f in files if f.action.path in missing)
            raise DataLossError(
                version=first,
                configuration=meta.configuration,
                missing_files=sorted(p for p in missing),
            )
        return [f for f in files if f.action.path not in missing], sorted(missing)

    def _emitted_files(self, commit: Commit) -> tuple[FileAction, ...]:
        """Files of ``commit`` that table-changes mode emits; raises on disallowed data changes."""
        removes = commit.data_removes
        adds = commit.data_adds
        opts = self.options
        if removes:
            if opts.skip_change_commits:
                return ()
            if adds and not opts.ignore_changes:
                raise DataChangeError(
                    version=commit.version,
                    operation=commit.operation,
                    removed_path=removes[0].path,
                    rewrote=True,
                )
            if not adds and not (opts.ignore_changes or opts.ignore_deletes):
                raise DataChangeError(
                    version=commit.version,
                    operation=commit.operation,
                    removed_path=removes[0].path,
                    rewrote=False,
                )
        return adds

    @staticmethod
    def _cdf_files(commit: Commit) -> tuple[FileAction, ...]:
        """Where a version's change rows come from: its cdc files, else its data-changing adds/removes."""
        if commit.cdcs:
            return commit.cdcs
        return commit.data_adds + commit.data_removes

    def _plan_cdf_version(
        self,
        commit: Commit,
        meta: TableMetadata,
        limits: _Admission,
        out: list[PlannedCdfVersion],
        skipped_versions: list[int],
        skipped_files: list[str],
    ) -> bool:
        """Admit one whole CDF version; False when it does not fit into this poll."""
        change_files = self._cdf_files(commit)
        if not change_files:
            return True  # OPTIMIZE, metadata-only, empty: nothing to emit
        if not meta.cdf_enabled:
            raise ChangeDataFeedNotEnabledError(version=commit.version)
        size = sum(f.size for f in change_files)
        if not limits.fits(len(change_files), size):
            return False
        missing = self.log.missing_files(change_files)
        if missing:
            if self.options.fail_on_data_loss:
                raise DataLossError(
                    version=commit.version, configuration=meta.configuration, missing_files=missing
                )
            skipped_versions.append(commit.version)
            skipped_files.extend(missing)
        else:
            out.append(PlannedCdfVersion(commit.version, commit.timestamp_ms, change_files))
        limits.take(len(change_files), size)
        return True

    def _plan_table_changes_version(
        self,
        commit: Commit,
        index: int,
        meta: TableMetadata,
        limits: _Admission,
        out: list[PlannedFile],
        skipped_files: list[str],
    ) -> int:
        """Admit files of one version from ``index``; the index to resume at when full, else -1."""
        emitted = self._emitted_files(commit)
        resume = -1
        chosen: list[PlannedFile] = []
        for i in range(index, len(emitted)):
            if not limits.has_capacity():
                resume = i
                break
            action = emitted[i]
            if action.has_deletion_vector:
                raise UnsupportedTableError(
                    f"version {commit.version} adds file {action.path!r} with a deletion vector; the Delta "
                    "source cannot apply deletion vectors yet (disable delta.enableDeletionVectors on the "
                    "table)"
                )
            limits.take(1, action.size)
            chosen.append(PlannedFile(commit.version, i, action, commit.timestamp_ms))
        kept, missing = self._drop_missing(chosen, version=commit.version, meta=meta)
        out.extend(kept)
        skipped_files.extend(missing)
        return resume

    def _plan_versions(self, offset: SourceOffset) -> BatchPlan:
        meta = self._metadata_before(offset)
        versions = self.log.commit_versions()
        latest = versions[-1] if versions else -1
        limits = self._limits()
        cdf_mode = self.options.mode == "cdf"
        files: list[PlannedFile] = []
        cdf_versions: list[PlannedCdfVersion] = []
        skipped_versions: list[int] = []
        skipped_files: list[str] = []
        v, index = offset.version, offset.index
        scanned = 0
        while v <= latest and scanned < self.options.max_versions_per_poll and limits.has_capacity():
            meta_before, files_before, cdf_before = meta, len(files), len(cdf_versions)
            skipped_before = (len(skipped_versions), len(skipped_files))
            try:
                commit = self.log.read_commit(v)
                if commit is None:
                    later = [x for x in versions if x > v]
                    if self.options.fail_on_data_loss or not later:
                        raise DataLossError(
                            version=v,
                            configuration=meta.configuration,
                            oldest_available=later[0] if later else None,
                        )
                    skipped_versions.extend(range(v, later[0]))
                    v, index = later[0], 0
                    meta = self._metadata_before(SourceOffset(v, table_id=offset.table_id))
                    continue
                scanned += 1
                if commit.metadata is not None:
                    self._check_metadata(commit.metadata, version=v)
                    meta = commit.metadata
                if cdf_mode:
                    if not self._plan_cdf_version(
                        commit, meta, limits, cdf_versions, skipped_versions, skipped_files
                    ):
                        break  # the next version does not fit: it starts the next poll
                else:
                    index = self._plan_table_changes_version(
                        commit, index, meta, limits, files, skipped_files
                    )
                    if index >= 0:
                        break  # the poll is full in the middle of version v
            except DeltaSourceError:
                if v == offset.version and files_before == 0 and cdf_before == 0 and not skipped_versions:
                    raise
                # Emit what precedes the failing version first; the next poll starts there and fails.
                meta = meta_before
                del files[files_before:]
                del cdf_versions[cdf_before:]
                del skipped_versions[skipped_before[0] :]
                del skipped_files[skipped_before[1] :]
                index = offset.index if v == offset.version else 0
                break
            v, index = v + 1, 0
        end = offset.advance_to(v, index)
        self._meta = (v, meta)
        return BatchPlan(
            start=offset,
            end=end,
            files=tuple(files),
            cdf_versions=tuple(cdf_versions),
            skipped_versions=tuple(skipped_versions),
            skipped_files=tuple(skipped_files),
            latest_version=latest,
        )

    # -- metrics -------------------------------------------------------------------------------------
    def backlog(self, offset: SourceOffset, *, latest_version: int | None = None) -> Backlog:
        """Versions, files and bytes still to emit after ``offset`` (look-ahead capped per poll)."""
        latest = self.latest_version() if latest_version is None else latest_version
        files = nbytes = 0
        v = offset.version
        if offset.in_snapshot:
            snap = self._snapshot_for(offset)
            rest = snap.files[offset.index :]
            files += len(rest)
            nbytes += sum(f.action.size for f in rest)
            v += 1
        exact = True
        scanned = 0
        first = True
        while v <= latest:
            if scanned >= self.options.max_versions_per_poll:
                exact = False
                break
            commit = self.log.read_commit(v)
            scanned += 1
            if commit is not None:
                if self.options.mode == "cdf":
                    pending: Sequence[FileAction] = self._cdf_files(commit)
                else:
                    pending = commit.data_adds
                if first and not offset.in_snapshot:
                    pending = pending[offset.index :]
                files += len(pending)
                nbytes += sum(f.size for f in pending)
            first = False
            v += 1
        return Backlog(
            latest_version=latest,
            versions_behind=max(0, latest - offset.version + 1),
            files_outstanding=files,
            bytes_outstanding=nbytes,
            exact=exact,
        )
