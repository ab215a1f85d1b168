"""``rows_to_batch`` gives the batch a value-by-value conversion gives, repeated objects included."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sinks.flink.delta_sink import rows_to_batch

UTC = timezone.utc
SCHEMA = pa.schema(
    [
        ("t", pa.timestamp("us", tz="UTC")),
        ("f", pa.float64()),
        ("i", pa.int64()),
        ("d", pa.decimal128(18, 2)),
        ("s", pa.string()),
    ]
)
#: Per column, values that are equal without being the same object, or not equal to themselves.
TRICKY: list[list[Any]] = [
    [datetime(2024, 6, 1, tzinfo=UTC), datetime(2024, 6, 1, 8, tzinfo=timezone(timedelta(hours=8))), None],
    [0.0, -0.0, float("nan"), None],
    [1, True, None],
    [Decimal("1.5"), Decimal("1.50"), None],
    ["a", "b", None],
]


def by_value(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(list(col), type=f.type) for col, f in zip(zip(*rows, strict=True), schema, strict=True)],
        schema=schema,
    )


def same(a: pa.RecordBatch, b: pa.RecordBatch) -> bool:
    """Equal, with NaN and the sign of zero compared bit for bit (through IPC bytes)."""
    return bool(a.schema == b.schema and a.serialize().to_pybytes() == b.serialize().to_pybytes())


@given(st.data())
def test_the_batch_is_the_value_by_value_conversion(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 6))
    columns = []
    for values in TRICKY:
        if data.draw(st.booleans()):  # one object repeated: the fast path
            columns.append([data.draw(st.sampled_from(values))] * n)
        else:
            columns.append([data.draw(st.sampled_from(values)) for _ in range(n)])
    rows = list(zip(*columns, strict=True))
    try:
        expected = by_value(rows, SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:  # e.g. True in an int64 column
        with pytest.raises(type(exc)):
            rows_to_batch(rows, SCHEMA)
        return
    assert same(rows_to_batch(rows, SCHEMA), expected)


def test_a_repeated_object_is_converted_once_and_keeps_its_type() -> None:
    now = datetime(2024, 6, 1, 12, tzinfo=UTC)
    rows = [(now, -0.0, 7, Decimal("2.50"), "x")] * 3
    batch = rows_to_batch(rows, SCHEMA)
    assert batch.schema == SCHEMA and batch.num_rows == 3
    assert batch.column("t").to_pylist() == [now] * 3
    assert same(batch, by_value(rows, SCHEMA))
    assert rows_to_batch([], SCHEMA).num_rows == 0
    nulls = rows_to_batch([(None, None, None, None, None)] * 2, SCHEMA)
    assert all(c.null_count == 2 for c in nulls.columns)
