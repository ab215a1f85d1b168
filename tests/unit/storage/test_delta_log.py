"""Reading commits from ``_delta_log``: a commit's summary, and following a real table version by version."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from storage.delta_log import (
    END_OF_INPUT,
    AppVersions,
    Commit,
    CommitSummary,
    DeltaLog,
    DeltaLogError,
    TableLog,
    checkpoints_committed,
    commit_file,
    commit_ms,
    counter_totals,
    parse_commit,
    summarize,
)
from tests.support.delta_tables import table_at, table_options


def _lines(*actions: dict[str, object]) -> list[str]:
    return [json.dumps(a) for a in actions]


def _summary(version: int, lines: list[str]) -> CommitSummary:
    return summarize(parse_commit(version, "\n".join(lines), details=True))


def test_parse_commit_reads_rows_files_txn_counters_and_ingest_range() -> None:
    stats = {
        "numRecords": 3,
        "minValues": {"ingest_time": "2026-12-01T13:25:40.921Z"},
        "maxValues": {"ingest_time": "2026-12-01T13:25:41.000Z"},
    }
    commit = _summary(
        4,
        _lines(
            {
                "commitInfo": {
                    "timestamp": 1_796_131_541_483,
                    "operation": "WRITE",
                    "lakestream.counters": {"events_late": 2, "events_duplicate": 5},
                    "operationMetrics": {"execution_time_ms": 12},
                }
            },
            {"add": {"path": "a.parquet", "size": 1, "stats": json.dumps(stats)}},
            {"add": {"path": "b.parquet", "size": 1, "stats": json.dumps({"numRecords": 4})}},
            {"remove": {"path": "old.parquet"}},
            {"txn": {"appId": "app:run:0", "version": 7}},
            {"txn": {"appId": "app:run:1", "version": 6}},
        )
        + [""],
    )
    assert commit.version == 4
    assert commit.timestamp_ms == 1_796_131_541_483
    assert commit.operation == "WRITE"
    assert (commit.rows_added, commit.files_added, commit.files_removed) == (7, 2, 1)
    assert commit.removed == ("old.parquet",)
    assert commit.txn == {"app:run:0": 7, "app:run:1": 6}
    assert commit.checkpoint == 7 and commit.is_checkpoint
    assert commit.counters == {"events_late": 2, "events_duplicate": 5}
    assert commit.metrics == {"execution_time_ms": 12}
    assert commit.ingest_min_ms == 1_796_131_540_921
    assert commit.ingest_max_ms == 1_796_131_541_000


def test_an_add_without_stats_has_unknown_rows() -> None:
    commit = _summary(0, _lines({"add": {"path": "x.parquet", "size": 1}}))
    assert commit.added == {"x.parquet": None}
    assert commit.rows_added == 0
    assert not commit.is_checkpoint and commit.checkpoint is None


def test_progress_values_recorded_as_txn_actions_are_not_checkpoints() -> None:
    commit = _summary(
        3,
        _lines(
            {"txn": {"appId": "ingest/t:run:0", "version": 2}},
            {"txn": {"appId": "ingest/t:progress:kafka/orders/1", "version": 95}},
            {"txn": {"appId": "ingest/t:progress:watermark/orders/1", "version": 1_717_224_650_000}},
        ),
    )
    assert commit.txn == {"ingest/t:run:0": 2} and commit.checkpoint == 2
    assert checkpoints_committed([commit]) == {2}


def test_totals_over_commits() -> None:
    late_1 = {"lakestream.counters": {"events_late": 1}}
    late_2 = {"lakestream.counters": {"events_late": 2, "silver_changes": 4}}
    a = _summary(1, _lines({"commitInfo": late_1}, {"txn": {"appId": "x", "version": 3}}))
    b = _summary(2, _lines({"commitInfo": late_2}, {"txn": {"appId": "x", "version": END_OF_INPUT}}))
    assert counter_totals([a, b]) == {"events_late": 3, "silver_changes": 4}
    assert checkpoints_committed([a, b]) == {3, END_OF_INPUT}


def _ints(n: int, start: int = 0) -> pa.Table:
    return pa.table({"n": pa.array(range(start, start + n), pa.int64())})


def test_table_log_follows_a_real_table_incrementally(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    log = TableLog(tmp_path / "t")
    assert not log.exists and log.version is None and log.poll() == []

    write_deltalake(uri, _ints(3))
    write_deltalake(
        uri,
        _ints(4, 3),
        mode="append",
        commit_properties=CommitProperties(
            app_transactions=[Transaction("app:run:0", 1)],
            custom_metadata={"lakestream.counters": {"events_late": 2}},
        ),
    )
    new = log.poll()
    assert [c.version for c in new] == [0, 1]
    assert log.exists and log.version == 1 and log.rows == 7 and log.live_files == 2
    assert new[1].txn == {"app:run:0": 1} and new[1].counters == {"events_late": 2}
    assert log.poll() == []  # nothing new

    # An overwrite removes the old files: the live row count follows the removes.
    write_deltalake(uri, _ints(2, 100), mode="overwrite")
    assert [c.version for c in log.poll()] == [2]
    assert log.rows == 2 == DeltaTable(uri).to_pyarrow_table().num_rows
    assert log.live_files == 1


def test_a_broken_commit_file_names_itself(tmp_path: Path) -> None:
    (tmp_path / "t" / "_delta_log").mkdir(parents=True)
    bad = tmp_path / "t" / "_delta_log" / f"{0:020d}.json"
    bad.write_text("{not json\n")
    with pytest.raises(DeltaLogError, match="00000000000000000000.json"):
        TableLog(tmp_path / "t").poll()


def test_details_are_kept_only_when_asked_for(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_deltalake(
        uri,
        _ints(2),
        commit_properties=CommitProperties(
            app_transactions=[Transaction("app:run:0", 3)], custom_metadata={"lakestream.counters": {"x": 1}}
        ),
    )
    plain = DeltaLog(uri).read_commit(0)
    detailed = DeltaLog(uri, details=True).read_commit(0)
    assert plain is not None and detailed is not None
    assert plain.txn == detailed.txn == {"app:run:0": 3}
    assert plain.info == {} and all(a.stats is None for a in plain.adds)
    assert detailed.info["lakestream.counters"] == {"x": 1}
    assert [json.loads(a.stats or "{}")["numRecords"] for a in detailed.adds] == [2]
    assert plain.timestamp_ms == detailed.timestamp_ms == commit_ms(uri, 0)
    assert commit_ms(uri, 1) is None and DeltaLog(uri).has_commit(0) and not DeltaLog(uri).has_commit(1)


def test_every_reader_of_a_broken_commit_file_is_told_which(tmp_path: Path) -> None:
    write_deltalake(str(tmp_path / "t"), _ints(1))
    (tmp_path / "t" / "_delta_log" / f"{1:020d}.json").write_text('{"add": {}}\n')
    with pytest.raises(DeltaLogError, match="00000000000000000001.json: not a Delta commit file"):
        DeltaLog(str(tmp_path / "t")).read_commit(1)


class CountingLog(DeltaLog):
    """A real log reader that remembers which commit versions it was asked to read."""

    def __init__(self, table_uri: str, options: dict[str, str] | None) -> None:
        super().__init__(table_uri, storage_options=options, cache_size=0)
        self.read: list[int] = []

    def read_commit(self, version: int) -> Commit | None:
        self.read.append(version)
        return super().read_commit(version)


def commit_txn(uri: str, options: dict[str, str] | None, **apps: int) -> None:
    """One append commit carrying a txn action per ``app=version``."""
    write_deltalake(
        uri,
        pa.table({"a": [1]}),
        mode="append",
        storage_options=options,
        commit_properties=CommitProperties(app_transactions=[Transaction(a, v) for a, v in apps.items()]),
    )


def test_app_versions_follow_the_log_reading_only_new_commits(any_lakehouse: Path) -> None:
    uri, options = table_at(any_lakehouse, "t"), table_options(any_lakehouse)
    for v in range(1, 6):
        commit_txn(uri, options, a=v, b=10 * v)
    dt = DeltaTable(uri, storage_options=options)
    log = CountingLog(uri, options)
    versions = AppVersions(log)
    assert (versions.of(dt, "a"), versions.of(dt, "b"), versions.of(dt, "c")) == (5, 50, None)
    assert log.read == []  # first answers come from deltalake

    # Another writer commits (c appears, a moves, b does not): only the two new commits are read.
    commit_txn(uri, options, c=7)
    commit_txn(uri, options, a=6)
    dt.update_incremental()
    assert [versions.of(dt, app) for app in ("a", "b", "c")] == [6, 50, 7]
    assert log.read == [5, 6]
    assert [versions.of(dt, app) for app in ("a", "b", "c")] == [6, 50, 7] and log.read == [5, 6]

    # An older snapshot (time travel) is answered from deltalake, not from what was read later.
    old = DeltaTable(uri, version=3, storage_options=options)
    assert (versions.of(old, "a"), versions.of(old, "c")) == (4, None)  # version 3: the fourth commit


def test_app_versions_start_over_when_a_commit_is_gone(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    commit_txn(uri, None, a=1)
    dt = DeltaTable(uri)
    versions = AppVersions(CountingLog(uri, None))
    assert versions.of(dt, "a") == 1
    commit_txn(uri, None, a=2)  # version 1: the commit that will be gone
    commit_txn(uri, None, b=5)
    dt.update_incremental()
    dt.create_checkpoint()
    (tmp_path / "t" / commit_file(1)).unlink()  # as log cleanup past retention does
    assert versions.of(DeltaTable(uri), "a") == 2


def test_app_versions_lists_every_txn_across_a_log_checkpoint_and_cleaned_up_commits(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for i in range(6):
        txn = Transaction(app_id=f"app{i % 3}", version=10 + i)
        write_deltalake(
            uri,
            pa.table({"a": [i]}),
            mode="append",
            commit_properties=CommitProperties(app_transactions=[txn]),
        )
    DeltaTable(uri).create_checkpoint()
    txn = Transaction(app_id="app0", version=99)
    write_deltalake(
        uri, pa.table({"a": [9]}), mode="append", commit_properties=CommitProperties(app_transactions=[txn])
    )
    for v in range(5):  # commits a log cleanup removes once a checkpoint covers them
        (tmp_path / "t" / "_delta_log" / f"{v:020d}.json").unlink()
    log = DeltaLog(uri)
    assert log.app_versions() == {"app0": 99, "app1": 14, "app2": 15}
    assert log.app_versions(5) == {"app0": 13, "app1": 14, "app2": 15}
    with pytest.raises(DeltaLogError, match="commit 0 is missing"):
        log.app_versions(3)
    assert DeltaLog(str(tmp_path / "none")).app_versions() == {}


def test_first_txn_commit_finds_the_commit_that_reached_a_value(tmp_path: Path) -> None:
    """Two writers record a growing value; the first commit whose txn reaches one is found, whatever
    commits without it (a compaction) come between, and none before ``after_ms`` or past ``at_most``."""
    uri = str(tmp_path / "t")
    apps = ("job/t:progress:kafka/a/0", "job/t:progress:kafka/b/0")
    for i in range(8):
        app = apps[i % 2]
        props = CommitProperties(app_transactions=[Transaction(app, 10 * (i + 1))])
        write_deltalake(uri, pa.table({"x": [i]}), mode="append", commit_properties=props)
        if i == 3:
            DeltaTable(uri).optimize.compact()  # version 4: no txn
    log = DeltaLog(uri)

    def passed(app: str, offset: int) -> Callable[[Mapping[str, int]], bool]:
        return lambda txn: any(a == app and v > offset for a, v in txn.items())

    # a: 10 (v0), 30 (v2), 50 (v5), 70 (v7); b: 20 (v1), 40 (v3), 60 (v6), 80 (v8)
    assert log.first_txn_commit(passed(apps[0], 29), after_ms=0, at_most=8) == 2
    assert log.first_txn_commit(passed(apps[0], 30), after_ms=0, at_most=8) == 5
    assert log.first_txn_commit(passed(apps[1], 55), after_ms=0, at_most=8) == 6
    assert log.first_txn_commit(passed(apps[1], 80), after_ms=0, at_most=8) is None
    assert log.first_txn_commit(passed(apps[0], 50), after_ms=0, at_most=6) is None
    last = log.read_commit(8)
    assert last is not None
    assert log.first_txn_commit(passed(apps[0], 0), after_ms=last.timestamp_ms + 1, at_most=8) is None


def test_txn_before_walks_back_to_each_apps_previous_commit_and_replays_past_cleaned_up_commits(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "t")
    # app0 at v0, v3, v6; app1 at v1, v4; app2 at v2, v5; v7 a compaction (no txn); app0 again at v8
    for i in range(7):
        props = CommitProperties(app_transactions=[Transaction(app_id=f"app{i % 3}", version=10 + i)])
        write_deltalake(uri, pa.table({"a": [i]}), mode="append", commit_properties=props)
    DeltaTable(uri).optimize.compact()
    props = CommitProperties(app_transactions=[Transaction(app_id="app0", version=99)])
    write_deltalake(uri, pa.table({"a": [9]}), mode="append", commit_properties=props)
    log = DeltaLog(uri)
    assert log.txn_before(9, ["app0", "app1"]) == {"app0": 99, "app1": 14}
    assert log.txn_before(8, ["app0", "app1", "app2"]) == {"app0": 16, "app1": 14, "app2": 15}
    assert log.txn_before(3, ["app0", "app2"]) == {"app0": 10, "app2": 12}
    assert log.txn_before(1, ["app1"]) == {}  # none before its first commit
    assert log.txn_before(0, ["app0"]) == {}

    DeltaTable(uri).create_checkpoint()  # at v8
    for v in range(6):  # a log cleanup: the walk back from v8 meets a gap and the checkpoint answers
        (tmp_path / "t" / "_delta_log" / f"{v:020d}.json").unlink()
    assert DeltaLog(uri).txn_before(9, ["app1", "app2"]) == {"app1": 14, "app2": 15}
