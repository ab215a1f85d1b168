"""The stager on its own: what PRECOMMIT leaves on disk (files, manifests), and nothing in any Delta log."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakestream.merge_spec import MergeSpec
from sinks.sink_errors import BatchSchemaError, KeyNullError
from sinks.stager import Stager, partition_groups
from sinks.staging import Manifest, StagingArea
from sinks.table_spec import TableSpec, WriteMode
from sinks.writer_metrics import WriterMetrics
from storage.table_files import LocalTableFiles
from tests.support.delta_tables import staging_leftovers

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("p", pa.string())])


def stager(table: Path, mode: WriteMode = "append", partition_by: list[str] | None = None) -> Stager:
    merge = MergeSpec(keys=("id",)) if mode != "append" else None
    spec = TableSpec(
        table_uri=str(table), schema=SCHEMA, mode=mode, partition_by=tuple(partition_by or ()), merge=merge
    )
    staging = StagingArea(LocalTableFiles(table), "job")
    return Stager(spec, staging, run_id="run-1", subtask=3, metrics=WriterMetrics())


def batch(rows: list[tuple[int, str | None, str | int | None]], schema: pa.Schema = SCHEMA) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)


def manifests_on_disk(table: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in staging_leftovers(table) if p.suffix == ".json"]


def test_partition_groups_keep_row_order_and_sort_partitions_nulls_last() -> None:
    two = pa.schema([("id", pa.int64()), ("p", pa.string()), ("q", pa.int64())])
    rows: list[list[tuple[int, str | None, str | int | None]]] = [
        [(1, "b", 1), (2, "b", 1), (3, "b", 1)],  # one partition: joins its group uncopied
        [(4, "a", 2), (5, None, None), (6, "b", 1), (7, "a", 2), (8, "a", None)],  # mixed: sorted and cut
        [(9, None, None), (10, None, None)],  # one partition of nulls only
        [],
        [(11, "a", 2)],
    ]
    batches = [batch(b, two) for b in rows]
    groups = partition_groups(pa.Table.from_batches(batches, schema=two), ["p", "q"])
    got = [(values, rel, part.column("id").to_pylist()) for values, rel, part in groups]
    assert got == [
        ({"p": "a", "q": "2"}, "p=a/q=2", [4, 7, 11]),
        ({"p": "a", "q": None}, "p=a/q=__HIVE_DEFAULT_PARTITION__", [8]),
        ({"p": "b", "q": "1"}, "p=b/q=1", [1, 2, 3, 6]),
        ({"p": None, "q": None}, "p=__HIVE_DEFAULT_PARTITION__/q=__HIVE_DEFAULT_PARTITION__", [5, 9, 10]),
    ]
    assert all(part.schema == two for _, _, part in groups)
    assert partition_groups(pa.Table.from_batches([], schema=two), ["p"]) == []


def test_nothing_buffered_stages_nothing(tmp_path: Path) -> None:
    s = stager(tmp_path / "t")
    s.write(batch([]))
    assert s.prepare(1) is None
    assert not (tmp_path / "t").exists()


def test_append_stages_partition_files_named_by_one_prepared_manifest(tmp_path: Path) -> None:
    t = tmp_path / "t"
    s = stager(t, partition_by=["p"])
    s.write(batch([(1, "x", "b"), (2, "y", "a")]))
    s.write(batch([(3, None, "b")]))
    assert s.metrics.buffered_rows == 3
    m = s.prepare(7)
    assert m is not None and s.metrics.buffered_rows == 0
    assert (m.app_id, m.checkpoint_id, m.state, m.kind) == ("job:run-1:3", 7, "prepared", "data_files")
    assert [Manifest.from_json(p.read_text()) for p in staging_leftovers(t)] == [m]  # durable as returned
    assert m.staging_dirs == ("p=a", "p=b")
    assert [(f.partition_values, f.num_rows) for f in m.files] == [({"p": "a"}, 1), ({"p": "b"}, 2)]
    for f in m.files:
        assert m.token in f.path and str(Path(f.path).parent) in m.staging_dirs
        data = pq.read_table(t / f.path)
        assert data.column_names == ["id", "v"]  # the partition value lives in the folder and the log
        stats = json.loads(f.stats)
        assert stats["numRecords"] == data.num_rows
        assert stats["minValues"]["id"] == min(data["id"].to_pylist())
    assert not (t / "_delta_log").exists()


def test_merge_stages_one_pre_reduced_arrow_source(tmp_path: Path) -> None:
    t = tmp_path / "kv"
    s = stager(t, mode="upsert")
    s.write(batch([(1, "old", "a"), (2, "b", "a"), (1, "new", "a")]))
    m = s.prepare(4)
    assert m is not None and m.kind == "merge_source" and m.num_rows == 3
    [f] = m.files
    assert f.path.startswith("_lakestream/staging/job/run-1/3/") and f.path.endswith(f"{m.token}.arrow")
    with pa.OSFile(str(t / f.path), "rb") as fh:
        source = pa.ipc.open_file(fh).read_all()
    assert source.to_pylist() == [{"id": 2, "v": "b", "p": "a"}, {"id": 1, "v": "new", "p": "a"}]
    assert not (t / "_delta_log").exists()


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_the_pending_manifest_is_durable_before_the_first_file(tmp_path: Path, mode: WriteMode) -> None:
    t = tmp_path / "t"
    s = stager(t, mode=mode, partition_by=["p"] if mode == "append" else None)
    s.write(batch([(1, "x", "a")]))
    # The folder of the first staged file cannot be created, so PRECOMMIT fails right before writing it.
    folder = "p=a" if mode == "append" else "_lakestream/staging/job/run-1/3"
    (t / folder).parent.mkdir(parents=True, exist_ok=True)
    (t / folder).write_text("")
    with pytest.raises(FileExistsError):
        s.prepare(1)
    [pending] = manifests_on_disk(t)
    assert pending["state"] == "pending" and pending["files"] == [] and pending["token"]
    assert pending["staging_dirs"] == [folder]


def test_batches_are_cast_to_the_schema_and_null_keys_refused(tmp_path: Path) -> None:
    s = stager(tmp_path / "kv", mode="upsert")
    narrow = pa.schema([("id", pa.int32()), ("v", pa.string()), ("p", pa.string())])
    s.write(batch([(1, "x", "a")], narrow))
    with pytest.raises(BatchSchemaError, match="different order"):
        s.write(pa.RecordBatch.from_pylist([{"v": "x", "id": 1, "p": "a"}]))
    with pytest.raises(KeyNullError, match="'id' has 1 null"):
        s.write(pa.RecordBatch.from_pylist([{"id": None, "v": "x", "p": "a"}], schema=SCHEMA))
    assert s.metrics.buffered_rows == 1
    s.discard()
    assert s.metrics.buffered_rows == 0 and s.prepare(1) is None
