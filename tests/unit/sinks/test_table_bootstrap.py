"""Table bootstrap at OPEN: all subtasks may create the table at once; an unfitting table is refused."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakestream.gold import ensure_gold_table
from lakestream.merge_spec import MergeSpec
from sinks.sink_errors import TableSchemaError
from sinks.table_bootstrap import TARGET_FILE_SIZE_PROPERTY, open_table
from sinks.table_spec import TableSpec
from tests.support.delta_tables import table_options, table_uri

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def all_at_once(open_it: Callable[[], object], subtasks: int) -> list[Exception]:
    """What ``subtasks`` threads calling ``open_it`` (and so creating the table) at one moment raised."""
    start = threading.Barrier(subtasks)
    failures: list[Exception] = []

    def run() -> None:
        start.wait()
        try:
            open_it()
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(subtasks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures


@pytest.mark.parametrize("table", ["sink", "gold"])
def test_writers_creating_a_table_at_once_land_one_creation_and_all_open_it(
    sink_table: Path, table: str
) -> None:
    # Racing creators lose with "version already exists"; delta-rs would move a losing CREATE TABLE to
    # version 1 with a table id of its own, so the table's id would change after version 0. One round
    # does not always produce the race, several practically always do (both back ends).
    options = table_options(sink_table)
    for round_ in range(6):
        uri = f"{table_uri(sink_table)}{round_}"
        if table == "sink":
            spec = TableSpec(table_uri=uri, schema=SCHEMA, storage_options=options)
            assert all_at_once(partial(open_table, spec, log_name="job"), 6) == []
        else:
            assert all_at_once(partial(ensure_gold_table, uri, storage_options=options), 6) == []
        dt = DeltaTable(uri, storage_options=options)
        assert dt.version() == 0, [h["operation"] for h in dt.history()]
        assert [h["operation"] for h in dt.history()] == ["CREATE TABLE"]


def test_merge_tables_are_created_with_the_target_file_size(tmp_path: Path) -> None:
    spec = TableSpec(
        table_uri=str(tmp_path / "kv"),
        schema=SCHEMA,
        mode="upsert",
        merge=MergeSpec(keys=("id",)),
        target_file_size=4096,
    )
    dt = open_table(spec, log_name="job")
    assert dt.metadata().configuration == {TARGET_FILE_SIZE_PROPERTY: "4096"} and dt.version() == 0


def test_a_table_with_another_column_type_is_refused(tmp_path: Path) -> None:
    t = tmp_path / "t"
    DeltaTable.create(str(t), schema=pa.schema([("id", pa.int32()), ("v", pa.string())]))
    with pytest.raises(TableSchemaError, match="differing"):
        open_table(TableSpec(table_uri=str(t), schema=SCHEMA), log_name="job")
