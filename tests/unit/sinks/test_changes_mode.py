"""Merge-on-read silver: the changes mode of the writer, the fold and the read path, against the reference.

The reference is ``SILVER_MERGE.fold_rows`` (every event one by one in arrival order), which the
copy-on-write MERGE equals (``test_merge_mode``). The current table read from the snapshot and the
changes (Python read path and the SQL view in DataFusion) must equal it, and a copy-on-write table
written with the same checkpoints, after every checkpoint, across folds at random points, trims,
crashes of the writer and restores; so must the snapshot alone after a final fold.
"""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from lakestream.freshness import FRESHNESS_KEY
from lakestream.merge_on_read_rule import current_rows
from lakestream.silver import CHANGE_SEQ, SILVER_MERGE, SILVER_MOR_MERGE, SILVER_MOR_SCHEMA, SILVER_SCHEMA
from merge_on_read.fold_changes import fold_once, pending_changes, snapshot_freshness
from merge_on_read.key_ranges import KeyFile, disjoint, key_files
from merge_on_read.sorted_runs import CompactionPolicy
from merge_on_read.table import MergeOnReadTable, folded_through, query, read_current
from merge_on_read.table import view_sql as table_view_sql
from sinks.committer import CommitHooks
from sinks.table_spec import TableSpec
from tests.support.delta_tables import open_writer, snapshot_rows, txn_version
from tests.support.silver_rows import change as event
from tests.unit.sinks.test_merge_mode import FAST_RETRY, as_table, batch, random_events, silver_writer

KEYS = ["order_id"]


def mor(root: Path) -> MergeOnReadTable:
    return MergeOnReadTable(
        snapshot_uri=str(root / "orders"),
        changes_uri=str(root / "orders_changes"),
        schema=SILVER_MOR_SCHEMA,
        spec=SILVER_MOR_MERGE,
        seq=CHANGE_SEQ,
        event_time="last_event_time",
    )


def changes_writer(root: Path, restored: int | None, **kw: Any) -> Any:
    return open_writer(
        root / "orders_changes",
        restored=restored,
        schema=SILVER_SCHEMA,
        mode="changes",
        merge=SILVER_MERGE,
        sequence_column=CHANGE_SEQ,
        retry=FAST_RETRY,
        **kw,
    )


def expected(rows: list[dict[str, Any]]) -> pa.Table:
    return as_table(SILVER_MERGE.fold_rows(rows, SILVER_SCHEMA), SILVER_SCHEMA, KEYS)


def silver_only(table: pa.Table) -> pa.Table:
    return table.select(SILVER_SCHEMA.names).cast(SILVER_SCHEMA).sort_by([("order_id", "ascending")])


def assert_current(root: Path, applied: list[dict[str, Any]]) -> None:
    table = mor(root)
    want = expected(applied)
    assert silver_only(read_current(table)).equals(want)
    tables = {"changes": DeltaTable(table.changes_uri)}
    try:
        tables["snapshot"] = DeltaTable(table.snapshot_uri)
        sql = table_view_sql(table)
    except Exception:  # no snapshot yet: the view over the changes and an empty snapshot
        sql = table_view_sql(table, snapshot="(SELECT * FROM changes WHERE 1 = 0)")
    viewed = pa.Table.from_pylist(query(tables, sql).to_pylist(), schema=SILVER_MOR_SCHEMA)
    assert silver_only(viewed).equals(want)


def test_changes_mode_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="sequence_column"):
        TableSpec(table_uri="x", schema=SILVER_SCHEMA, mode="changes", merge=SILVER_MERGE)
    with pytest.raises(ValueError, match="sequence_column"):
        TableSpec(table_uri="x", schema=SILVER_SCHEMA, mode="merge", merge=SILVER_MERGE, sequence_column="s")
    with pytest.raises(ValueError, match="leave it out"):
        TableSpec(
            table_uri="x",
            schema=SILVER_MOR_SCHEMA,
            mode="changes",
            merge=SILVER_MERGE,
            sequence_column=CHANGE_SEQ,
        )
    with pytest.raises(ValueError, match="unpartitioned"):
        TableSpec(
            table_uri="x",
            schema=SILVER_SCHEMA,
            mode="changes",
            merge=SILVER_MERGE,
            sequence_column=CHANGE_SEQ,
            partition_by=["status"],
        )
    with pytest.raises(ValueError, match="greatest column"):
        MergeOnReadTable(
            snapshot_uri="a", changes_uri="b", schema=SILVER_MOR_SCHEMA, spec=SILVER_MERGE, seq="x"
        )


def test_each_commit_is_one_file_of_folded_rows_stamped_with_its_version(tmp_path: Path) -> None:
    w = changes_writer(tmp_path, None)
    rows = [
        event("o1", "e1", 1, status="a"),
        event("o1", "e2", 2, status="b"),
        event("o2", "e3", 1, status="z"),
    ]
    w.write(batch(rows))
    w.prepare(1)
    w.commit(1)
    dt = DeltaTable(str(tmp_path / "orders_changes"))
    data = dt.to_pyarrow_table().sort_by("order_id")
    assert data.column("order_id").to_pylist() == ["o1", "o2"]  # folded per key
    assert data.column("status").to_pylist() == ["b", "z"]
    assert set(data.column(CHANGE_SEQ).to_pylist()) == {dt.version()}
    assert len(dt.file_uris()) == 1
    assert txn_version(tmp_path / "orders_changes", "job:run-1:0") == 1


def test_a_tie_in_event_time_goes_to_the_later_commit_across_a_fold(tmp_path: Path) -> None:
    w = changes_writer(tmp_path, None)
    w.write(batch([event("o1", "e1", 5, status="first")]))
    w.prepare(1)
    w.commit(1)
    fold_once(mor(tmp_path), retention=timedelta(0))  # the snapshot holds "first"; its change is trimmed
    w.write(batch([event("o1", "e2", 5, status="second")]))  # same event time, arrives later
    w.prepare(2)
    w.commit(2)
    applied = [event("o1", "e1", 5, status="first"), event("o1", "e2", 5, status="second")]
    assert_current(tmp_path, applied)
    fold_once(mor(tmp_path), retention=timedelta(hours=1))  # nothing trimmed: both folded rows stay
    assert_current(tmp_path, applied)
    assert silver_only(DeltaTable(mor(tmp_path).snapshot_uri).to_pyarrow_table()).equals(expected(applied))


#: How the folds run: cell by cell with small files (many cells), with the default file size (one
#: cell), and by MERGE (no cell may be rewritten).
FOLDS: dict[str, dict[str, Any]] = {
    "small-files": {"file_rows": 7},
    "default": {},
    "merge-every-fold": {"policy": CompactionPolicy(max_runs=1)},
    "tall": {
        "policy": CompactionPolicy(max_size_amplification_percent=10**6, size_ratio_percent=0, max_runs=50)
    },
}


@pytest.mark.parametrize("fold", FOLDS)
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_read_path_equals_copy_on_write_across_folds_trims_and_crashes(
    tmp_path: Path, seed: int, fold: str
) -> None:
    rng = random.Random(seed)
    how: dict[str, Any] = FOLDS[fold]
    table = mor(tmp_path)
    w = changes_writer(tmp_path, None)
    cow = silver_writer(tmp_path / "cow", None)  # the same checkpoints, copy-on-write
    applied: list[dict[str, Any]] = []
    committed = 0
    for n in range(1, 9):
        rows = random_events(rng, 10, 100 * n)
        cow.write(batch(rows))
        cow.prepare(n)
        cow.commit(n)
        w.write(batch(rows))
        w.prepare(n)
        if rng.random() < 0.25:
            # Killed after checkpoint n completed, before its COMMIT: the restore commits it.
            del w
            w = changes_writer(tmp_path, n)
        elif rng.random() < 0.15:
            # Killed before checkpoint n completed: its rows are replayed after the restore.
            del w
            w = changes_writer(tmp_path, committed)
            w.write(batch(rows))
            w.prepare(n)
            w.commit(n)
        else:
            w.commit(n)
        committed = n
        applied += rows
        if rng.random() < 0.5:
            retention = timedelta(0) if rng.random() < 0.5 else timedelta(hours=1)
            done = fold_once(table, retention=retention, **how)
            if fold == "merge-every-fold":
                assert done.runs == 1
        assert_current(tmp_path, applied)
        assert silver_only(read_current(table)).equals(snapshot_rows(tmp_path / "cow", SILVER_SCHEMA, KEYS))
    result = fold_once(table, retention=timedelta(0), full=True, **how)
    assert pending_changes(table) == (0, 0)
    snapshot = DeltaTable(table.snapshot_uri)
    # After a full merge the snapshot alone is the table: one sorted run, files with apart key ranges.
    assert silver_only(snapshot.to_pyarrow_table()).equals(expected(applied))
    assert result.runs == 1 and disjoint(snapshot_files(snapshot))
    if fold == "small-files":
        assert max(f.rows for f in snapshot_files(snapshot)) <= 7
    assert folded_through(snapshot) == result.folded_through
    assert snapshot_freshness(snapshot)["folded_through"] == result.folded_through


def snapshot_files(snapshot: DeltaTable) -> list[KeyFile]:
    files = key_files(pa.table(snapshot.get_add_actions(flatten=True)), "order_id")
    assert isinstance(files, list)
    return files


def test_a_fold_that_finds_nothing_new_commits_nothing(tmp_path: Path) -> None:
    w = changes_writer(tmp_path, None)
    w.write(batch([event("o1", "e1", 1, status="a")]))
    w.prepare(1)
    w.commit(1)
    first = fold_once(mor(tmp_path))
    again = fold_once(mor(tmp_path))
    assert first.change_rows == 1 and again.change_rows == 0
    assert again.snapshot_version == first.snapshot_version
    history = DeltaTable(mor(tmp_path).snapshot_uri).history()
    assert [FRESHNESS_KEY in h for h in history].count(True) == 1
    freshness = snapshot_freshness(DeltaTable(mor(tmp_path).snapshot_uri))
    assert freshness["newest_event_time"] == "2024-05-01T12:00:01Z"


def test_pending_changes_counts_rows_above_the_fold_point(tmp_path: Path) -> None:
    w = changes_writer(tmp_path, None)
    for n in (1, 2):
        w.write(batch([event(f"o{n}", f"e{n}", n, status="a"), event("o9", f"x{n}", n, status="b")]))
        w.prepare(n)
        w.commit(n)
    assert pending_changes(mor(tmp_path)) == (4, 2)
    fold_once(mor(tmp_path), retention=timedelta(hours=1))
    assert pending_changes(mor(tmp_path)) == (0, 0)


names = st.sampled_from(["p", "q", None])
secs = st.integers(0, 3)
commits = st.lists(
    st.lists(st.tuples(st.sampled_from(["o1", "o2"]), names, names, secs), min_size=1, max_size=4),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60)
@given(commits, st.integers(0, 6))
def test_current_rows_and_the_view_equal_the_fold_for_any_fold_point(
    batches: list[list[tuple[str, str | None, str | None, int]]], fold_at: int
) -> None:
    """In memory: snapshot = fold of the first ``fold_at`` commits, plus every commit's change rows."""
    applied: list[dict[str, Any]] = []
    change_tables = []
    for seq, rows in enumerate(batches):
        events = [
            event(o, f"e{seq}-{i}", s, status=a, address=b)
            for i, (o, a, b, s) in enumerate(rows)
            if a is not None or b is not None
        ]
        applied += events
        folded = SILVER_MERGE.fold_rows(events, SILVER_SCHEMA)
        t = pa.Table.from_pylist(list(folded.values()), schema=SILVER_SCHEMA)
        change_tables.append(t.append_column(CHANGE_SEQ, pa.array([seq] * t.num_rows, pa.int64())))
    upto = min(fold_at, len(change_tables))
    snapshot = SILVER_MOR_SCHEMA.empty_table()
    for t in change_tables[:upto]:
        snapshot = current_rows(snapshot, t, SILVER_MOR_MERGE, CHANGE_SEQ)
    changes = pa.concat_tables(change_tables) if change_tables else SILVER_MOR_SCHEMA.empty_table()
    # All changes (some at or below the snapshot's sequences: every row sorted) and those above its
    # fold point (only the changes sorted), each in commit order and reversed.
    for kept in (changes, changes.filter(pa.compute.greater_equal(changes[CHANGE_SEQ], upto))):
        for rows in (kept, kept.take(pa.array(range(kept.num_rows - 1, -1, -1), pa.int64()))):
            got = current_rows(snapshot, rows, SILVER_MOR_MERGE, CHANGE_SEQ)
            assert silver_only(got).equals(expected(applied))


def test_a_row_folded_before_sequences_loses_a_time_tie_to_any_change(tmp_path: Path) -> None:
    """A copy-on-write row switched to merge-on-read has a null ``change_seq``: the lowest."""
    old = {**event("o1", "e1", 5, status="before"), CHANGE_SEQ: None}
    new = {**event("o1", "e2", 5, status="after"), CHANGE_SEQ: 0}
    snapshot = pa.Table.from_pylist([old], schema=SILVER_MOR_SCHEMA)
    changes = pa.Table.from_pylist([new], schema=SILVER_MOR_SCHEMA)
    got = current_rows(snapshot, changes, SILVER_MOR_MERGE, CHANGE_SEQ)
    assert got.column("status").to_pylist() == ["after"]
    assert got.column(CHANGE_SEQ).to_pylist() == [0]
    write_deltalake(str(tmp_path / "orders"), snapshot)
    write_deltalake(str(tmp_path / "orders_changes"), changes)
    tables = {
        "snapshot": DeltaTable(str(tmp_path / "orders")),
        "changes": DeltaTable(str(tmp_path / "orders_changes")),
    }
    viewed = query(tables, table_view_sql(mor(tmp_path))).to_pylist()
    assert [(r["status"], r[CHANGE_SEQ]) for r in viewed] == [("after", 0)]


class CommitBeforeUs(CommitHooks):
    """Another commit takes the version ours planned, between our snapshot and our commit."""

    def __init__(self, other: Path) -> None:
        self.other = other

    def before_attempt(self, attempt: int, snapshot: DeltaTable) -> None:
        if attempt == 0:
            w = changes_writer(self.other.parent, None, app_prefix="other")
            w.write(batch([event("o9", "x1", 1, status="other")]))
            w.prepare(1)
            w.commit(1)


def test_a_commit_lands_at_the_version_it_is_stamped_with(tmp_path: Path) -> None:
    w = changes_writer(tmp_path, None)
    w.write(batch([event("o1", "e1", 1, status="a")]))
    w.prepare(1)
    w.commit(1)
    w2 = changes_writer(tmp_path, 1, commit_hooks=CommitBeforeUs(tmp_path / "orders_changes"))
    w2.write(batch([event("o1", "e2", 2, status="b")]))
    w2.prepare(2)
    assert w2.commit(2).retries == 1  # re-planned once: the other commit took its version
    changes = str(tmp_path / "orders_changes")
    rows = DeltaTable(changes).to_pyarrow_table().to_pylist()
    assert sorted(r[CHANGE_SEQ] for r in rows) == [1, 2, 3]
    for r in rows:  # each row appears exactly at the version it is stamped with
        assert r["order_id"] in {
            x["order_id"] for x in DeltaTable(changes, version=r[CHANGE_SEQ]).to_pyarrow_table().to_pylist()
        }
        before = DeltaTable(changes, version=r[CHANGE_SEQ] - 1).to_pyarrow_table().to_pylist()
        assert r[CHANGE_SEQ] not in {x[CHANGE_SEQ] for x in before}
    assert sorted(p.name for p in Path(changes).glob("*.parquet")) == sorted(
        Path(u).name for u in DeltaTable(changes).file_uris()
    )  # the failed attempt's file is gone
