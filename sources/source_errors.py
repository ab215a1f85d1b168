"""Typed errors of the Delta streaming source; every message names the version, the option and the fix.

They surface from inside a Flink worker as the cause of a failed job, often hours after start, so the
message alone must be enough to act on (DESIGN.md section 6).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from storage.read_errors import DeltaReadError


class DeltaSourceError(DeltaReadError):
    """Base class: the stream cannot go on as configured."""


class SourceOptionsError(DeltaSourceError, ValueError):
    """An option is malformed or contradicts another one."""


class StartingPointError(DeltaSourceError):
    """``starting_version`` / ``starting_timestamp`` points past the end of the table."""


class OffsetMismatchError(DeltaSourceError):
    """A restored offset belongs to another table (the path now holds a different Delta table)."""


class DataChangeError(DeltaSourceError):
    """Table-changes mode met a commit that removed rows (UPDATE, DELETE, MERGE, overwrite).

    Spark's Delta source fails the same way: appending only the files such a commit added would
    silently diverge from the table, so the user has to choose how to treat it.
    """

    def __init__(self, *, version: int, operation: str | None, removed_path: str, rewrote: bool) -> None:
        self.version = version
        self.operation = operation
        self.removed_path = removed_path
        what = "updated or rewrote existing data" if rewrote else "deleted existing data"
        fixes = (
            "set ignore_changes=True to re-emit rewritten files (emits duplicates of unchanged rows), "
            "skip_change_commits=True to skip such commits entirely, or read the change data feed "
            "(mode='cdf') to get exact inserts, updates and deletes"
        )
        if not rewrote:
            fixes = "set ignore_deletes=True to skip commits that only delete whole files, or " + fixes
        super().__init__(
            f"Delta table version {version} ({operation or 'unknown operation'}) {what} "
            f"(removed file {removed_path!r} with dataChange=true); table-changes mode only follows "
            f"appends by default: {fixes}"
        )


def _retention_text(configuration: Mapping[str, str]) -> str:
    log = configuration.get("delta.logRetentionDuration", "interval 30 days (default)")
    files = configuration.get("delta.deletedFileRetentionDuration", "interval 1 week (default)")
    return f"delta.logRetentionDuration={log!r}, delta.deletedFileRetentionDuration={files!r}"


class DataLossError(DeltaSourceError):
    """What the stream has to read next is gone (log retention removed commits, VACUUM removed files)."""

    def __init__(
        self,
        *,
        version: int,
        configuration: Mapping[str, str],
        oldest_available: int | None = None,
        missing_files: Sequence[str] = (),
    ) -> None:
        self.version = version
        self.oldest_available = oldest_available
        self.missing_files = tuple(missing_files)
        if missing_files:
            shown = ", ".join(repr(p) for p in list(missing_files)[:3])
            more = f" and {len(missing_files) - 3} more" if len(missing_files) > 3 else ""
            what = (
                f"data file(s) of version {version} are gone ({shown}{more}), most likely removed by VACUUM"
            )
        else:
            oldest = "none" if oldest_available is None else str(oldest_available)
            what = (
                f"the commit file of version {version} is gone (oldest commit still in _delta_log: "
                f"{oldest}), most likely removed by log retention (metadata cleanup after a checkpoint)"
            )
        super().__init__(
            f"cannot continue the stream: {what}. "
            f"Table retention settings: {_retention_text(configuration)}. "
            f"The stream fell behind the retention period. Restart from a fresh snapshot (new checkpoint, "
            f"no starting_version), raise the retention settings, or set fail_on_data_loss=False to skip "
            f"what is gone (the skipped versions and files are counted in the source metrics)"
        )


class SchemaChangeError(DeltaSourceError):
    """A version's schema differs from the schema the stream reads with."""

    def __init__(self, *, version: int, detail: str, additive: bool, mode_allows_additive: bool) -> None:
        self.version = version
        self.additive = additive
        if additive and mode_allows_additive:
            fix = (
                "the new column(s) were added after this job started: restart the job (from its checkpoint) "
                "so it reads with the table's current schema"
            )
        elif additive:
            fix = (
                "set schema_changes='additive' to follow added nullable columns (older rows get nulls), "
                "and restart the job from its checkpoint"
            )
        else:
            fix = (
                "this change is not additive and cannot be followed by a running stream: restart from a "
                "fresh snapshot (new checkpoint) with the new schema"
            )
        super().__init__(f"schema change at Delta table version {version}: {detail}; {fix}")


class ChangeDataFeedNotEnabledError(DeltaSourceError):
    """CDF mode reached a data-changing version written while ``delta.enableChangeDataFeed`` was off."""

    def __init__(self, *, version: int) -> None:
        self.version = version
        super().__init__(
            f"change data feed mode cannot read version {version}: it changed data while the table property "
            f"delta.enableChangeDataFeed was not 'true'. Start the stream at a later version "
            f"(starting_version) after enabling the property, or use mode='table_changes'"
        )
