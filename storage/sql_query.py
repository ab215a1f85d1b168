"""SQL over Delta tables in delta-rs' own engine (DataFusion), the answer as plain Arrow types.

DataFusion skips files by their statistics and row groups by theirs and by Parquet bloom filters, so a
filter on a column is read where it can match. Not a pyarrow dataset: its scans call the Python file
system of delta-rs from Arrow's IO threads, and a CLI process then aborted at interpreter exit now and
then ("terminate called without an active exception", exit 134). Strings come back as views, which
pyarrow 16 cannot cast, so the stream is imported with plain types.
"""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from storage.delta_log import normalize_schema


def query(sql: str, **tables: DeltaTable) -> pa.Table:
    """The result of DataFusion ``sql`` over the given tables (by name)."""
    builder = QueryBuilder()
    for name, dt in tables.items():
        builder.register(name, dt)
    stream = builder.execute(sql)
    wanted = normalize_schema(pa.schema(stream.schema))
    return pa.RecordBatchReader.from_stream(stream, schema=wanted).read_all()


def literal(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"
