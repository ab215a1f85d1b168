"""What one poll of a Delta stream reads: the plan's files or CDF versions, its offsets, the backlog after it.

Plain values, produced by ``sources.planner`` and read by ``sources.reader``; the semantics are
DESIGN.md section 6.
"""

from __future__ import annotations

from dataclasses import dataclass

from sources.offsets import SourceOffset
from storage.delta_log import FileAction


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
