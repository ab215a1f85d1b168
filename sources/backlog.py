"""What a stream has still to emit after an offset, for the source metrics (versions, files, bytes behind).

The look-ahead reads at most one poll's worth of commits (``max_versions_per_poll``), so a stream far
behind costs no more to measure than to plan; its counts are then lower bounds.
"""

from __future__ import annotations

from collections.abc import Sequence

from sources.batch_plan import Backlog
from sources.change_plan import cdf_files
from sources.offsets import SourceOffset
from sources.options import DeltaSourceOptions
from sources.snapshot_plan import SnapshotListing
from storage.delta_log import DeltaLog, FileAction


def backlog(
    log: DeltaLog,
    options: DeltaSourceOptions,
    offset: SourceOffset,
    *,
    latest: int,
    snapshot: SnapshotListing | None,
) -> Backlog:
    """Versions, files and bytes after ``offset`` up to version ``latest``; ``snapshot``: the listing of
    the snapshot ``offset`` is in (given exactly when it is in one)."""
    files = nbytes = 0
    v = offset.version
    if snapshot is not None:
        rest = snapshot.files[offset.index :]
        files += len(rest)
        nbytes += sum(f.action.size for f in rest)
        v += 1
    exact = True
    scanned = 0
    first = True
    while v <= latest:
        if scanned >= options.max_versions_per_poll:
            exact = False
            break
        commit = log.read_commit(v)
        scanned += 1
        if commit is not None:
            pending: Sequence[FileAction]
            pending = cdf_files(commit) if options.mode == "cdf" else commit.data_adds
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
