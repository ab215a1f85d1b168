"""Open a Delta table at an older version or as of a time: the one way lakestream reads the past.

``lakestream tables``, ``lakestream query`` and the page's ``as_of``, ``maintain restore`` and the batch
layer's ``--as-of`` all open old versions here, so all reach as far back and fail the same way. How far
back reaches is bounded by log cleanup (commit files older than ``delta.logRetentionDuration`` go) and,
for reading rows, by VACUUM (data files of old versions go). As of a time means the newest version whose
commit timestamp (its ``commitInfo``, what ``lakestream tables`` and the history show) is at or before
it; a time before the oldest retained commit is refused, not read as that commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from lakestream.errors import LakestreamError
from lakestream.time import iso_utc, iso_utc_ms
from storage.delta_log import DeltaLog


class OutOfReachError(LakestreamError, ValueError):
    """The table has no version there (never committed, removed by log cleanup, or a time before its
    oldest retained commit); the message names the argument, the table and what is in reach."""


def open_table_at(
    uri: str,
    at: int | datetime | None,
    *,
    name: str,
    storage_options: Mapping[str, str] | None = None,
) -> DeltaTable:
    """The table at its latest version (``at`` None), at version ``at``, or as of time ``at``: the newest
    version committed at or before it.

    ``name`` is the flag or parameter ``at`` came from (``--as-of``), for :class:`OutOfReachError`. A
    missing table raises deltalake's ``TableNotFoundError``, which each caller words its own way.
    """
    dt = DeltaTable(uri, storage_options=dict(storage_options) if storage_options else None)
    if at is None:
        return dt
    latest = dt.version()
    shown = str(at) if isinstance(at, int) else iso_utc(at)
    version = at if isinstance(at, int) else _version_as_of(uri, at, name, shown, storage_options)
    try:
        if not 0 <= version <= latest:
            raise ValueError(f"the latest version is {latest}")
        dt.load_as_version(version)
    except (DeltaError, ValueError, OSError) as exc:
        hint = (
            f"versions go from the oldest retained commit to {latest}"
            if isinstance(at, int)
            else "give a time after the oldest retained commit"
        )
        raise OutOfReachError(
            f"{name} {shown}: cannot load {uri} there ({_first_line(exc)}); {hint}. Commits older "
            "than delta.logRetentionDuration are removed by log cleanup."
        ) from None
    return dt


def _version_as_of(
    uri: str, at: datetime, name: str, shown: str, storage_options: Mapping[str, str] | None
) -> int:
    """The newest version committed at or before ``at``, reading commit files from the newest back."""
    log = DeltaLog(uri, storage_options=storage_options, cache_size=0)
    at_ms = at.timestamp() * 1000
    oldest: tuple[int, int] | None = None
    for version in reversed(log.commit_versions()):
        commit = log.read_commit(version)
        if commit is None:
            continue
        if commit.timestamp_ms <= at_ms:
            return version
        oldest = (version, commit.timestamp_ms)
    reach = ""
    if oldest is not None:
        reach = f" (its oldest retained version {oldest[0]} was committed at {iso_utc_ms(oldest[1])})"
    raise OutOfReachError(f"{name} {shown}: {uri} has no version committed at or before it{reach}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
