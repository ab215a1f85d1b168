"""Where a new stream starts: the options' starting point resolved against the table as it is now.

Done once per stream (a restored offset needs none): the initial snapshot at the latest version,
``starting_version`` (a number or ``latest``), or ``starting_timestamp`` as the first version committed
at or after it, Spark's semantics (DESIGN.md section 6).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

from lakestream.time import iso_utc, iso_utc_ms
from sources.offsets import SourceOffset
from sources.options import DeltaSourceOptions
from sources.source_errors import DeltaSourceError, StartingPointError
from storage.delta_log import DeltaLog


def committed_versions(log: DeltaLog) -> list[int]:
    """The table's commit versions, ascending; a log without any is not a Delta table."""
    versions = log.commit_versions()
    if not versions:
        raise DeltaSourceError(f"{log.table_uri} is not a Delta table (no commits in _delta_log)")
    return versions


def latest_version(log: DeltaLog) -> int:
    """Newest committed version."""
    return committed_versions(log)[-1]


def initial_offset(log: DeltaLog, options: DeltaSourceOptions) -> SourceOffset:
    """The offset a stream without a restored one starts at."""
    versions = committed_versions(log)
    latest = versions[-1]
    table_id = log.metadata_at(latest).table_id
    order = options.event_time_order or ""
    if options.has_snapshot:
        return SourceOffset(latest, 0, in_snapshot=True, table_id=table_id, snapshot_order=order)
    if options.starting_version == "latest":
        return SourceOffset(latest + 1, table_id=table_id)
    if isinstance(options.starting_version, int):
        if options.starting_version > latest:
            raise StartingPointError(
                f"starting_version {options.starting_version} is beyond the latest version {latest} of "
                f"{log.table_uri}; use starting_version='latest' to read only future commits"
            )
        return SourceOffset(options.starting_version, table_id=table_id)
    assert options.starting_timestamp is not None
    return SourceOffset(version_at(log, options.starting_timestamp, versions), table_id=table_id)


def version_at(log: DeltaLog, ts: datetime, versions: Sequence[int]) -> int:
    """First version committed at or after ``ts`` (Spark semantics; binary search on commit times)."""
    target = _ts_ms(ts)
    lo, hi = 0, len(versions)
    while lo < hi:
        mid = (lo + hi) // 2
        commit = log.read_commit(versions[mid])
        if commit is not None and commit.timestamp_ms >= target:
            hi = mid
        else:
            lo = mid + 1
    if lo == len(versions):
        last = log.read_commit(versions[-1])
        last_ts = iso_utc_ms(last.timestamp_ms if last else 0)
        raise StartingPointError(
            f"starting_timestamp {iso_utc(_aware(ts))} is after the latest commit of {log.table_uri} "
            f"(version {versions[-1]} at {last_ts}); use starting_version='latest' to read "
            "only future commits"
        )
    return versions[lo]


def _ts_ms(ts: datetime) -> int:
    """Milliseconds since the epoch; a naive time is UTC."""
    return int(_aware(ts).timestamp() * 1000)


def _aware(ts: datetime) -> datetime:
    """``ts``, read as UTC when it is naive."""
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts
