"""Table bootstrap at OPEN: all subtasks may create the table at once; an unfitting table is refused."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakestream.merge_spec import MergeSpec
from sinks.sink_errors import TableSchemaError
from sinks.table_bootstrap import TARGET_FILE_SIZE_PROPERTY, open_table
from sinks.table_spec import TableSpec

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def open_all_at_once(spec: TableSpec, subtasks: int) -> list[Exception]:
    """What ``subtasks`` threads opening (and so creating) the table at the same moment raised."""
    start = threading.Barrier(subtasks)
    failures: list[Exception] = []

    def open_it() -> None:
        start.wait()
        try:
            open_table(spec, log_name="job")
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            failures.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(subtasks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures


def test_subtasks_creating_the_table_at_once_all_open_the_one_table(tmp_path: Path) -> None:
    # Concurrent CREATEs race (delta-rs: "protocol changed"); losing that race is fine. One round does
    # not always produce the race, twenty practically always do. (delta-rs may also let a second CREATE
    # through as version 1, with the same schema: harmless before any data.)
    for round_ in range(20):
        spec = TableSpec(table_uri=str(tmp_path / f"t{round_}"), schema=SCHEMA)
        assert open_all_at_once(spec, 8) == []
        dt = open_table(spec, log_name="job")
        assert {h["operation"] for h in dt.history()} == {"CREATE TABLE"}


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
