"""Read a :class:`~sources.batch_plan.BatchPlan` into Arrow tables in the stream's output schema.

Table-changes files are read with pyarrow directly; CDF versions come from deltalake's ``load_cdf`` one
version at a time, so memory holds one version. The output columns are defined in DESIGN.md section 6.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakestream.time import utc_from_ms
from sources.batch_plan import BatchPlan, PlannedCdfVersion, PlannedFile
from sources.options import SourceMode
from sources.source_errors import DataLossError
from storage.delta_log import DeltaLog, normalize_schema, normalize_type
from storage.parquet_read import parquet_file, read_columns
from storage.read_errors import UnsupportedTableError

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
COMMIT_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
CHANGE_TYPES = ("insert", "update_preimage", "update_postimage", "delete")


def metadata_fields(mode: SourceMode) -> list[pa.Field]:
    """The metadata columns appended to every output row."""
    fields = [
        pa.field(COMMIT_VERSION, pa.int64(), nullable=False),
        pa.field(COMMIT_TIMESTAMP, COMMIT_TIMESTAMP_TYPE, nullable=False),
    ]
    if mode == "cdf":
        fields.insert(0, pa.field(CHANGE_TYPE, pa.string(), nullable=False))
    return fields


def output_schema(read_schema: pa.Schema, mode: SourceMode) -> pa.Schema:
    """Schema of the value tuples the source emits: table columns, then the metadata columns."""
    extra = metadata_fields(mode)
    clash = sorted({f.name for f in extra} & set(read_schema.names))
    if clash:
        raise UnsupportedTableError(
            f"the table already has column(s) {', '.join(clash)}, which the Delta source adds as metadata; "
            "rename them (e.g. when streaming a change-feed audit table, select its columns first)"
        )
    return pa.schema([*read_schema, *extra])


def _index_zeros(n: int) -> pa.Array:
    return pc.fill_null(pa.nulls(n, pa.int32()), 0)


def constant_array(value: Any, type_: pa.DataType, n: int) -> pa.Array:
    """``n`` copies of one value (vectorised take of a one-element array)."""
    if value is None:
        return pa.nulls(n, type_)
    return pa.array([value], type=type_).take(_index_zeros(n))


def parse_partition_value(raw: Any, type_: pa.DataType) -> Any:
    """A partition value as the log (Delta-serialised string) or a snapshot (typed) gives it -> Python."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        return raw
    if pa.types.is_string(type_):
        return raw
    if raw == "":
        return None
    if pa.types.is_binary(type_):
        return raw.encode("utf-8")
    if pa.types.is_boolean(type_):
        return raw.strip().lower() == "true"
    if pa.types.is_integer(type_):
        return int(raw)
    if pa.types.is_floating(type_):
        return float(raw)
    if pa.types.is_decimal(type_):
        return Decimal(raw)
    if pa.types.is_date(type_):
        return date.fromisoformat(raw)
    if pa.types.is_timestamp(type_):
        ts = datetime.fromisoformat(raw.replace(" ", "T", 1) if "T" not in raw else raw)
        if type_.tz is None:
            return (
                ts.replace(tzinfo=None)
                if ts.tzinfo is None
                else ts.astimezone(timezone.utc).replace(tzinfo=None)
            )
        # Delta stores `timestamp` partition values in UTC.
        return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts
    raise UnsupportedTableError(f"partition column of type {type_} is not supported by the Delta source")


def cast_column(column: pa.ChunkedArray | pa.Array, type_: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """Cast a read column to the read schema's type (unit changes of timestamps may truncate ns)."""
    if column.type == type_:
        return column
    safe = not (pa.types.is_timestamp(column.type) and pa.types.is_timestamp(type_))
    return column.cast(type_, safe=safe)


def conform(
    table: pa.Table,
    read_schema: pa.Schema,
    *,
    partition_values: Mapping[str, Any] | None = None,
    num_rows: int | None = None,
) -> list[pa.ChunkedArray | pa.Array]:
    """Columns of ``read_schema`` from ``table``: partition values filled in, absent columns as nulls."""
    n = table.num_rows if num_rows is None else num_rows
    names = set(table.column_names)
    out: list[pa.ChunkedArray | pa.Array] = []
    for f in read_schema:
        target = normalize_type(f.type)
        if partition_values is not None and f.name in partition_values:
            out.append(constant_array(parse_partition_value(partition_values[f.name], target), target, n))
        elif f.name in names:
            out.append(cast_column(table.column(f.name), target))
        else:
            out.append(pa.nulls(n, target))
    return out


class PlanReader:
    """Turns plans into output tables; one per stream (keeps a deltalake table for ``load_cdf``)."""

    def __init__(self, log: DeltaLog, read_schema: pa.Schema, mode: SourceMode) -> None:
        self.log = log
        self.read_schema = pa.schema([f.with_type(normalize_type(f.type)) for f in read_schema])
        self.mode = mode
        self.schema = output_schema(self.read_schema, mode)
        self._dt: Any = None

    def read(self, plan: BatchPlan) -> Iterator[pa.Table]:
        """Output tables of ``plan`` in emission order (whole batch sorted when ``plan.sort_by``)."""
        if plan.sort_by and plan.files:
            tables = [self.read_file(f) for f in plan.files]
            combined = pa.concat_tables(tables)
            if combined.num_rows:
                yield combined.take(pc.sort_indices(combined, sort_keys=[(plan.sort_by, "ascending")]))
            return
        for f in plan.files:
            t = self.read_file(f)
            if t.num_rows:
                yield t
        for v in plan.cdf_versions:
            yield from self.read_cdf_version(v)

    def _metadata_columns(self, n: int, version: int, ts_ms: int, change_type: str | None) -> list[pa.Array]:
        cols = [
            constant_array(version, pa.int64(), n),
            constant_array(utc_from_ms(ts_ms), COMMIT_TIMESTAMP_TYPE, n),
        ]
        if self.mode == "cdf":
            cols.insert(0, constant_array(change_type or "insert", pa.string(), n))
        return cols

    def read_file(self, planned: PlannedFile) -> pa.Table:
        """One data file as output rows."""
        path = self.log.data_file(planned.action.path)
        wanted = [f.name for f in self.read_schema if f.name not in planned.action.partition_values]
        try:
            pf = parquet_file(path, self.log.fs)
            present = set(pf.schema_arrow.names)
            table = read_columns(pf, [c for c in wanted if c in present])
            n = pf.metadata.num_rows
        except FileNotFoundError:
            # Planned files were checked; this one vanished between planning and reading (VACUUM race).
            raise DataLossError(
                version=planned.version,
                configuration=self.log.metadata_at(planned.version).configuration,
                missing_files=[planned.action.path],
            ) from None
        cols = conform(table, self.read_schema, partition_values=planned.action.partition_values, num_rows=n)
        cols += self._metadata_columns(n, planned.version, planned.commit_timestamp_ms, planned.change_type)
        return pa.Table.from_arrays(cols, schema=self.schema)

    def _table_at_least(self, version: int) -> Any:
        if self._dt is None:
            self._dt = self.log.table()
        if self._dt.version() < version:
            self._dt.update_incremental()
        return self._dt

    def read_cdf_version(self, planned: PlannedCdfVersion) -> Iterator[pa.Table]:
        """The change rows of one version (deltalake ``load_cdf``), commit columns set from the plan."""
        dt = self._table_at_least(planned.version)
        stream = dt.load_cdf(starting_version=planned.version, ending_version=planned.version)
        # deltalake hands out string/binary *views*, which pyarrow 16 cannot cast; the producer can
        # (Arrow C stream protocol: requested schema), so ask for plain types at import.
        wanted = normalize_schema(pa.schema(stream.schema))
        for batch in pa.RecordBatchReader.from_stream(stream, schema=wanted):
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch])
            n = table.num_rows
            change = cast_column(table.column(CHANGE_TYPE), pa.string())
            cols = conform(table, self.read_schema)
            meta = self._metadata_columns(n, planned.version, planned.commit_timestamp_ms, None)
            meta[0] = change
            yield pa.Table.from_arrays([*cols, *meta], schema=self.schema)


def table_rows(table: pa.Table) -> Iterator[tuple[Any, ...]]:
    """Value tuples in column order, converted column-wise (one ``to_pylist`` per column)."""
    columns = [c.to_pylist() for c in table.columns]
    return zip(*columns, strict=True)
