"""The Parquet files every writer of a sink's table writes: a dictionary only for closed-set columns.

Checked on the files themselves (column chunk encodings and codec), for each writer: the stager's
appends, the committer's MERGE, the merge-on-read changes files and folds, OPTIMIZE and Z-order.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from lakestream.config import Config
from lakestream.silver import SILVER_MERGE, SILVER_SCHEMA
from lakestream.standard import BRONZE_SCHEMA, CLOSED_SET_COLUMNS, LATE_SCHEMA, QUARANTINE_SCHEMA
from maintenance import operations
from maintenance.facts import resolve_table
from storage.parquet_encoding import dictionary_columns
from tests.support.delta_tables import open_writer
from tests.support.silver_rows import change, ts

DICTIONARY = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}


def encodings(table: Path) -> dict[str, set[str]]:
    """Per column, the encodings of its chunks over every data file of the table's current version."""
    out: dict[str, set[str]] = {}
    dt = DeltaTable(str(table))
    for uri in dt.file_uris():
        meta = pq.ParquetFile(uri.removeprefix("file://")).metadata
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                chunk = meta.row_group(g).column(c)
                assert chunk.compression == "SNAPPY"
                out.setdefault(chunk.path_in_schema, set()).update(chunk.encodings)
    assert out, f"no data files in {table}"
    return out


def assert_dictionary_only_for_closed_sets(table: Path) -> None:
    by_column = encodings(table)
    with_dictionary = sorted(c for c, e in by_column.items() if e & DICTIONARY)
    assert with_dictionary == sorted(c for c in by_column if c in CLOSED_SET_COLUMNS)


def test_the_closed_set_columns_of_each_table() -> None:
    assert dictionary_columns(BRONZE_SCHEMA.names) == [
        "event_type",
        "status",
        "logistics_state",
        "op",
        "source",
        "topic",
        "partition",
        "quality",
    ]
    assert dictionary_columns(LATE_SCHEMA.names) == dictionary_columns(BRONZE_SCHEMA.names)
    assert dictionary_columns(QUARANTINE_SCHEMA.names) == ["source", "stage", "topic", "partition"]
    assert dictionary_columns(SILVER_SCHEMA.names) == ["status", "logistics_state"]
    assert dictionary_columns(["event_id", "order_id", "raw", "status__eid"]) == []


def bronze_rows(n: int, start: int = 0) -> pa.Table:
    now = ts(1)
    return pa.Table.from_pylist(
        [
            {
                "event_id": f"e{i}",
                "order_id": f"o{i % 7}",
                "user_id": f"u{i}",
                "event_type": "order_created" if i % 2 else "payment",
                "event_time": now,
                "amount": Decimal(i) / 100,
                "status": ["created", "paid", "shipped"][i % 3],
                "address": f"street {i}",
                "logistics_state": None,
                "op": "c",
                "source": "orders_db" if i % 2 else "payments",
                "raw": f'{{"id": {i}}}'.encode(),
                "topic": "t",
                "partition": i % 2,
                "offset": i,
                "quality": "VALID",
                "quality_reason": None,
                "ingest_time": now,
            }
            for i in range(start, start + n)
        ],
        schema=BRONZE_SCHEMA,
    )


def test_appended_files_and_their_compaction_and_zorder(tmp_path: Path) -> None:
    table = tmp_path / "bronze" / "order_events"
    w = open_writer(table, restored=None, schema=BRONZE_SCHEMA, partition_by=["source"])
    for n in range(1, 4):
        w.write(bronze_rows(50, 50 * n))
        w.prepare(n)
        w.commit(n)
    assert_dictionary_only_for_closed_sets(table)
    ref = resolve_table(Config().replace("lakehouse", root=str(tmp_path)), "bronze/order_events")
    assert operations.optimize(ref).files_added == 2
    assert_dictionary_only_for_closed_sets(table)
    assert operations.optimize(ref, zorder=["order_id"]).files_added == 2
    assert_dictionary_only_for_closed_sets(table)
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 150


def silver_checkpoints() -> list[list[dict[str, object]]]:
    return [
        [change(f"o{i}", f"e{i}", 10, status="created", address=f"street {i}") for i in range(40)],
        [change(f"o{i}", f"f{i}", 20, status="paid", logistics_state="packed") for i in range(0, 60, 2)],
    ]


def test_merged_files(tmp_path: Path) -> None:
    table = tmp_path / "silver"
    w = open_writer(table, restored=None, schema=SILVER_SCHEMA, mode="merge", merge=SILVER_MERGE)
    for n, rows in enumerate(silver_checkpoints(), start=1):
        w.write(pa.RecordBatch.from_pylist(rows, schema=SILVER_SCHEMA))
        w.prepare(n)
        w.commit(n)
    assert DeltaTable(str(table)).history(1)[0]["operation"] == "MERGE"
    assert_dictionary_only_for_closed_sets(table)


def test_merge_on_read_changes_and_folded_snapshot(tmp_path: Path) -> None:
    from lakestream.silver import CHANGE_SEQ, LAST_EVENT_TIME, SILVER_MOR_MERGE, SILVER_MOR_SCHEMA
    from merge_on_read.fold_changes import fold_once
    from merge_on_read.table import MergeOnReadTable

    changes, snapshot = tmp_path / "changes", tmp_path / "snapshot"
    w = open_writer(
        changes,
        restored=None,
        schema=SILVER_SCHEMA,
        mode="changes",
        merge=SILVER_MERGE,
        sequence_column=CHANGE_SEQ,
    )
    mor = MergeOnReadTable(
        snapshot_uri=str(snapshot),
        changes_uri=str(changes),
        schema=SILVER_MOR_SCHEMA,
        spec=SILVER_MOR_MERGE,
        seq=CHANGE_SEQ,
        event_time=LAST_EVENT_TIME,
    )
    for n, rows in enumerate(silver_checkpoints(), start=1):
        w.write(pa.RecordBatch.from_pylist(rows, schema=SILVER_SCHEMA))
        w.prepare(n)
        w.commit(n)
        assert_dictionary_only_for_closed_sets(changes)
        fold_once(mor)
        assert_dictionary_only_for_closed_sets(snapshot)
