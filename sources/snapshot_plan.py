"""The initial snapshot of a stream: the table's files at one version, emitted over as many polls as it takes.

With ``event_time_order`` the files go out in event-time order, in groups that overlap in event time and
are admitted whole; without it, file by file in the log's order. The offset's index counts the files
emitted, so a restart continues at the same file (DESIGN.md section 6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sources.admission import Admission
from sources.batch_plan import BatchPlan, PlannedFile
from sources.data_loss import drop_missing_files
from sources.offsets import SourceOffset
from sources.options import DeltaSourceOptions
from sources.source_errors import SourceOptionsError
from sources.start_point import latest_version
from storage.delta_log import DeltaLog, SnapshotFile, TableMetadata


@dataclass
class SnapshotListing:
    """The snapshot's files in emission order and how they are admitted."""

    version: int
    files: list[SnapshotFile]
    #: Indivisible groups as (start, end) index ranges (one per file without event-time order).
    groups: list[tuple[int, int]] = field(default_factory=list)
    commit_timestamp_ms: int = 0


def event_time_groups(files: list[SnapshotFile], order: str | None) -> list[tuple[int, int]]:
    """Sort ``files`` into emission order (in place) and return their indivisible groups.

    Files whose event-time ranges overlap share a group: emitting one without the other could put an
    event before an earlier one. A file without statistics may overlap any other, so then the whole
    snapshot is one group.
    """
    if order is None:
        return [(i, i + 1) for i in range(len(files))]
    if any(f.event_min is None or f.event_max is None for f in files):
        return [(0, len(files))] if files else []
    files.sort(key=lambda f: (f.event_min, f.event_max, f.action.path))
    groups: list[tuple[int, int]] = []
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
    return groups


def list_snapshot(log: DeltaLog, offset: SourceOffset, order: str | None) -> SnapshotListing:
    """The snapshot ``offset`` is in, listed in emission order."""
    if offset.index > 0 and offset.snapshot_order != (order or ""):
        raise SourceOptionsError(
            f"event_time_order changed from {offset.snapshot_order or None!r} to {order!r} while the "
            f"initial snapshot (version {offset.version}) was partly emitted: file positions would no "
            "longer match; restore the previous setting until the snapshot is done"
        )
    files = log.snapshot_files(offset.version, event_time_column=order)
    groups = event_time_groups(files, order)
    commit = log.read_commit(offset.version)
    ts = (
        commit.timestamp_ms
        if commit is not None
        else max((f.action.modification_time for f in files), default=0)
    )
    return SnapshotListing(offset.version, files, groups, ts)


def plan_snapshot(
    log: DeltaLog,
    options: DeltaSourceOptions,
    offset: SourceOffset,
    snap: SnapshotListing,
    meta: TableMetadata,
) -> BatchPlan:
    """The next part of the snapshot from ``offset``; its end leaves the snapshot once every file is in."""
    limits = Admission.for_poll(options)
    change_type = "insert" if options.mode == "cdf" else None
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
    else:
        end = offset.advance_to(offset.version, end_index, in_snapshot=True)
    kept, skipped = drop_missing_files(log, chosen, fail_on_data_loss=options.fail_on_data_loss, meta=meta)
    return BatchPlan(
        start=offset,
        end=end,
        files=tuple(kept),
        sort_by=options.event_time_order,
        skipped_files=tuple(skipped),
        latest_version=latest_version(log),
    )
