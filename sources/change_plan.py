"""The changes after the snapshot: commit versions read in order, up to one poll's limits.

Table-changes mode emits the files each commit added, file by file (a commit that removed rows fails
the stream unless ``ignore_changes``/``ignore_deletes``/``skip_change_commits`` say how to treat it);
CDF mode emits whole versions of the change data feed. A version that fails is left for the next poll,
so what precedes it is emitted first (DESIGN.md section 6).
"""

from __future__ import annotations

from sources.admission import Admission
from sources.batch_plan import BatchPlan, PlannedCdfVersion, PlannedFile
from sources.data_loss import drop_missing_files
from sources.metadata_tracker import MetadataTracker
from sources.offsets import SourceOffset
from sources.options import DeltaSourceOptions
from sources.source_errors import (
    ChangeDataFeedNotEnabledError,
    DataChangeError,
    DataLossError,
)
from storage.delta_log import Commit, DeltaLog, FileAction, TableMetadata
from storage.read_errors import DeltaReadError, UnsupportedTableError


def emitted_files(commit: Commit, options: DeltaSourceOptions) -> tuple[FileAction, ...]:
    """Files of ``commit`` that table-changes mode emits; raises on disallowed data changes."""
    removes = commit.data_removes
    adds = commit.data_adds
    if removes:
        if options.skip_change_commits:
            return ()
        if adds and not options.ignore_changes:
            raise DataChangeError(
                version=commit.version,
                operation=commit.operation,
                removed_path=removes[0].path,
                rewrote=True,
            )
        if not adds and not (options.ignore_changes or options.ignore_deletes):
            raise DataChangeError(
                version=commit.version,
                operation=commit.operation,
                removed_path=removes[0].path,
                rewrote=False,
            )
    return adds


def cdf_files(commit: Commit) -> tuple[FileAction, ...]:
    """Where a version's change rows come from: its cdc files, else its data-changing adds/removes."""
    if commit.cdcs:
        return commit.cdcs
    return commit.data_adds + commit.data_removes


class _Collected:
    """What a plan of versions has gathered so far; cut back to a mark when a version fails."""

    def __init__(self) -> None:
        self.files: list[PlannedFile] = []
        self.cdf_versions: list[PlannedCdfVersion] = []
        self.skipped_versions: list[int] = []
        self.skipped_files: list[str] = []

    def mark(self) -> tuple[int, int, int, int]:
        return len(self.files), len(self.cdf_versions), len(self.skipped_versions), len(self.skipped_files)

    def cut(self, mark: tuple[int, int, int, int]) -> None:
        del self.files[mark[0] :]
        del self.cdf_versions[mark[1] :]
        del self.skipped_versions[mark[2] :]
        del self.skipped_files[mark[3] :]


def _admit_cdf_version(
    log: DeltaLog,
    options: DeltaSourceOptions,
    commit: Commit,
    meta: TableMetadata,
    limits: Admission,
    out: _Collected,
) -> bool:
    """Admit one whole CDF version; False when it does not fit into this poll."""
    change_files = cdf_files(commit)
    if not change_files:
        return True  # OPTIMIZE, metadata-only, empty: nothing to emit
    if not meta.cdf_enabled:
        raise ChangeDataFeedNotEnabledError(version=commit.version)
    size = sum(f.size for f in change_files)
    if not limits.fits(len(change_files), size):
        return False
    missing = log.missing_files(change_files)
    if missing:
        if options.fail_on_data_loss:
            raise DataLossError(
                version=commit.version, configuration=meta.configuration, missing_files=missing
            )
        out.skipped_versions.append(commit.version)
        out.skipped_files.extend(missing)
    else:
        out.cdf_versions.append(PlannedCdfVersion(commit.version, commit.timestamp_ms, change_files))
    limits.take(len(change_files), size)
    return True


def _admit_table_changes(
    log: DeltaLog,
    options: DeltaSourceOptions,
    commit: Commit,
    index: int,
    meta: TableMetadata,
    limits: Admission,
    out: _Collected,
) -> int:
    """Admit files of one version from ``index``; the index to resume at when full, else -1."""
    emitted = emitted_files(commit, options)
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
    kept, missing = drop_missing_files(log, chosen, fail_on_data_loss=options.fail_on_data_loss, meta=meta)
    out.files.extend(kept)
    out.skipped_files.extend(missing)
    return resume


def plan_changes(
    log: DeltaLog, options: DeltaSourceOptions, offset: SourceOffset, metadata: MetadataTracker
) -> BatchPlan:
    """The versions from ``offset`` that fit into one poll; ``metadata`` follows them to the plan's end."""
    meta = metadata.before(offset)
    versions = log.commit_versions()
    latest = versions[-1] if versions else -1
    limits = Admission.for_poll(options)
    cdf_mode = options.mode == "cdf"
    out = _Collected()
    v, index = offset.version, offset.index
    scanned = 0
    while v <= latest and scanned < options.max_versions_per_poll and limits.has_capacity():
        meta_before, mark = meta, out.mark()
        try:
            commit = log.read_commit(v)
            if commit is None:
                later = [x for x in versions if x > v]
                if options.fail_on_data_loss or not later:
                    raise DataLossError(
                        version=v,
                        configuration=meta.configuration,
                        oldest_available=later[0] if later else None,
                    )
                out.skipped_versions.extend(range(v, later[0]))
                v, index = later[0], 0
                meta = metadata.before(SourceOffset(v, table_id=offset.table_id))
                continue
            scanned += 1
            if commit.metadata is not None:
                metadata.check(commit.metadata, version=v)
                meta = commit.metadata
            if cdf_mode:
                if not _admit_cdf_version(log, options, commit, meta, limits, out):
                    break  # the next version does not fit: it starts the next poll
            else:
                index = _admit_table_changes(log, options, commit, index, meta, limits, out)
                if index >= 0:
                    break  # the poll is full in the middle of version v
        except DeltaReadError:
            if v == offset.version and mark[0] == 0 and mark[1] == 0 and not out.skipped_versions:
                raise
            # Emit what precedes the failing version first; the next poll starts there and fails.
            meta = meta_before
            out.cut(mark)
            index = offset.index if v == offset.version else 0
            break
        v, index = v + 1, 0
    metadata.remember(v, meta)
    return BatchPlan(
        start=offset,
        end=offset.advance_to(v, index),
        files=tuple(out.files),
        cdf_versions=tuple(out.cdf_versions),
        skipped_versions=tuple(out.skipped_versions),
        skipped_files=tuple(out.skipped_files),
        latest_version=latest,
    )
