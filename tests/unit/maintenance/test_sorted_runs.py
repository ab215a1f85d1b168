"""Sorted runs of a merge-on-read snapshot: their identity, the merge policy, and what folds write.

Correctness against the reference (every event folded in arrival order) is the property test of
``tests/unit/sinks/test_changes_mode.py``, run with small files, the default policy, a policy that
merges every fold and one that rarely does; here: which runs a policy merges, what a fold writes and
rewrites with keys spread over the table, and what folds leave on storage after failures.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from lakestream.config import MaintenanceConfig
from lakestream.run_folders import BASE_TOP, holds_runs, run_dir, run_of
from maintenance.auto import find_tables, plan_round, table_state
from maintenance.facts import TableRef
from maintenance.maintenance_errors import RefusedError
from maintenance.operations import optimize
from merge_on_read import fold_changes
from merge_on_read.fold_changes import FOLD_FILE_ROWS, file_rows_for, fold_once
from merge_on_read.key_ranges import KeyFile, cells, disjoint, key_files
from merge_on_read.sorted_runs import CompactionPolicy, compaction_plan, run_rank, runs
from merge_on_read.table import MergeOnReadTable, read_current
from tests.support.silver_rows import change as event
from tests.unit.sinks.test_changes_mode import changes_writer, expected, mor, silver_only
from tests.unit.sinks.test_merge_mode import batch


def f(lo: str, hi: str, rows: int = 1, path: str | None = None) -> KeyFile:
    return KeyFile(path or f"{lo}-{hi}", 10, rows, lo, hi)


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


def test_key_files_says_why_without_statistics() -> None:
    actions = pa.table({"path": ["p"], "size_bytes": [1], "num_records": [1]})
    assert "no statistics" in str(key_files(actions, "order_id"))
    nulls = actions.append_column("min.order_id", pa.array([None], pa.string())).append_column(
        "max.order_id", pa.array(["b"])
    )
    assert "some files" in str(key_files(nulls, "order_id"))


def test_a_files_run_is_its_folder_and_files_outside_run_folders_are_the_oldest_run() -> None:
    a, b = run_dir(7), run_dir(12)
    assert run_of(f"{a}/part-1.parquet") == (7, a)
    assert run_of("part-0.parquet") == (BASE_TOP, "")
    assert run_of("fold/part-0.parquet") == (BASE_TOP, "")  # the legacy staging folder
    assert run_of(f"{a}") == (BASE_TOP, "")  # a folder name alone is no file of a run
    files = [f("a", "c", path=f"{b}/1"), f("a", "z", path="x.parquet"), f("d", "f", path=f"{a}/2")]
    found = runs([*files, f("a", "b", path=f"{a}/1")])
    assert [(r.top, [x.path for x in r.files]) for r in found] == [
        (BASE_TOP, ["x.parquet"]),
        (7, [f"{a}/1", f"{a}/2"]),  # by lowest key
        (12, [f"{b}/1"]),
    ]
    paths = [f"{b}/1", "x.parquet", f"{a}/2", f"{a}/1"]
    assert [paths[i] for i in run_rank(paths)] == ["x.parquet", f"{a}/2", f"{a}/1", f"{b}/1"]
    assert holds_runs(paths) and not holds_runs(["x.parquet", "fold/y.parquet", "run-1-abc/z"])


def test_the_policy_merges_as_paimons_universal_compaction() -> None:
    policy = CompactionPolicy(max_size_amplification_percent=100, size_ratio_percent=1, max_runs=5)
    assert compaction_plan([], policy) == compaction_plan([10], policy) == 0
    assert compaction_plan([10], policy, full=True) == 0
    assert compaction_plan([100, 5, 1], policy, full=True) == 3
    # Sizes oldest first. Size ratio: the newest runs merge while the next older is at most 1 % larger.
    assert compaction_plan([1000, 50, 10], policy) == 0
    assert compaction_plan([1000, 10, 10], policy) == 2
    assert compaction_plan([1000, 30, 10, 10], policy) == 2  # 20 * 1.01 < 30
    assert compaction_plan([1000, 20, 10, 10], policy) == 3
    # Size amplification: the runs above the oldest hold more than 100 % of it: everything.
    assert compaction_plan([100, 60, 41], policy) == 3
    assert compaction_plan([100, 60, 40], policy) == 0
    # More than max_runs: the newest merge down to it whatever their sizes.
    assert compaction_plan([10_000, 800, 400, 200, 100, 50], policy) == 2
    assert compaction_plan([10_000, 800, 400, 200, 100, 50, 5], policy) == 3
    with pytest.raises(ValueError, match="max_runs"):
        CompactionPolicy(max_runs=0)


def commit(root: Path, n: int, rows: list[dict[str, Any]]) -> None:
    w = changes_writer(root, n - 1 if n > 1 else None)
    w.write(batch(rows))
    w.prepare(n)
    w.commit(n)


def orders(ids: list[int], second: int, eid: str, **values: Any) -> list[dict[str, Any]]:
    return [event(f"o{i:05d}", f"{eid}{i}", second, **values) for i in ids]


def created(root: Path, n: int) -> tuple[MergeOnReadTable, list[dict[str, Any]]]:
    """The merge-on-read table with ``n`` orders committed to its changes (none folded)."""
    applied = orders(list(range(n)), 1, "c", status="created")
    commit(root, 1, applied)
    return mor(root), applied


def paths(uri: str) -> set[str]:
    return set(pa.table(DeltaTable(uri).get_add_actions(flatten=True))["path"].to_pylist())


def snapshot_runs(table: MergeOnReadTable) -> list[int]:
    files = key_files(pa.table(DeltaTable(table.snapshot_uri).get_add_actions(flatten=True)), "order_id")
    assert isinstance(files, list)
    return [r.rows for r in runs(files)]


#: Merges only a newer run at least as large as the older one (none in the tests that use it).
NEVER = CompactionPolicy(max_size_amplification_percent=10**9, size_ratio_percent=0, max_runs=10**6)


def test_updates_spread_over_the_table_append_a_run_and_rewrite_nothing(tmp_path: Path) -> None:
    rng = random.Random(5)
    table, applied = created(tmp_path, 1000)
    fold_once(table, file_rows=100, retention=timedelta(0))
    assert snapshot_runs(table) == [1000]
    before = paths(table.snapshot_uri)
    # Payments of 50 orders spread over every file of the table, and 5 new orders.
    late = orders(sorted(rng.sample(range(1000), 50)), 2, "p", status="paid") + orders(
        list(range(1000, 1005)), 2, "n", status="created"
    )
    commit(tmp_path, 2, late)
    applied += late
    done = fold_once(table, file_rows=100, retention=timedelta(0), policy=NEVER)
    assert (done.change_rows, done.keys, done.runs_merged, done.files_rewritten) == (55, 55, 0, 0)
    assert done.rows_written == 55 and done.runs == 2
    assert paths(table.snapshot_uri) >= before  # nothing removed
    assert snapshot_runs(table) == [1000, 55]
    assert silver_only(read_current(table)).equals(expected(applied))
    assert silver_only(read_current(table, keys=["o00003", "o01004"])).equals(
        expected([r for r in applied if r["order_id"] in ("o00003", "o01004")])
    )
    # The default policy merges 55 rows above 1,000 only past its amplification; a full merge now.
    merged = fold_once(table, file_rows=100, retention=timedelta(0), full=True)
    assert (merged.change_rows, merged.runs_merged, merged.runs, merged.rows_written) == (0, 2, 1, 1005)
    assert merged.files_rewritten == 10 + 1 and merged.bytes_rewritten > 0
    # The merge changes no row of the read path: its adds and removes say so to streaming readers.
    last = sorted((Path(table.snapshot_uri) / "_delta_log").glob("*.json"))[-1].read_text().splitlines()
    changes = [a for a in map(json.loads, last) if "add" in a or "remove" in a]
    assert changes and not any(next(iter(a.values()))["dataChange"] for a in changes)
    snapshot = DeltaTable(table.snapshot_uri)
    assert silver_only(snapshot.to_pyarrow_table()).equals(expected(applied))  # one row per order again
    files = key_files(pa.table(snapshot.get_add_actions(flatten=True)), "order_id")
    assert isinstance(files, list) and disjoint(files) and max(x.rows for x in files) <= 100


def test_runs_merge_by_size_and_the_snapshot_stays_within_its_amplification(tmp_path: Path) -> None:
    rng = random.Random(9)
    table, applied = created(tmp_path, 400)
    policy = CompactionPolicy(max_size_amplification_percent=50, size_ratio_percent=1, max_runs=3)
    fold_once(table, file_rows=64, retention=timedelta(0), policy=policy)
    for n in range(2, 14):
        rows = orders(rng.sample(range(400), 40), n, f"u{n}-", status=f"s{n}")
        commit(tmp_path, n, rows)
        applied += rows
        done = fold_once(table, file_rows=64, retention=timedelta(0), policy=policy)
        sizes = snapshot_runs(table)
        assert len(sizes) <= 3 and done.runs == len(sizes)
        assert silver_only(read_current(table)).equals(expected(applied))
    assert done.folded_through is not None


def test_a_fold_cuts_files_of_about_the_tables_target_size(tmp_path: Path) -> None:
    table, applied = created(tmp_path, 4000)
    changes = DeltaTable(table.changes_uri)
    # 1,500 rows by the changes (the snapshot has no file yet): 3 files (1,500, 1,500, 1,000).
    target = math.ceil(1_500 * bytes_per_row(changes))
    assert file_rows_for(target, [], changes) == 1_500
    assert file_rows_for(target, [], None) == FOLD_FILE_ROWS
    fold_once(replace(table, target_file_size=target), retention=timedelta(0))
    snapshot = DeltaTable(table.snapshot_uri)
    sizes = pa.table(snapshot.get_add_actions(flatten=True))["num_records"]
    assert sorted(sizes.to_pylist()) == [1_000, 1_500, 1_500]
    files = key_files(pa.table(snapshot.get_add_actions(flatten=True)), "order_id")
    assert isinstance(files, list)
    assert file_rows_for(target, files, changes) == int(target / bytes_per_row(snapshot))
    assert silver_only(read_current(table)).equals(expected(applied))


def bytes_per_row(table: DeltaTable) -> float:
    actions = pa.table(table.get_add_actions(flatten=True))
    return float(sum(actions["size_bytes"].to_pylist()) / sum(actions["num_records"].to_pylist()))


def test_a_copy_on_write_table_switched_to_runs_is_the_oldest_run(tmp_path: Path) -> None:
    # silver/orders as copy-on-write wrote it: no change_seq, files whose key ranges overlap.
    rows = expected(orders(list(range(0, 30, 2)), 1, "a", status="created"))
    write_deltalake(str(tmp_path / "orders"), rows.filter(pa.array([i % 2 == 0 for i in range(15)])))
    write_deltalake(
        str(tmp_path / "orders"), rows.filter(pa.array([i % 2 == 1 for i in range(15)])), mode="append"
    )
    applied = orders(list(range(0, 30, 2)), 1, "a", status="created")
    table = mor(tmp_path)
    more = orders(list(range(0, 30, 3)), 2, "p", status="paid")
    commit(tmp_path, 1, more)
    applied += more
    done = fold_once(table, file_rows=100, retention=timedelta(0), policy=NEVER)
    assert done.runs == 2 and done.files_rewritten == 0
    assert silver_only(read_current(table)).equals(expected(applied))
    done = fold_once(table, file_rows=4, retention=timedelta(0), full=True)
    assert done.runs_merged == 2 and done.files_rewritten == 2 + 1
    assert silver_only(DeltaTable(table.snapshot_uri).to_pyarrow_table()).equals(expected(applied))


@pytest.mark.parametrize("which", ["fold", "merge"])
def test_a_commit_that_fails_leaves_no_files_behind_and_the_retry_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    table, applied = created(tmp_path, 30)
    fold_once(table, file_rows=10)
    more = orders(list(range(25, 35)), 2, "p", status="paid")
    commit(tmp_path, 2, more)
    applied += more
    real = DeltaTable.create_write_transaction
    calls: list[int] = []

    def conflict_once(self: DeltaTable, *args: Any, **kw: Any) -> None:
        calls.append(1)
        if len(calls) == (1 if which == "fold" else 2):
            raise CommitFailedError("a concurrent commit")
        real(self, *args, **kw)

    monkeypatch.setattr(DeltaTable, "create_write_transaction", conflict_once)
    done = fold_once(table, file_rows=10, full=True)
    assert len(calls) == 3 and done.runs_merged == 2
    snapshot = DeltaTable(table.snapshot_uri)
    assert silver_only(snapshot.to_pyarrow_table()).equals(expected(applied))
    # Every Parquet file under the snapshot's run folders is one of the table's, current or removed:
    # the failed attempt's files are gone, and no staging log is left.
    root = Path(table.snapshot_uri)
    assert not list(root.glob("run-*/_delta_log"))
    on_disk = {str(p.relative_to(root)) for p in root.glob("run-*/*.parquet")}
    assert on_disk and on_disk <= paths(table.snapshot_uri) | removed_paths(snapshot)


def removed_paths(snapshot: DeltaTable) -> set[str]:
    out = set()
    for log_file in Path(snapshot.table_uri.removeprefix("file://")).glob("_delta_log/*.json"):
        for line in log_file.read_text().splitlines():
            if '"remove"' in line:
                out.add(json.loads(line)["remove"]["path"])
    return out


def test_vacuum_after_merges_keeps_the_table_whole(tmp_path: Path) -> None:
    table = mor(tmp_path)
    applied: list[dict[str, Any]] = []
    for n in range(1, 4):
        rows = orders(list(range(10 * n - 5, 10 * n + 5)), n, f"e{n}-", status=f"s{n}")
        commit(tmp_path, n, rows)
        applied += rows
        fold_once(table, file_rows=4, retention=timedelta(0), full=True)
    snapshot = DeltaTable(table.snapshot_uri)
    removed = snapshot.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert removed and all(p.startswith("run-") for p in removed)  # the merged runs' files
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
    (root / "fold" / "_delta_log").mkdir(parents=True)  # and one of a fold before sorted runs
    assert len(list(root.glob("run-*/_delta_log"))) == 1
    assert find_tables(str(tmp_path)) == ["orders", "orders_changes"]
    assert fold_once(table).change_rows == 20
    assert not list(root.glob("*/_delta_log"))
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


def test_maintenance_never_compacts_a_table_of_sorted_runs(tmp_path: Path) -> None:
    table, applied = created(tmp_path, 50)
    fold_once(table, file_rows=5)  # ten small files
    ref = TableRef("silver/orders", table.snapshot_uri)
    with pytest.raises(RefusedError, match="sorted runs of merge-on-read silver"):
        optimize(ref)
    with pytest.raises(RefusedError, match="maintain fold --full"):
        optimize(ref, zorder=["order_id"])
    state = table_state(ref, MaintenanceConfig())
    assert state.sorted_runs
    assert not [
        a
        for a in plan_round(state, MaintenanceConfig(), now_ms=0, last_vacuum_ms=None)
        if a.kind == "compact"
    ]
    assert silver_only(read_current(table)).equals(expected(applied))


def test_a_merge_on_read_table_needs_one_key_column_of_strings_or_integers(tmp_path: Path) -> None:
    table = mor(tmp_path)
    with pytest.raises(ValueError, match="needs one key column"):
        replace(
            table,
            schema=table.schema.append(pa.field("region", pa.string())),
            spec=replace(table.spec, keys=("order_id", "region")),
        )
    as_float = table.schema.set(0, pa.field("order_id", pa.float64()))
    with pytest.raises(ValueError, match="strings or integers"):
        replace(table, schema=as_float)
