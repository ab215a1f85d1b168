"""Find and summarise the Delta tables under a lakehouse root (for the CLI, the demo and tests).

Also reads old versions (time travel, ``storage.time_travel``): one table at a version or at a time,
or every table as it was at a time; how far back that reaches is bounded by log cleanup (commit files)
and VACUUM (data files).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from lakestream.time import iso_utc, plain_utc
from maintenance.auto import find_tables
from maintenance.maintenance_errors import MaintenanceError
from storage.delta_log import commit_ms
from storage.sql_query import query
from storage.table_files import root_uri
from storage.time_travel import OutOfReachError, open_table_at

#: A version number or a time (UTC).
At = int | datetime


class TimeTravelError(MaintenanceError):
    """An old version cannot be read; the message says which and why."""


def open_at(path: str | Path, at: At | None) -> DeltaTable:
    """The table at version ``at`` (``--version``), as of time ``at`` (``--as-of``), or at its latest
    version (None)."""
    try:
        return open_table_at(str(path), at, name="--version" if isinstance(at, int) else "--as-of")
    except OutOfReachError as exc:
        raise TimeTravelError(str(exc)) from None


def table_summary(path: str | Path, at: At | None = None) -> tuple[int, int]:
    """(row count, version) of one table (at ``at``), counted from the log's file statistics when present.

    Only a table with a file lacking ``numRecords`` is counted by a scan.
    """
    dt = open_at(path, at)
    counts = pa.table(dt.get_add_actions(flatten=True))["num_records"]
    if counts.null_count == 0:
        return int(pc.sum(counts).as_py() or 0), dt.version()
    return int(_scan(dt, path, "SELECT COUNT(*) AS n FROM t")["n"][0].as_py()), dt.version()


def _scan(dt: DeltaTable, path: str | Path, sql: str) -> pa.Table:
    """``sql`` over the table as ``t``, in DataFusion (``storage.parquet_read`` says why not a dataset)."""
    try:
        return query(sql, t=dt)
    except (OSError, DeltaError, pa.ArrowException) as exc:
        raise TimeTravelError(
            f"{path} at version {dt.version()}: its data files cannot be read ({str(exc).splitlines()[0]}); "
            "VACUUM deletes the files of old versions once they are older than its retention"
        ) from None


def print_tables(root: str, *, as_of: datetime | None = None) -> None:
    """Print ``name  rows  version`` for each table, names relative to the root (as of ``as_of``)."""
    base = root_uri(root)
    names = find_tables(base)
    if not names:
        print(f"no Delta tables under {base}")
        return
    when = "" if as_of is None else iso_utc(as_of)
    print(f"Delta tables under {base}" + (f" as of {when}:" if when else ":"))
    for name in names:
        uri = base if name == "." else f"{base}/{name}"
        try:
            rows, version = table_summary(uri, as_of)
        except TimeTravelError:
            if as_of is None:
                raise
            print(f"  {name:<32} {'-':>10}        no version at or before {when}")
            continue
        line = f"  {name:<32} {rows:>10} rows   version {version}"
        changes = name + CHANGES_SUFFIX
        print(line + ("" if as_of else freshness_note(uri, changes if changes in names else None)))


#: A merge-on-read table ``X`` keeps its changes in ``X_changes`` (``tables.silver_layout``).
CHANGES_SUFFIX = "_changes"


def freshness_note(uri: str, changes: str | None) -> str:
    """``   newest event ..., checkpoint ...`` from the table's commit metadata (``lakestream.freshness``),
    and for the snapshot of a merge-on-read table (``changes``: the name of its changes table, at
    ``<uri>_changes``) how many change rows it does not hold yet."""
    from lakestream.freshness import describe, latest_freshness

    text = describe(latest_freshness(DeltaTable(uri).history(limit=50)))
    if changes is not None:
        from lakestream.silver import CHANGE_SEQ, SILVER_MOR_MERGE, SILVER_MOR_SCHEMA
        from merge_on_read.fold_changes import pending_changes
        from merge_on_read.table import MergeOnReadTable

        table = MergeOnReadTable(uri, uri + CHANGES_SUFFIX, SILVER_MOR_SCHEMA, SILVER_MOR_MERGE, CHANGE_SEQ)
        rows, files = pending_changes(table)
        text += f"{'; ' if text else ''}{rows} change rows in {files} file(s) of {changes} not folded"
    return f"   ({text})" if text else ""


def print_table_at(path: str | Path, name: str, at: At | None, *, rows: int = 0) -> None:
    """One table (at ``at``): its version, commit time and row count, then up to ``rows`` rows."""
    count, version = table_summary(path, at)
    dt = open_at(path, at)
    print(f"{name} at version {version} (committed {plain_utc(commit_ms(str(path), version))}): {count} rows")
    if rows > 0:
        for row in _scan(dt, path, f"SELECT * FROM t LIMIT {int(rows)}").to_pylist():
            print("  " + ", ".join(f"{k}={v!r}" for k, v in row.items()))
