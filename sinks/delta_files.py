"""What a Delta ``add`` action needs to know about a Parquet file we wrote ourselves.

delta-rs only writes files as part of a commit, but the two-phase protocol must write the files at
PRECOMMIT and commit them later, so we write Parquet with pyarrow and produce the pieces delta-rs would:
hive-style partition folders, serialized partition values and the per-file statistics JSON that readers
use for data skipping. Statistics must never claim a range narrower than the data (a reader would skip a
file that has matching rows), so every value that cannot be represented exactly is widened or left out.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc

#: Directory name of a null partition value (Hive and Delta convention).
NULL_PARTITION_DIR = "__HIVE_DEFAULT_PARTITION__"
#: Strings longer than this keep only a prefix as min and no max (Delta Spark truncates at 32 too).
STRING_STATS_PREFIX = 32


def partition_value(value: Any) -> str | None:
    """Serialize one partition value the way the Delta protocol stores it in ``partitionValues``."""
    if value is None or (isinstance(value, str) and value == ""):
        return None  # Hive/Spark treat an empty partition string as null
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return str(value.isoformat(sep=" ", timespec="microseconds"))
    if isinstance(value, dt.date):
        return str(value.isoformat())
    raise TypeError(f"partition value {value!r} of type {type(value).__name__} is not supported")


def partition_dir(partition_by: Sequence[str], values: Mapping[str, str | None]) -> str:
    """Relative hive-style folder (``a=1/b=x``) for serialized partition values, as delta-rs names it."""
    parts = []
    for col in partition_by:
        v = values[col]
        parts.append(f"{col}={NULL_PARTITION_DIR if v is None else quote(v, safe='')}")
    return "/".join(parts)


def file_stats(table: pa.Table) -> str:
    """Delta statistics JSON (numRecords, minValues, maxValues, nullCount) of one data file's rows."""
    min_values: dict[str, Any] = {}
    max_values: dict[str, Any] = {}
    null_count: dict[str, int] = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        typ = column.type
        if pa.types.is_nested(typ):
            continue  # nested stats are nested objects in Delta; we do not produce them
        null_count[name] = column.null_count
        bounds = _min_max(column)
        if bounds is not None:
            lo, hi = bounds
            if lo is not None:
                min_values[name] = lo
            if hi is not None:
                max_values[name] = hi
    stats = {
        "numRecords": table.num_rows,
        "minValues": min_values,
        "maxValues": max_values,
        "nullCount": null_count,
    }
    return json.dumps(stats, separators=(",", ":"), allow_nan=False)


def _min_max(column: pa.ChunkedArray) -> tuple[Any, Any] | None:
    typ = column.type
    if column.null_count == len(column):
        return None
    if pa.types.is_floating(typ):
        if pc.any(pc.is_nan(column)).as_py():
            return None  # NaN has no place in an ordered range
        mm = pc.min_max(column).as_py()
        lo, hi = float(mm["min"]), float(mm["max"])
        if math.isinf(lo) or math.isinf(hi):
            return None  # JSON has no infinity
        return lo, hi
    if pa.types.is_integer(typ) or pa.types.is_boolean(typ):
        mm = pc.min_max(column).as_py()
        return mm["min"], mm["max"]
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        mm = pc.min_max(column).as_py()
        lo_s: str = mm["min"]
        hi_s: str = mm["max"]
        return lo_s[:STRING_STATS_PREFIX], (hi_s if len(hi_s) <= STRING_STATS_PREFIX else None)
    if pa.types.is_date32(typ) or pa.types.is_date64(typ):
        mm = pc.min_max(column).as_py()
        return mm["min"].isoformat(), mm["max"].isoformat()
    if pa.types.is_timestamp(typ):
        # Delta keeps millisecond precision: round the min down and the max up so the range stays wide.
        micros = pc.cast(column, pa.timestamp("us", tz=typ.tz)).cast(pa.int64())
        mm = pc.min_max(micros).as_py()
        lo_ms = int(mm["min"]) // 1000
        hi_ms = -((-int(mm["max"])) // 1000)
        return _format_ts_ms(lo_ms, typ.tz is not None), _format_ts_ms(hi_ms, typ.tz is not None)
    return None  # decimals, binary, time: no exact JSON form worth the risk; readers just do not skip


def _format_ts_ms(ms: int, utc: bool) -> str:
    value = dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=ms)
    text = value.isoformat(timespec="milliseconds")
    return text + "Z" if utc else text
