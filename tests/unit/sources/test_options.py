"""Options validation, Spark option names, offsets, partition values and schema comparison (no tables)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakestream.time import parse_size
from sources.offsets import SourceOffset
from sources.options import DeltaSourceOptions
from sources.reader import output_schema, parse_partition_value
from sources.schema_compat import check_version_schema, diff_schemas
from sources.source_errors import OffsetMismatchError, SchemaChangeError, SourceOptionsError
from storage.delta_log import parse_commit
from storage.read_errors import UnsupportedTableError


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"starting_version": 1, "starting_timestamp": dt.datetime(2024, 1, 1)}, "choose one starting point"),
        ({"starting_version": -1}, "starting_version"),
        ({"starting_version": "earliest"}, "starting_version"),
        ({"mode": "cdf", "ignore_changes": True}, "ignore_changes: only apply to mode='table_changes'"),
        ({"ignore_changes": True, "skip_change_commits": True}, "choose one"),
        ({"max_files_per_trigger": 0}, "max_files_per_trigger"),
        ({"max_bytes_per_trigger": -5}, "max_bytes_per_trigger"),
        ({"poll_interval": dt.timedelta(0)}, "poll_interval"),
        ({"schema_changes": "merge"}, "schema_changes"),
        ({"mode": "batch"}, "mode"),
    ],
)
def test_contradictions_fail_naming_the_option(kwargs, message):
    with pytest.raises(SourceOptionsError, match=message):
        DeltaSourceOptions(**kwargs)


def test_limits_default_like_spark():
    assert DeltaSourceOptions().effective_max_files == 1000
    assert DeltaSourceOptions(max_bytes_per_trigger=10).effective_max_files is None
    assert DeltaSourceOptions(max_files_per_trigger=3, max_bytes_per_trigger=10).effective_max_files == 3
    assert (
        DeltaSourceOptions().has_snapshot and not DeltaSourceOptions(starting_version="latest").has_snapshot
    )


def test_spark_option_names():
    opts = DeltaSourceOptions.from_spark_options(
        {
            "readChangeFeed": "true",
            "startingVersion": "latest",
            "maxFilesPerTrigger": "2",
            "maxBytesPerTrigger": "1kb",
            "failOnDataLoss": "false",
        }
    )
    assert (opts.mode, opts.starting_version, opts.max_files_per_trigger) == ("cdf", "latest", 2)
    assert (opts.max_bytes_per_trigger, opts.fail_on_data_loss) == (1024, False)
    ts = DeltaSourceOptions.from_spark_options({"startingTimestamp": "2024-05-01"}).starting_timestamp
    assert ts == dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
    with pytest.raises(SourceOptionsError, match="unknown Delta source option 'maxFiles'"):
        DeltaSourceOptions.from_spark_options({"maxFiles": "2"})
    with pytest.raises(SourceOptionsError, match="ignoreDeletes: expected true or false"):
        DeltaSourceOptions.from_spark_options({"ignoreDeletes": "maybe"})
    assert parse_size("10mb", key="k") == 10 * 1024 * 1024
    with pytest.raises(SourceOptionsError, match="maxBytesPerTrigger: expected a size"):
        DeltaSourceOptions.from_spark_options({"maxBytesPerTrigger": "ten"})


@given(
    version=st.integers(min_value=0, max_value=2**62),
    index=st.integers(min_value=0, max_value=2**31),
    in_snapshot=st.booleans(),
    table_id=st.text(max_size=40),
    order=st.text(max_size=10),
)
def test_offset_round_trips_through_state(version, index, in_snapshot, table_id, order):
    off = SourceOffset(version, index, in_snapshot=in_snapshot, table_id=table_id, snapshot_order=order)
    assert SourceOffset.from_json(off.to_json()) == off


def test_offset_meaning_and_table_check():
    assert SourceOffset(5).last_complete_version == 4
    assert SourceOffset(5, 3).last_complete_version == 4
    assert SourceOffset(5, in_snapshot=True).last_complete_version == -1
    SourceOffset(1, table_id="a").check_table("a", "/t")
    SourceOffset(1).check_table("b", "/t")  # an offset without id (never happens after start) passes
    with pytest.raises(OffsetMismatchError, match="table id a.*holds table id b"):
        SourceOffset(1, table_id="a").check_table("b", "/t")
    with pytest.raises(ValueError, match="offset format"):
        SourceOffset.from_json('{"format": 99}')


@pytest.mark.parametrize(
    ("raw", "type_", "expected"),
    [
        ("42", pa.int32(), 42),
        ("-7", pa.int64(), -7),
        ("1.25", pa.float64(), 1.25),
        ("12.30", pa.decimal128(5, 2), Decimal("12.30")),
        ("true", pa.bool_(), True),
        ("2024-02-29", pa.date32(), dt.date(2024, 2, 29)),
        ("", pa.int32(), None),
        ("", pa.string(), ""),
        (None, pa.string(), None),
        (
            "2024-01-01 01:02:03.456789",
            pa.timestamp("us", tz="UTC"),
            dt.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=dt.timezone.utc),
        ),
        (
            "2024-01-01T01:02:03Z",
            pa.timestamp("us", tz="UTC"),
            dt.datetime(2024, 1, 1, 1, 2, 3, tzinfo=dt.timezone.utc),
        ),
        ("2024-01-01 01:02:03", pa.timestamp("us"), dt.datetime(2024, 1, 1, 1, 2, 3)),
        (5, pa.int64(), 5),  # snapshots give typed values
    ],
)
def test_partition_values_as_delta_serialises_them(raw, type_, expected):
    assert parse_partition_value(raw, type_) == expected


def test_commit_parsing_keeps_data_change_flags_and_order():
    text = "\n".join(
        [
            '{"commitInfo":{"timestamp":1700000000123,"operation":"MERGE"}}',
            '{"add":{"path":"b.parquet","partitionValues":{},"size":10,"modificationTime":1,"dataChange":true}}',
            '{"add":{"path":"a.parquet","partitionValues":{"p":"x"},"size":20,"modificationTime":1,"dataChange":true,'
            '"deletionVector":{"storageType":"u"}}}',
            '{"remove":{"path":"c.parquet","dataChange":true}}',
            '{"remove":{"path":"d.parquet","dataChange":false}}',
            '{"cdc":{"path":"_change_data/e.parquet","partitionValues":{},"size":5,"dataChange":false}}',
            "",
        ]
    )
    c = parse_commit(7, text, fallback_timestamp_ms=5)
    assert (c.version, c.timestamp_ms, c.operation) == (7, 1700000000123, "MERGE")
    assert [a.path for a in c.data_adds] == ["b.parquet", "a.parquet"]
    assert c.data_adds[1].has_deletion_vector and c.data_adds[1].partition_values == {"p": "x"}
    assert [r.path for r in c.data_removes] == ["c.parquet"]
    assert [x.path for x in c.cdcs] == ["_change_data/e.parquet"]
    assert parse_commit(8, '{"add":{"path":"f","size":1}}', fallback_timestamp_ms=99).timestamp_ms == 99


def test_schema_rules():
    base = pa.schema([("id", pa.int64()), ("v", pa.string())])
    wider = pa.schema([("id", pa.int64()), ("v", pa.string()), ("x", pa.float64())])
    assert diff_schemas(base, pa.schema([("v", pa.large_string()), ("id", pa.int64())])).identical
    check_version_schema(wider, base, version=3, mode="additive")  # older version, nulls for x
    with pytest.raises(SchemaChangeError, match="version 3.*schema_changes='additive'"):
        check_version_schema(wider, base, version=3, mode="fail")
    with pytest.raises(SchemaChangeError, match="new column.*x.*restart the job"):
        check_version_schema(base, wider, version=4, mode="additive")
    with pytest.raises(SchemaChangeError, match="changed type"):
        check_version_schema(
            base, pa.schema([("id", pa.string()), ("v", pa.string())]), version=1, mode="additive"
        )
    strict = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()), ("x", pa.int32())])
    with pytest.raises(SchemaChangeError, match="not additive"):
        check_version_schema(
            strict, pa.schema([("v", pa.string()), ("x", pa.int32())]), version=2, mode="additive"
        )


def test_metadata_column_clash_is_refused():
    with pytest.raises(UnsupportedTableError, match="_change_type"):
        output_schema(pa.schema([("_change_type", pa.string())]), "cdf")
    assert (
        output_schema(pa.schema([("_change_type", pa.string())]), "table_changes").names[0] == "_change_type"
    )


def test_event_time_column_must_exist(tmp_path):
    from tests.support.delta_source import batch, create, reader_for

    create(tmp_path / "t", batch([1]))
    with pytest.raises(SourceOptionsError, match="event_time_order: column 'ts' is not in the table"):
        reader_for(tmp_path / "t", event_time_order="ts")
