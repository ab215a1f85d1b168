"""Marker rows decoded by name, and the table writers driven by them (real Delta tables, no Flink)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pytest
from pyflink.common import Row

from runtime.checkpoint_markers import COMMIT, DATA, KIND_FIELD, OPEN, PAYLOAD_FIELD, PRECOMMIT, Marker
from sinks.flink.delta_sink import DeltaSinkFunction, DeltaSinkSpec, TableWriters
from sinks.table_spec import TableSpec
from tests.support.delta_tables import snapshot_rows, txn_version

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def test_a_marker_row_decodes_by_name() -> None:
    marker = Marker.of(Row(OPEN, 7, 2, 3, "run-1", None))
    assert (marker.kind, marker.checkpoint_id, marker.subtask, marker.parallelism) == (OPEN, 7, 2, 3)
    assert marker.run_id == "run-1" and marker.payload is None and marker.restored_checkpoint_id == 7
    assert Marker.of((OPEN, -1, 0, 1, "run-1", None)).restored_checkpoint_id is None  # a fresh start
    assert Marker.of((OPEN, 0, 0, 1, "run-1", None)).restored_checkpoint_id == 0
    data = (DATA, -1, -1, -1, None, ("payload",))
    assert data[KIND_FIELD] == Marker.of(data).kind and data[PAYLOAD_FIELD] == Marker.of(data).payload
    with pytest.raises(TypeError):
        Marker.of((OPEN, -1, 0, 1, "run-1"))


def test_the_writers_follow_the_markers_with_the_coordinates_they_carry(tmp_path: Path) -> None:
    t = tmp_path / "t"
    spec = DeltaSinkSpec(table=TableSpec(table_uri=str(t), schema=SCHEMA), app_prefix="job")
    tables = TableWriters({"t": spec})
    assert tables.on_marker(Row(OPEN, -1, 1, 2, "run-1", None)) == []
    tables.add("t", (1, "a"))
    assert tables.on_marker(Row(PRECOMMIT, 4, 1, 2, "run-1", None)) == []
    [report] = tables.on_marker(Row(COMMIT, 4, 1, 2, "run-1", None))
    assert report.startswith("job: checkpoint 4: table version 1, 1 rows")
    assert txn_version(t, "job:run-1:1") == 4
    tables.close()

    sink = DeltaSinkFunction(spec)  # a restored attempt: OPEN(4), then one record per DATA row
    assert list(sink.process_element(Row(OPEN, 4, 1, 2, "run-1", None), None)) == []
    assert list(sink.process_element(Row(DATA, -1, -1, -1, None, (2, "b")), None)) == []
    list(sink.process_element(Row(PRECOMMIT, 5, 1, 2, "run-1", None), None))
    assert len(list(sink.process_element(Row(COMMIT, 5, 1, 2, "run-1", None), None))) == 1
    assert snapshot_rows(t, SCHEMA, ["id"]).to_pylist() == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]
    assert txn_version(t, "job:run-1:1") == 5


def test_the_sink_spec_pickles_with_its_table_spec() -> None:
    """It is pickled into the Python workers; the writer there gets the same ``TableSpec``."""
    from lakestream.silver import SILVER_MERGE, SILVER_SCHEMA

    table = TableSpec(
        table_uri="/lake/silver",
        schema=SILVER_SCHEMA,
        mode="merge",
        merge=SILVER_MERGE,
        partition_by=["status"],
        storage_options={"timeout": "5s"},
        freshness_column="last_event_time",
    )
    spec = DeltaSinkSpec(table=table, app_prefix="job/silver", commit="global")
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and again.table.partition_by == ("status",)
    assert again.new_writer().spec == table and again.new_global_committer().spec == table
