"""The clustered fold: key ranges of files as disjoint cells, and a fold that rewrites only those it touches.

Its correctness against the reference (every event folded in arrival order) is the property test of
``tests/unit/sinks/test_changes_mode.py``, run with small cells, one cell and MERGE; here: which files
a fold rewrites, when it MERGEs instead, and what it leaves on storage.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from maintenance.auto import find_tables
from merge_on_read import fold_changes
from merge_on_read.fold_changes import FOLD_FILE_ROWS, cell_plan, distinct_keys, file_rows_for, fold_once
from merge_on_read.key_ranges import Cell, KeyFile, cells, disjoint, key_files, owners
from merge_on_read.table import MergeOnReadTable, changes_above, folded_through, read_current
from tests.support.silver_rows import change as event
from tests.unit.sinks.test_changes_mode import changes_writer, expected, mor, silver_only
from tests.unit.sinks.test_merge_mode import batch


def f(lo: str, hi: str, rows: int = 1) -> KeyFile:
    return KeyFile(f"{lo}-{hi}", 10, rows, lo, hi)


def test_files_whose_ranges_overlap_form_one_cell_and_cells_are_disjoint() -> None:
    found = cells([f("m", "p"), f("a", "c"), f("b", "e"), f("d", "f"), f("x", "z"), f("g", "h")])
    assert [(c.lo, c.hi, len(c.files)) for c in found] == [
        ("a", "f", 3),
        ("g", "h", 1),
        ("m", "p", 1),
        ("x", "z", 1),
    ]
    assert disjoint([f("a", "b"), f("c", "d")]) and not disjoint([f("a", "c"), f("c", "d")])
    assert cells([]) == []


def test_every_key_has_one_owner_below_between_and_above_the_cells() -> None:
    found = [Cell((f("b", "c"),), "b", "c"), Cell((f("f", "g"),), "f", "g")]
    keys = np.array(["a", "b", "c", "d", "f", "zz", "fa"])
    assert owners(found, keys).tolist() == [0, 0, 0, 0, 1, 1, 1]
    # A bound longer than every key is compared whole, not cut to the keys' width.
    assert owners(
        [Cell((f("a", "a"),), "a", "a"), Cell((f("bbb", "c"),), "bbb", "c")], np.array(["bb"])
    ).tolist() == [0]
    assert owners(found, np.array([], dtype=str)).tolist() == []


def test_key_files_says_why_without_statistics() -> None:
    actions = pa.table({"path": ["p"], "size_bytes": [1], "num_records": [1]})
    assert "no statistics" in str(key_files(actions, "order_id"))
    nulls = actions.append_column("min.order_id", pa.array([None], pa.string())).append_column(
        "max.order_id", pa.array(["b"])
    )
    assert "some files" in str(key_files(nulls, "order_id"))


def test_distinct_keys_counts_tuples_of_every_key_column() -> None:
    rows = pa.table({"a": ["x", "x", "y", "x"], "b": [1, 2, 1, 1], "v": [0, 0, 0, 0]})
    assert distinct_keys(rows, ("a", "b")) == 3
    assert distinct_keys(rows, ("a",)) == 2
    assert distinct_keys(rows.slice(0, 0), ("a", "b")) == 0


def commit(root: Path, n: int, rows: list[dict[str, Any]]) -> None:
    w = changes_writer(root, n - 1 if n > 1 else None)
    w.write(batch(rows))
    w.prepare(n)
    w.commit(n)


def orders(first: int, last: int, second: int, eid: str, **values: Any) -> list[dict[str, Any]]:
    return [event(f"o{i:04d}", f"{eid}{i}", second, **values) for i in range(first, last)]


def created(root: Path, n: int) -> tuple[MergeOnReadTable, list[dict[str, Any]]]:
    """The merge-on-read table with ``n`` orders committed to its changes (none folded)."""
    applied = orders(0, n, 1, "c", status="created")
    commit(root, 1, applied)
    return mor(root), applied


def paths(uri: str) -> set[str]:
    return set(pa.table(DeltaTable(uri).get_add_actions(flatten=True))["path"].to_pylist())


def test_keys_that_grow_with_time_rewrite_only_the_newest_cell(tmp_path: Path) -> None:
    table, applied = created(tmp_path, 100)
    first = fold_once(table, file_rows=10, retention=timedelta(0))
    assert first.clustered and len(paths(table.snapshot_uri)) == 10
    before = paths(table.snapshot_uri)

    # An update of a recent order and new orders: both in the last cell (o0090..), nothing else.
    late = orders(95, 96, 2, "p", status="paid") + orders(100, 104, 2, "n", status="created")
    commit(tmp_path, 2, late)
    applied += late
    second = fold_once(table, file_rows=10, retention=timedelta(0))
    after = paths(table.snapshot_uri)
    assert second.clustered and second.files_rewritten == 1
    assert (second.change_rows, second.keys, second.rows_written) == (5, 5, 14)
    assert len(before - after) == 1 and len(after - before) == 2  # 14 rows cut into two files of 7
    snapshot = DeltaTable(table.snapshot_uri)
    assert silver_only(snapshot.to_pyarrow_table()).equals(expected(applied))
    assert disjoint(key_files(pa.table(snapshot.get_add_actions(flatten=True)), "order_id"))  # type: ignore[arg-type]


def bytes_per_row(table: DeltaTable) -> float:
    actions = pa.table(table.get_add_actions(flatten=True))
    return float(sum(actions["size_bytes"].to_pylist()) / sum(actions["num_records"].to_pylist()))


def test_a_fold_cuts_files_of_about_the_tables_target_size(tmp_path: Path) -> None:
    table, applied = created(tmp_path, 4000)
    changes = DeltaTable(table.changes_uri)
    # 1,500 rows by the changes (the snapshot has no file yet): 3 files (1,334, 1,334, 1,332).
    target = math.ceil(1_500 * bytes_per_row(changes))
    assert file_rows_for(target, [], changes) == 1_500
    assert file_rows_for(target, [], None) == FOLD_FILE_ROWS
    done = fold_once(replace(table, target_file_size=target), retention=timedelta(0))
    sizes = pa.table(DeltaTable(table.snapshot_uri).get_add_actions(flatten=True))["num_records"]
    assert done.clustered and sorted(sizes.to_pylist()) == [1_332, 1_334, 1_334]
    snapshot = DeltaTable(table.snapshot_uri)  # measured on its own files from now on
    files = key_files(pa.table(snapshot.get_add_actions(flatten=True)), "order_id")
    assert not isinstance(files, str)
    assert file_rows_for(target, cells(files), changes) == int(target / bytes_per_row(snapshot))
    assert silver_only(read_current(table)).equals(expected(applied))


def test_overlapping_files_above_the_cap_are_merged_and_a_change_feed_is_kept(tmp_path: Path) -> None:
    table, applied = created(tmp_path, 40)
    fold_once(table, file_rows=10)
    more = orders(5, 6, 2, "p", status="paid")
    commit(tmp_path, 2, more)
    applied += more
    snapshot = DeltaTable(table.snapshot_uri)
    rows = changes_above(DeltaTable(table.changes_uri), folded_through(snapshot), table)
    assert "above 5" in str(cell_plan(snapshot, table, rows, max_cell_rows=5))
    assert not isinstance(cell_plan(snapshot, table, rows, max_cell_rows=10), str)

    snapshot.alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    assert "change data feed" in str(cell_plan(snapshot, table, rows))
    done = fold_once(table, file_rows=10)
    assert not done.clustered and done.files_rewritten == 1
    assert silver_only(read_current(table)).equals(expected(applied))
    cdf = DeltaTable(table.snapshot_uri).load_cdf(starting_version=snapshot.version()).read_all()
    assert "update_postimage" in cdf["_change_type"].to_pylist()


def test_a_fold_whose_commit_fails_leaves_no_files_behind_and_the_retry_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, applied = created(tmp_path, 30)
    fold_once(table, file_rows=10)
    more = orders(25, 35, 2, "p", status="paid")
    commit(tmp_path, 2, more)
    applied += more
    real = DeltaTable.create_write_transaction
    calls: list[int] = []

    def conflict_once(self: DeltaTable, *args: Any, **kw: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise CommitFailedError("a concurrent commit")
        real(self, *args, **kw)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", conflict_once)
    done = fold_once(table, file_rows=10)
    assert done.clustered and len(calls) == 2
    snapshot = DeltaTable(table.snapshot_uri)
    assert silver_only(snapshot.to_pyarrow_table()).equals(expected(applied))
    # Every Parquet file under the snapshot's folders is one of the table's, current or removed: the
    # failed attempt's files are gone, and no staging log is left.
    root = Path(table.snapshot_uri)
    assert not list(root.glob("fold/_delta_log"))
    on_disk = {str(p.relative_to(root)) for p in root.glob("fold/*.parquet")}
    assert on_disk and on_disk <= paths(table.snapshot_uri) | removed_paths(snapshot)


def removed_paths(snapshot: DeltaTable) -> set[str]:
    out = set()
    for log_file in Path(snapshot.table_uri.removeprefix("file://")).glob("_delta_log/*.json"):
        for line in log_file.read_text().splitlines():
            if '"remove"' in line:
                out.add(json.loads(line)["remove"]["path"])
    return out


def test_vacuum_after_clustered_folds_keeps_the_table_whole(tmp_path: Path) -> None:
    table = mor(tmp_path)
    applied: list[dict[str, Any]] = []
    for n in range(1, 4):
        rows = orders(10 * n - 5, 10 * n + 5, n, f"e{n}-", status=f"s{n}")
        commit(tmp_path, n, rows)
        applied += rows
        fold_once(table, file_rows=4, retention=timedelta(0))
    snapshot = DeltaTable(table.snapshot_uri)
    removed = snapshot.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert removed  # the folds' replaced files, in the fold folder too
    assert any(p.startswith("fold/") for p in removed)
    assert silver_only(DeltaTable(table.snapshot_uri).to_pyarrow_table()).equals(expected(applied))


def test_a_staging_log_an_interrupted_fold_left_is_cleared_and_not_taken_for_a_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, applied = created(tmp_path, 20)

    def killed(*args: Any, **kw: Any) -> None:
        raise KeyboardInterrupt  # as if the process died between staging and committing

    monkeypatch.setattr(fold_changes, "_delete", lambda fs, path, kind="dir": None)  # a kill deletes nothing
    monkeypatch.setattr(DeltaTable, "create_write_transaction", killed)
    with pytest.raises(KeyboardInterrupt):
        fold_once(table)
    monkeypatch.undo()
    root = Path(table.snapshot_uri)
    assert len(list(root.glob("fold/_delta_log"))) == 1
    assert find_tables(str(tmp_path)) == ["orders", "orders_changes"]
    assert fold_once(table).clustered
    assert not list(root.glob("fold/_delta_log"))
    assert silver_only(DeltaTable(table.snapshot_uri).to_pyarrow_table()).equals(expected(applied))


def test_a_failure_after_the_commit_landed_keeps_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, applied = created(tmp_path, 20)
    real = DeltaTable.create_write_transaction

    def landed_then_failed(self: DeltaTable, *args: Any, **kw: Any) -> None:
        real(self, *args, **kw)
        raise OSError("the post-commit checkpoint could not be written")

    monkeypatch.setattr(DeltaTable, "create_write_transaction", landed_then_failed)
    with pytest.raises(OSError, match="post-commit"):
        fold_once(table)
    monkeypatch.undo()
    assert silver_only(DeltaTable(table.snapshot_uri).to_pyarrow_table()).equals(expected(applied))
    assert fold_once(table).change_rows == 0  # the fold point moved with the commit
