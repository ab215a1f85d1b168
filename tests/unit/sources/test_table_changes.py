"""Table-changes mode on real Delta tables: snapshot first, appends in order, Spark's rules for changes."""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sources.offsets import SourceOffset
from sources.options import DeltaSourceOptions
from sources.source_errors import DataChangeError, DeltaSourceError, OffsetMismatchError, StartingPointError
from sources.stream_reader import DeltaStreamReader
from tests.support.delta_source import append, batch, create, data_cols, drain, poll, reader_for


def test_snapshot_first_then_each_new_version_in_order(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1, 2, 3]))
    append(uri, batch([4]))
    reader = reader_for(uri)
    first = drain(reader)
    assert sorted(data_cols(first.rows)) == [(1, "1"), (2, "2"), (3, "3"), (4, "4")]
    # Snapshot rows carry the snapshot version (1) and its commit timestamp.
    assert {r[2] for r in first.rows} == {1}
    commit_ts = DeltaTable(str(uri)).history(1)[0]["timestamp"]
    assert {int(r[3].timestamp() * 1000) for r in first.rows} == {commit_ts}
    assert first.end == SourceOffset(2, table_id=first.end.table_id)

    v2 = append(uri, batch([5, 6], tag="b"))
    v3 = append(uri, batch([7], tag="c"))
    more = drain(reader, first.end)
    assert [(r[0], r[1], r[2]) for r in more.rows] == [(5, "b5", v2), (6, "b6", v2), (7, "c7", v3)]
    assert more.end is not None and more.end.version == v3 + 1 and more.end.index == 0


def test_output_schema_is_table_columns_then_metadata(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1]))
    reader = reader_for(uri)
    assert reader.output_schema.names == ["id", "v", "_commit_version", "_commit_timestamp"]
    assert reader.output_schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")
    assert reader_for(uri, mode="cdf").output_schema.names == [
        "id",
        "v",
        "_change_type",
        "_commit_version",
        "_commit_timestamp",
    ]


def test_optimize_emits_nothing_and_the_offset_moves_past_it(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1]))
    reader = reader_for(uri, starting_version=0)
    append(uri, batch([2]))
    append(uri, batch([3]))
    DeltaTable(str(uri)).optimize.compact()
    optimize_version = DeltaTable(str(uri)).version()
    out = drain(reader)
    assert data_cols(out.rows) == [(1, "1"), (2, "2"), (3, "3")]
    assert out.end is not None and out.end.version == optimize_version + 1
    v = append(uri, batch([4]))
    assert [(r[0], r[2]) for r in drain(reader, out.end).rows] == [(4, v)]


@pytest.mark.parametrize("op", ["merge", "update", "delete_rewrite", "overwrite"])
def test_commits_that_change_data_fail_by_default_naming_the_options(tmp_path, op):
    uri = tmp_path / "t"
    create(uri, batch([1, 2, 3]))
    table = DeltaTable(str(uri))
    if op == "merge":
        table.merge(
            batch([2], tag="x"), "t.id = s.id", source_alias="s", target_alias="t"
        ).when_matched_update_all().execute()
    elif op == "update":
        table.update({"v": "'u'"}, predicate="id = 1")
    elif op == "delete_rewrite":
        table.delete("id = 1")
    else:
        write_deltalake(str(uri), batch([9]), mode="overwrite")
    reader = reader_for(uri, starting_version=0)
    plan, rows = poll(reader, None)
    assert data_cols(rows) == [(1, "1"), (2, "2"), (3, "3")]
    with pytest.raises(DataChangeError) as err:
        poll(reader, plan.end)
    msg = str(err.value)
    assert err.value.version == 1
    for option in ("ignore_changes", "skip_change_commits", "mode='cdf'"):
        assert option in msg


def test_pure_deletes_fail_by_default_and_are_skipped_with_ignore_deletes(tmp_path):
    uri = tmp_path / "t"
    create(uri, pa.table({"id": pa.array([1, 2], pa.int64()), "p": ["a", "b"]}), partition_by=["p"])
    DeltaTable(str(uri)).delete("p = 'a'")  # removes the whole file of partition a: no rewrite
    append(uri, pa.table({"id": pa.array([3], pa.int64()), "p": ["c"]}))
    with pytest.raises(DataChangeError, match="ignore_deletes"):
        drain(reader_for(uri, starting_version=0))
    out = drain(reader_for(uri, starting_version=0, ignore_deletes=True))
    assert sorted(data_cols(out.rows)) == [(1, "a"), (2, "b"), (3, "c")]


def test_ignore_deletes_does_not_allow_rewrites(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1, 2]))
    DeltaTable(str(uri)).delete("id = 1")  # rewrites the file without row 1
    with pytest.raises(DataChangeError, match="updated or rewrote"):
        drain(reader_for(uri, starting_version=0, ignore_deletes=True))


def test_ignore_changes_re_emits_rewritten_files_with_duplicates(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1, 2, 3]))
    DeltaTable(str(uri)).update({"v": "'u'"}, predicate="id = 2")
    out = drain(reader_for(uri, starting_version=0, ignore_changes=True))
    assert sorted((r[0], r[1], r[2]) for r in out.rows) == [
        (1, "1", 0),
        (1, "1", 1),
        (2, "2", 0),
        (2, "u", 1),
        (3, "3", 0),
        (3, "3", 1),
    ]


def test_skip_change_commits_skips_the_whole_commit(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1, 2]))
    DeltaTable(str(uri)).merge(
        batch([2, 5], tag="m"), "t.id = s.id", source_alias="s", target_alias="t"
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    v = append(uri, batch([6]))
    out = drain(reader_for(uri, starting_version=0, skip_change_commits=True))
    assert [(r[0], r[1], r[2]) for r in out.rows] == [(1, "1", 0), (2, "2", 0), (6, "6", v)]


def test_max_files_per_trigger_splits_a_version_and_never_exceeds_the_limit(tmp_path):
    uri = tmp_path / "t"
    ids = list(range(10))
    create(
        uri, pa.table({"id": pa.array(ids, pa.int64()), "p": [f"p{i % 5}" for i in ids]}), partition_by=["p"]
    )
    append(uri, pa.table({"id": pa.array([10, 11], pa.int64()), "p": ["p0", "p1"]}), partition_by=["p"])
    reader = reader_for(uri, starting_version=0, max_files_per_trigger=2)
    out = drain(reader)
    files_per_poll = [p.num_files for p in out.plans]
    assert max(files_per_poll) == 2
    # Version 0 has 5 files: 2, 2, then its last file shares a poll with version 1's first.
    assert files_per_poll[:4] == [2, 2, 2, 1]
    # Each poll's rows come only from its (at most two) files (two rows per version-0 file).
    assert out.rows_per_plan[:4] == [4, 4, 3, 1]
    assert [(p.end.version, p.end.index) for p in out.plans[:4]] == [(0, 2), (0, 4), (1, 1), (2, 0)]
    assert sorted(r[0] for r in out.rows) == list(range(12))


def test_max_bytes_per_trigger_is_soft_and_admits_at_least_one_file(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1]))
    for i in range(2, 6):
        append(uri, batch([i]))
    out = drain(reader_for(uri, starting_version=0, max_bytes_per_trigger=1))
    assert [p.num_files for p in out.plans if p.has_data] == [1] * 5
    size = DeltaTable(str(uri)).get_add_actions(flatten=True)
    one_file = pa.table(size).column("size_bytes")[0].as_py()
    out2 = drain(reader_for(uri, starting_version=0, max_bytes_per_trigger=one_file + 1))
    assert [p.num_files for p in out2.plans if p.has_data] == [2, 2, 1]


@pytest.mark.parametrize("start", [None, 0], ids=["snapshot", "from-version-0"])
def test_restart_from_any_saved_offset_emits_exactly_the_rest(tmp_path, start):
    uri = tmp_path / "t"
    ids = list(range(12))
    create(
        uri, pa.table({"id": pa.array(ids, pa.int64()), "p": [f"p{i % 4}" for i in ids]}), partition_by=["p"]
    )
    for k in range(3):
        append(uri, pa.table({"id": pa.array([100 + k, 200 + k], pa.int64()), "p": ["p0", "p1"]}))
    full = drain(reader_for(uri, max_files_per_trigger=1, starting_version=start))
    offsets = [None] + [p.end for p in full.plans]
    bounds = [0, *itertools.accumulate(full.rows_per_plan)]
    for i, saved in enumerate(offsets):
        before = full.rows[: bounds[i]]
        # A fresh reader (a restarted task) resuming from the offset of "checkpoint i".
        rest = drain(reader_for(uri, max_files_per_trigger=1, starting_version=start), saved)
        assert before + rest.rows == full.rows, f"restart after poll {i}"
    assert len(full.rows) == 18 and len({r[0] for r in full.rows}) == 18


def test_starting_version_latest_and_beyond(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1]))
    append(uri, batch([2]))
    assert data_cols(drain(reader_for(uri, starting_version=1)).rows) == [(2, "2")]
    reader = reader_for(uri, starting_version="latest")
    empty = drain(reader)
    assert empty.rows == [] and empty.end is not None and empty.end.version == 2
    v = append(uri, batch([3]))
    assert [(r[0], r[2]) for r in drain(reader, empty.end).rows] == [(3, v)]
    with pytest.raises(StartingPointError, match="beyond the latest version 2"):
        drain(reader_for(uri, starting_version=5))


def test_starting_timestamp_picks_the_first_commit_at_or_after_it(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1]))
    append(uri, batch([2]))
    append(uri, batch([3]))
    history = {h["version"]: h["timestamp"] for h in DeltaTable(str(uri)).history()}

    def at(ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)

    exact = drain(reader_for(uri, starting_timestamp=at(history[1])))
    assert [r[0] for r in exact.rows] == [2, 3]
    early = drain(reader_for(uri, starting_timestamp=at(history[0] - 60_000)))
    assert [r[0] for r in early.rows] == [1, 2, 3]
    with pytest.raises(StartingPointError, match="after the latest commit"):
        drain(reader_for(uri, starting_timestamp=at(history[2] + 60_000)))


def test_typed_partition_values_are_restored_from_the_log(tmp_path):
    uri = tmp_path / "t"
    ts = dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=dt.timezone.utc)
    data = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "d": pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 2)]),
            "ts": pa.array([ts, ts], pa.timestamp("us", tz="UTC")),
            "n": pa.array([3, 4], pa.int32()),
            "dec": pa.array([Decimal("1.50"), None], pa.decimal128(10, 2)),
            "b": pa.array([True, False]),
            "s": pa.array(["a b/c", None]),
        }
    )
    create(
        uri,
        batch([0])
        .select(["id"])
        .append_column("d", pa.array([dt.date(2020, 1, 1)]))
        .append_column("ts", pa.array([ts], pa.timestamp("us", tz="UTC")))
        .append_column("n", pa.array([0], pa.int32()))
        .append_column("dec", pa.array([Decimal("0.00")], pa.decimal128(10, 2)))
        .append_column("b", pa.array([True]))
        .append_column("s", pa.array(["x"])),
        partition_by=["d", "ts", "n", "b", "s"],
    )
    append(uri, data, partition_by=["d", "ts", "n", "b", "s"])
    reader = reader_for(uri, starting_version=1)
    out = drain(reader).dicts(reader)
    got = sorted(
        ((r["id"], r["d"], r["ts"], r["n"], r["dec"], r["b"], r["s"]) for r in out), key=lambda x: x[0]
    )
    assert got == [
        (1, dt.date(2024, 1, 1), ts, 3, Decimal("1.50"), True, "a b/c"),
        (2, dt.date(2024, 1, 2), ts, 4, None, False, None),
    ]
    # Same values as deltalake's own reader gives for the table.
    expected = DeltaTable(str(uri)).to_pyarrow_table().to_pylist()
    assert sorted((e["id"], e["d"], e["n"], e["s"]) for e in expected if e["id"] > 0) == [
        (r[0], r[1], r[3], r[6]) for r in got
    ]


def test_offset_of_another_table_is_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    create(a, batch([1]))
    create(b, batch([1]))
    end = drain(reader_for(a)).end
    with pytest.raises(OffsetMismatchError, match="table id"):
        drain(reader_for(b), end)


def test_not_a_delta_table(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DeltaSourceError, match="not a Delta table"):
        DeltaStreamReader(str(tmp_path / "empty"), DeltaSourceOptions())


def test_backlog_counts_what_is_left(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1]))
    for i in range(2, 5):
        append(uri, batch([i, i + 100]))
    reader = reader_for(uri, starting_version=0, max_files_per_trigger=1)
    plan, _ = poll(reader, None)
    backlog = reader.planner.backlog(plan.end)
    assert (backlog.latest_version, backlog.versions_behind, backlog.files_outstanding) == (3, 3, 3)
    adds = pa.table(DeltaTable(str(uri)).get_add_actions(flatten=True)).to_pylist()
    assert backlog.bytes_outstanding == sum(a["size_bytes"] for a in adds if a["num_records"] == 2)
    report = reader.report(plan, rows=1, started=0.0, now=plan.files[0].commit_timestamp_ms / 1000 + 2.5)
    assert report.lag_ms == 2500
    assert report.backlog.files_outstanding == 3 and report.rows == 1


def test_versions_without_data_are_passed_over_a_bounded_number_per_poll(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1]))
    for i in range(5):  # v1..v5: metadata-only commits
        DeltaTable(str(uri)).alter.set_table_description(f"d{i}")
    v = append(uri, batch([2]))
    reader = reader_for(uri, starting_version=1, max_versions_per_poll=2)
    out = drain(reader)
    assert [(p.start.version, p.end.version, p.has_data) for p in out.plans] == [
        (1, 3, False),
        (3, 5, False),
        (5, 7, True),
        (7, 7, False),
    ]
    assert [(r[0], r[2]) for r in out.rows] == [(2, v)]
