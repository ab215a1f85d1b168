"""``serving.table_summary``: row counts from the Delta log, a scan only where a file has no statistics."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction

from maintenance.auto import find_tables
from serving.table_summary import print_tables, table_summary

SCHEMA = pa.schema([("id", pa.int64())])


def test_counts_come_from_the_log_statistics(tmp_path: Path) -> None:
    uri = tmp_path / "bronze" / "t"
    write_deltalake(str(uri), pa.table({"id": [1, 2, 3]}, schema=SCHEMA))
    write_deltalake(str(uri), pa.table({"id": [4, 5]}, schema=SCHEMA), mode="append")
    assert table_summary(uri) == (5, 1)


def test_a_file_without_statistics_is_counted_by_scanning(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    write_deltalake(str(uri), pa.table({"id": [1, 2]}, schema=SCHEMA))
    pq.write_table(pa.table({"id": [7, 8, 9]}, schema=SCHEMA), uri / "nostats.parquet")
    add = AddAction(
        path="nostats.parquet",
        size=(uri / "nostats.parquet").stat().st_size,
        partition_values={},
        modification_time=int(time.time() * 1000),
        data_change=True,
        stats=None,  # no statistics: the log entry has none
    )
    DeltaTable(str(uri)).create_write_transaction([add], mode="append", schema=SCHEMA)
    assert table_summary(uri) == (5, 1)


def test_an_empty_table_has_no_rows(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    DeltaTable.create(str(uri), schema=SCHEMA)
    assert table_summary(uri) == (0, 0)


def test_print_tables_lists_each_table(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    write_deltalake(str(tmp_path / "a" / "x"), pa.table({"id": [1]}, schema=SCHEMA))
    write_deltalake(str(tmp_path / "b"), pa.table({"id": [1, 2]}, schema=SCHEMA))
    assert find_tables(str(tmp_path)) == ["a/x", "b"]
    print_tables(str(tmp_path))
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["a/x", "1", "rows", "version", "0"]
    assert out[2].split() == ["b", "2", "rows", "version", "0"]
