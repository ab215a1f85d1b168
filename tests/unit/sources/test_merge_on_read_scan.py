"""How the merge-on-read read path holds rows: change rows in sequence order, filtered file by file,
and not copied again when they already are in order; a snapshot's sorted runs oldest first."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from lakestream.merge_on_read_rule import in_arrival_order
from merge_on_read.fold_changes import staged_adds
from merge_on_read.table import scan
from storage.delta_log import open_filesystem

SCHEMA = pa.schema([pa.field("k", pa.string()), pa.field("v", pa.int64()), pa.field("seq", pa.int64())])


def rows(keys: list[str], seqs: list[int | None]) -> pa.Table:
    return pa.table({"k": keys, "v": list(range(len(keys))), "seq": seqs}, schema=SCHEMA)


def test_scan_above_a_sequence_reads_files_by_their_least_sequence_and_filters_each(tmp_path: Path) -> None:
    uri = str(tmp_path / "changes")
    # Log order differs from sequence order; one file straddles the bound; one has a null sequence.
    for part in (
        rows(["e", "f"], [5, 5]),
        rows(["c", "d"], [2, 2]),
        rows(["a", "b"], [1, 3]),
        rows(["g", "h"], [None, 7]),
        rows(["x"], [0]),
    ):
        write_deltalake(uri, part, mode="append")
    got = scan(DeltaTable(uri), SCHEMA, min_seq=("seq", 1))
    assert got.column("k").to_pylist() == ["b", "c", "d", "e", "f", "h"]
    assert got.column("seq").to_pylist() == [3, 2, 2, 5, 5, 7]
    # Without a bound: every row, nulls included, and still by least sequence first.
    assert scan(DeltaTable(uri), SCHEMA, min_seq=("seq", -1)).num_rows == 8
    assert sorted(scan(DeltaTable(uri), SCHEMA).column("k").to_pylist()) == list("abcdefghx")


def test_changes_already_in_sequence_order_are_not_copied() -> None:
    snapshot = rows(["a", "b"], [1, 2])
    changes = rows(["b", "a", "b"], [3, 4, 4])
    out = in_arrival_order(snapshot, changes, "seq")
    assert out.column("seq").to_pylist() == [1, 2, 3, 4, 4]
    # The change rows are the caller's buffers, not a sorted copy.
    tail = out.column("k").chunks[-1]
    assert tail.buffers()[2].address == changes.column("k").chunks[0].buffers()[2].address


def test_changes_out_of_sequence_order_are_sorted_stably() -> None:
    snapshot = rows(["a"], [1])
    changes = rows(["b", "a", "b"], [4, 3, 3])
    out = in_arrival_order(snapshot, changes, "seq")
    assert out.column("k").to_pylist() == ["a", "a", "b", "b"]
    assert out.column("seq").to_pylist() == [1, 3, 3, 4]
    assert out.column("v").to_pylist() == [0, 1, 2, 0]


def test_a_snapshot_of_several_runs_is_put_in_sequence_order_unless_it_comes_so() -> None:
    # Two runs' rows of "a" in the order a query engine may return them: the newer run first.
    snapshot = rows(["a", "b", "a"], [9, None, 4])
    out = in_arrival_order(snapshot, rows([], []), "seq")
    assert out.column("seq").to_pylist() == [None, 4, 9] and out.column("v").to_pylist() == [1, 2, 0]
    # Read run by run (oldest first) the caller says so, and with changes above it nothing is sorted.
    ordered = rows(["b", "a", "a"], [None, 4, 9])
    changes = rows(["a"], [10])
    assert in_arrival_order(ordered, changes, "seq", snapshot_in_order=True).column("seq").to_pylist() == [
        None,
        4,
        9,
        10,
    ]
    unordered = in_arrival_order(snapshot, changes, "seq", snapshot_in_order=True)
    assert unordered.column("seq").to_pylist() == [9, None, 4, 10]  # taken as given


def test_scan_by_run_reads_the_runs_oldest_first(tmp_path: Path) -> None:
    uri = str(tmp_path / "snapshot")
    write_deltalake(uri, rows(["a", "b"], [None, None]))  # outside run folders: the oldest run
    dt = DeltaTable(uri)
    for top, part in ((20, rows(["a"], [20])), (7, rows(["a", "b"], [5, 7]))):
        folder = f"run-{top:019d}-0000000{top % 10}"
        write_deltalake(f"{uri}/{folder}", part)
        adds = staged_adds(open_filesystem(uri), folder)
        assert len(adds) == 1
        dt.create_write_transaction(list(adds), mode="append", schema=dt.schema())
    got = scan(DeltaTable(uri), SCHEMA, by_run=True)
    assert got.column("seq").to_pylist() == [None, None, 5, 7, 20]
    one = scan(DeltaTable(uri), SCHEMA, by_run=True, keys=("k", ["a"]))
    assert one.column("seq").to_pylist() == [None, 5, 20]
