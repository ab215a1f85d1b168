"""Change-data-feed mode on real tables: exact change rows per version, whole versions per poll."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sources.source_errors import ChangeDataFeedNotEnabledError
from tests.support.delta_source import append, batch, create, drain, poll, reader_for


def change_rows(rows):
    """(id, v, change_type, version) from CDF output rows (id, v, _change_type, _commit_version, ts)."""
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def build_history(uri):
    """Appends, a MERGE (update + insert), a DELETE (rewrite), an OPTIMIZE, one more append."""
    create(uri, batch([1, 2, 3]), cdf=True)  # v0
    append(uri, batch([4, 5]))  # v1
    DeltaTable(str(uri)).merge(
        batch([2, 6], tag="m"), "t.id = s.id", source_alias="s", target_alias="t"
    ).when_matched_update_all().when_not_matched_insert_all().execute()  # v2
    DeltaTable(str(uri)).delete("id = 1")  # v3
    DeltaTable(str(uri)).optimize.compact()  # v4
    append(uri, batch([7]))  # v5


EXPECTED_FROM_0 = sorted(
    [
        (1, "1", "insert", 0),
        (2, "2", "insert", 0),
        (3, "3", "insert", 0),
        (4, "4", "insert", 1),
        (5, "5", "insert", 1),
        (2, "2", "update_preimage", 2),
        (2, "m2", "update_postimage", 2),
        (6, "m6", "insert", 2),
        (1, "1", "delete", 3),
        (7, "7", "insert", 5),
    ]
)


def test_every_kind_of_change_comes_out_exactly_once_in_version_order(tmp_path):
    uri = tmp_path / "t"
    build_history(uri)
    out = drain(reader_for(uri, mode="cdf", starting_version=0))
    got = change_rows(out.rows)
    assert sorted(got) == EXPECTED_FROM_0
    assert [v for *_, v in got] == sorted(v for *_, v in got)  # versions never interleave
    commit_ts = {h["version"]: h["timestamp"] for h in DeltaTable(str(uri)).history()}
    assert all(int(r[4].timestamp() * 1000) == commit_ts[r[3]] for r in out.rows)


def test_same_history_in_table_changes_mode_with_ignore_changes(tmp_path):
    uri = tmp_path / "t"
    build_history(uri)
    out = drain(reader_for(uri, starting_version=0, ignore_changes=True))
    by_version: dict[int, list[int]] = {}
    for r in out.rows:
        by_version.setdefault(r[2], []).append(r[0])
    # MERGE and DELETE re-emit their rewritten files; the OPTIMIZE (v4) emits nothing.
    assert {v: sorted(ids) for v, ids in by_version.items()} == {
        0: [1, 2, 3],
        1: [4, 5],
        2: [1, 2, 3, 6],
        3: [2, 3, 6],
        5: [7],
    }


def test_initial_snapshot_in_cdf_mode_is_inserts_at_the_snapshot_version(tmp_path):
    uri = tmp_path / "t"
    build_history(uri)
    reader = reader_for(uri, mode="cdf")
    first = drain(reader)
    assert sorted(change_rows(first.rows)) == sorted(
        [(i, v, "insert", 5) for i, v in [(2, "m2"), (3, "3"), (4, "4"), (5, "5"), (6, "m6"), (7, "7")]]
    )
    DeltaTable(str(uri)).delete("id = 7")
    more = drain(reader, first.end)
    assert change_rows(more.rows) == [(7, "7", "delete", 6)]


def test_a_version_is_never_split_and_small_versions_share_a_poll(tmp_path):
    uri = tmp_path / "t"
    three = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "p": ["a", "b", "c"]})
    create(uri, three, cdf=True, partition_by=["p"])  # v0: 3 files
    append(uri, pa.table({"id": pa.array([4], pa.int64()), "p": ["a"]}))  # v1: 1 file
    append(uri, pa.table({"id": pa.array([5], pa.int64()), "p": ["b"]}))  # v2: 1 file
    append(uri, pa.table({"id": pa.array([6, 7, 8], pa.int64()), "p": ["a", "b", "c"]}))  # v3: 3 files
    out = drain(reader_for(uri, mode="cdf", starting_version=0, max_files_per_trigger=2))
    data = [p for p in out.plans if p.has_data]
    assert [p.versions for p in data] == [(0,), (1, 2), (3,)]
    assert [p.num_files for p in data] == [3, 2, 3]
    assert out.rows_per_plan[:3] == [3, 2, 3]
    assert sorted(r[0] for r in out.rows) == list(range(1, 9))


def test_versions_without_cdf_enabled_fail_clearly(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1]))  # v0: CDF off
    DeltaTable(str(uri)).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})  # v1
    append(uri, batch([2]))  # v2
    with pytest.raises(ChangeDataFeedNotEnabledError, match="version 0") as err:
        drain(reader_for(uri, mode="cdf", starting_version=0))
    assert "delta.enableChangeDataFeed" in str(err.value)
    assert change_rows(drain(reader_for(uri, mode="cdf", starting_version=1)).rows) == [(2, "2", "insert", 2)]


def test_rows_before_a_failing_version_are_emitted_first(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1]), cdf=True)  # v0
    append(uri, batch([2]))  # v1
    DeltaTable(str(uri)).alter.set_table_properties({"delta.enableChangeDataFeed": "false"})  # v2
    append(uri, batch([3]))  # v3: no change data
    reader = reader_for(uri, mode="cdf", starting_version=0)
    plan, rows = poll(reader, None)
    assert [r[0] for r in rows] == [1, 2]
    assert plan.end.version == 3
    with pytest.raises(ChangeDataFeedNotEnabledError, match="version 3"):
        poll(reader, plan.end)


def test_whole_file_deletes_are_delete_rows(tmp_path):
    uri = tmp_path / "t"
    create(uri, pa.table({"id": pa.array([1, 2], pa.int64()), "p": ["a", "b"]}), cdf=True, partition_by=["p"])
    DeltaTable(str(uri)).delete("p = 'a'")
    out = drain(reader_for(uri, mode="cdf", starting_version=1))
    assert change_rows(out.rows) == [(1, "a", "delete", 1)]
