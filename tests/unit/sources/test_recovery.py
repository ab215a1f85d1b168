"""Data loss (VACUUM, log retention), schema changes and event-time ordering of the initial snapshot."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from sources.offsets import SourceOffset
from sources.options import DeltaSourceOptions
from sources.source_errors import DataLossError, SchemaChangeError, SourceOptionsError
from sources.stream_reader import DeltaStreamReader
from tests.support.delta_source import append, batch, create, drain, poll, reader_for


def vacuum_everything_removed(uri: Path) -> list[str]:
    return DeltaTable(str(uri)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)


@pytest.mark.parametrize("mode", ["table_changes", "cdf"])
def test_vacuumed_files_fail_with_the_version_and_retention_settings(tmp_path, mode):
    uri = tmp_path / "t"
    create(uri, batch([1]), cdf=True)
    reader = reader_for(uri, mode=mode)
    caught_up = drain(reader).end  # snapshot of v0 emitted: next is version 1
    append(uri, batch([2]))  # v1
    append(uri, batch([3]))  # v2
    DeltaTable(str(uri)).optimize.compact()  # v3 removes the files of v0..v2 (dataChange=false)
    assert vacuum_everything_removed(uri)
    with pytest.raises(DataLossError) as err:
        drain(reader_for(uri, mode=mode), caught_up)
    msg = str(err.value)
    assert err.value.version == 1
    assert "version 1" in msg and "VACUUM" in msg
    assert "delta.deletedFileRetentionDuration" in msg and "fail_on_data_loss=False" in msg

    lossy = reader_for(uri, mode=mode, fail_on_data_loss=False)
    out = drain(lossy, caught_up)
    assert out.rows == []
    assert sum(len(p.skipped_files) for p in out.plans) == 2
    if mode == "cdf":
        assert [v for p in out.plans for v in p.skipped_versions] == [1, 2]
    v = append(uri, batch([4]))
    assert [(r[0], r[-2]) for r in drain(lossy, out.end).rows] == [(4, v)]


def test_log_gap_fails_with_the_missing_version_and_can_skip_it(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([0]), configuration={"delta.logRetentionDuration": "interval 0 seconds"})
    reader = reader_for(uri, starting_version=0)
    caught_up = drain(reader).end
    assert caught_up is not None and caught_up.version == 1
    for i in range(1, 5):
        append(uri, batch([i]))  # v1..v4
    DeltaTable(str(uri)).create_checkpoint()
    DeltaTable(str(uri)).cleanup_metadata()
    v5 = append(uri, batch([5]))
    log_dir = uri / "_delta_log"
    remaining = sorted(int(p.name[:20]) for p in log_dir.glob("*.json"))
    assert remaining[0] > 1, f"precondition: log retention removed version 1's commit, have {remaining}"
    oldest = remaining[0]

    with pytest.raises(DataLossError) as err:
        drain(reader_for(uri, starting_version=0), caught_up)
    msg = str(err.value)
    assert err.value.version == 1 and err.value.oldest_available == oldest
    assert "version 1" in msg and "delta.logRetentionDuration" in msg and "interval 0 seconds" in msg

    out = drain(reader_for(uri, starting_version=0, fail_on_data_loss=False), caught_up)
    skipped = [v for p in out.plans for v in p.skipped_versions]
    assert skipped == list(range(1, oldest))
    assert sorted(r[0] for r in out.rows) == list(range(oldest, v5 + 1))


def test_additive_column_after_start_fails_and_names_the_restart(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1]))
    reader = reader_for(uri, starting_version=0, schema_changes="additive")  # reads with (id, v)
    wider = pa.table({"id": pa.array([2], pa.int64()), "v": ["2"], "x": pa.array([1.5])})
    write_deltalake(str(uri), wider, mode="append", schema_mode="merge")  # v1 adds x
    plan, rows = poll(reader, None)
    assert [r[0] for r in rows] == [1]  # version 0 still comes out
    with pytest.raises(SchemaChangeError, match="version 1.*new column.*x.*restart the job"):
        poll(reader, plan.end)


def test_older_versions_read_with_nulls_only_when_additive(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1]))
    wider = pa.table({"id": pa.array([2], pa.int64()), "v": ["2"], "x": pa.array([1.5])})
    write_deltalake(str(uri), wider, mode="append", schema_mode="merge")
    with pytest.raises(SchemaChangeError, match="schema_changes='additive'"):
        drain(reader_for(uri, starting_version=0))
    reader = reader_for(uri, starting_version=0, schema_changes="additive")
    assert reader.output_schema.names[:3] == ["id", "v", "x"]
    assert [r[:3] for r in drain(reader).rows] == [(1, "1", None), (2, "2", 1.5)]


def test_type_change_is_never_followed(tmp_path):
    uri = tmp_path / "t"
    create(uri, batch([1]))
    reader = reader_for(uri, starting_version=0, schema_changes="additive", ignore_changes=True)
    other = pa.table({"id": pa.array(["a"]), "v": ["x"]})
    write_deltalake(str(uri), other, mode="overwrite", schema_mode="overwrite")
    plan, _ = poll(reader, None)
    with pytest.raises(SchemaChangeError, match="changed type.*not additive"):
        poll(reader, plan.end)


def _events(uri: Path, ids: list[int], minutes: list[int], *, first: bool = False) -> None:
    base = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    data = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([base + dt.timedelta(minutes=m) for m in minutes], pa.timestamp("us", tz="UTC")),
        }
    )
    if first:
        create(uri, data)
    else:
        append(uri, data)


def test_event_time_order_emits_the_snapshot_oldest_first_with_overlaps_together(tmp_path):
    uri = tmp_path / "t"
    _events(uri, [1, 2], [60, 65], first=True)  # file A: 01:00-01:05 (written first)
    _events(uri, [3, 4], [0, 10])  # file B: 00:00-00:10
    _events(uri, [5, 6], [5, 20])  # file C: 00:05-00:20, overlaps B
    _events(uri, [7], [120])  # file D
    ordered = DeltaStreamReader(str(uri), DeltaSourceOptions(event_time_order="ts", max_files_per_trigger=1))
    out = drain(ordered)
    data = [p for p in out.plans if p.has_data]
    assert [p.num_files for p in data] == [2, 1, 1]  # B+C overlap: one indivisible group
    ts = [r[1] for r in out.rows]
    assert ts == sorted(ts)
    assert [r[0] for r in out.rows] == [3, 5, 4, 6, 1, 2, 7]

    plain = drain(reader_for(uri, max_files_per_trigger=1))
    assert [r[0] for r in plain.rows][:2] == [1, 2]  # modification-time order: not event order


def test_changing_event_time_order_mid_snapshot_is_refused(tmp_path):
    uri = tmp_path / "t"
    _events(uri, [1], [1], first=True)
    _events(uri, [2], [2])
    reader = DeltaStreamReader(str(uri), DeltaSourceOptions(event_time_order="ts", max_files_per_trigger=1))
    plan, _ = poll(reader, None)
    assert plan.end.in_snapshot and plan.end.index == 1
    with pytest.raises(SourceOptionsError, match="event_time_order changed"):
        poll(reader_for(uri, max_files_per_trigger=1), plan.end)
    # The same setting resumes fine.
    again = DeltaStreamReader(str(uri), DeltaSourceOptions(event_time_order="ts", max_files_per_trigger=1))
    assert [r[0] for r in drain(again, plan.end).rows] == [2]
    assert isinstance(plan.end, SourceOffset)
