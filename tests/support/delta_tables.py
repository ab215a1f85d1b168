"""Shared helpers for the Delta writer tests (no tests here): real tables in tmp dirs, crash simulation."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path, PosixPath
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable

from sinks.sink_errors import DeltaSinkError
from sinks.table_spec import TableSpec
from sinks.writer import TwoPhaseDeltaWriter


class StoredTable(PosixPath):
    """A table on an object store, seen through the store's own folder: the writer gets ``uri`` and
    ``options``, the checks of this module read the folder."""

    uri: str
    options: dict[str, str]

    @classmethod
    def at(cls, view: Path, *, uri: str, options: Mapping[str, str]) -> StoredTable:
        """The table at ``uri``, whose objects the store keeps under the folder ``view``."""
        table = cls(view)
        table.uri = uri
        table.options = dict(options)
        return table

    @property
    def env(self) -> dict[str, str]:
        """What a ``lakestream`` process needs to reach it: the AWS variables its options name."""
        return dict(self.options)


def table_uri(table: Path) -> str:
    """The URI a writer of ``table`` gets: its object-store URI, or the local path."""
    return table.uri if isinstance(table, StoredTable) else str(table)


def lakehouse_env(lakehouse: Path) -> dict[str, str]:
    """The environment of a ``lakestream`` process whose lakehouse root is ``lakehouse``."""
    if isinstance(lakehouse, StoredTable):
        return {"LAKESTREAM__LAKEHOUSE__ROOT": lakehouse.uri, **lakehouse.env}
    return {"LAKESTREAM__LAKEHOUSE__ROOT": str(lakehouse)}


def table_at(lakehouse: Path, name: str) -> str:
    """The URI of table ``name`` (``silver/orders``) under the lakehouse root ``lakehouse``."""
    if isinstance(lakehouse, StoredTable):
        return f"{lakehouse.uri}/{name}"
    return str(lakehouse / name)


def table_options(table: Path) -> dict[str, str] | None:
    """The storage options a client of ``table`` needs (None for a local folder)."""
    return table.options if isinstance(table, StoredTable) else None


class SimulatedCrash(DeltaSinkError):
    """Raised by test hooks to stop a writer mid-protocol, like a killed TaskManager."""


def open_writer(
    table: Path,
    *,
    restored: int | None,
    run_id: str = "run-1",
    subtask: int = 0,
    parallelism: int = 1,
    **kwargs: Any,
) -> TwoPhaseDeltaWriter:
    """A new writer object (a new task attempt) that got OPEN(restored); ``kwargs`` as ``new_writer``."""
    writer = new_writer(table, **kwargs)
    writer.open(restored_checkpoint_id=restored, run_id=run_id, subtask=subtask, parallelism=parallelism)
    return writer


#: Keywords of ``TwoPhaseDeltaWriter`` itself; ``new_writer`` passes the others to ``TableSpec``.
WRITER_KEYWORDS = ("app_prefix", "retry", "commit_hooks", "commit_mode")


def new_writer(table: Path, **kwargs: Any) -> TwoPhaseDeltaWriter:
    """A writer of ``table`` (app prefix "job" unless given), not opened: ``kwargs`` are the writer's
    keywords and the fields of its ``TableSpec``."""
    options = {k: kwargs.pop(k) for k in WRITER_KEYWORDS if k in kwargs}
    options.setdefault("app_prefix", "job")
    kwargs.setdefault("storage_options", table_options(table))
    return TwoPhaseDeltaWriter(spec=TableSpec(table_uri=table_uri(table), **kwargs), **options)


def snapshot_rows(table: Path, schema: pa.Schema, sort_keys: list[str]) -> pa.Table:
    """The table's current rows, in ``schema`` and sorted, for exact comparison."""
    data = DeltaTable(str(table)).to_pyarrow_table()
    data = pa.table({name: data[name] for name in schema.names}).cast(schema)
    return data.sort_by([(k, "ascending") for k in sort_keys])


def expected_rows(schema: pa.Schema, rows: list[dict[str, Any]], sort_keys: list[str]) -> pa.Table:
    """Expected rows as a sorted Arrow table in ``schema``."""
    return pa.Table.from_pylist(rows, schema=schema).sort_by([(k, "ascending") for k in sort_keys])


def assert_same_rows(actual: pa.Table, expected: pa.Table) -> None:
    """Exact equality of two sorted tables, with a readable diff on failure."""
    assert actual.num_rows == expected.num_rows, (actual.to_pylist(), expected.to_pylist())
    assert actual.equals(expected), (actual.to_pylist(), expected.to_pylist())


def txn_version(table: Path, app_id: str) -> int | None:
    """The Delta txn version recorded for ``app_id``."""
    return DeltaTable(str(table)).transaction_version(app_id)


def table_version(table: Path) -> int:
    """Current Delta table version."""
    return DeltaTable(str(table)).version()


def referenced_files(table: Path) -> set[Path]:
    """Absolute paths of the data files in the current snapshot."""
    # file_uris() gives the on-disk paths (partition folders keep their own %-escapes).
    return {Path(u.removeprefix("file://")).resolve() for u in DeltaTable(str(table)).file_uris()}


def parquet_on_disk(table: Path) -> set[Path]:
    """Every Parquet file under the table folder outside the Delta log."""
    return {p.resolve() for p in table.rglob("*.parquet") if "_delta_log" not in p.parts}


def staging_leftovers(table: Path) -> list[Path]:
    """Any file left in the writer's staging area (manifests, merge sources, temps)."""
    root = table / "_lakestream"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def ever_added(table: Path) -> set[Path]:
    """Every data file any commit in the log added (MERGE and OPTIMIZE leave removed ones on disk)."""
    added = set()
    for path in (table / "_delta_log").glob("*.json"):
        for line in path.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                added.add((table / unquote(action["add"]["path"])).resolve())
    return added


def assert_no_orphans(table: Path) -> None:
    """Nothing staged is left behind: every Parquet file on disk was committed (and the current snapshot
    is on disk), and the staging area is empty."""
    on_disk = parquet_on_disk(table)
    assert on_disk - ever_added(table) == set(), "staged files that never reached the log"
    assert referenced_files(table) - on_disk == set(), "snapshot references missing files"
    assert staging_leftovers(table) == []


def commits_with_app(table: Path, app_id: str) -> int:
    """How many commits in the log carry a txn action for ``app_id`` (exactly-once evidence)."""
    count = 0
    for path in sorted((table / "_delta_log").glob("*.json")):
        if f'"appId":"{app_id}"' in path.read_text():
            count += 1
    return count
