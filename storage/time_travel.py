"""Open a Delta table at an older version or as of a time: the one way lakestream reads the past.

``lakestream tables``, ``lakestream query`` and the page's ``as_of``, ``maintain restore`` and the batch
layer's ``--as-of`` all open old versions here, so all reach as far back and fail the same way. How far
back reaches is bounded by log cleanup (commit files older than ``delta.logRetentionDuration`` go) and,
for reading rows, by VACUUM (data files of old versions go). delta-rs loads the oldest retained version
for a time before it, a version that did not exist then: that is refused here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from lakestream.errors import LakestreamError
from lakestream.time import iso_utc, iso_utc_ms
from storage.delta_log import commit_ms


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
    try:
        if isinstance(at, int) and not 0 <= at <= latest:
            raise ValueError(f"the latest version is {latest}")
        dt.load_as_version(at)
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
    if isinstance(at, datetime):
        committed = commit_ms(uri, dt.version(), storage_options=storage_options)
        if committed is not None and committed > at.timestamp() * 1000:
            raise OutOfReachError(
                f"{name} {shown}: {uri} has no version committed at or before it (its oldest retained "
                f"version {dt.version()} was committed at {iso_utc_ms(committed)})"
            )
    return dt


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
