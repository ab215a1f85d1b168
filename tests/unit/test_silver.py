from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pyarrow as pa

from lakestream.silver import (
    RESOLVED_FIELDS,
    SILVER_COLUMNS,
    SILVER_COMPANIONS,
    SILVER_EIDS,
    SILVER_GREATEST,
    SILVER_GUARDED,
    SILVER_KEY,
    SILVER_SCHEMA,
    empty_row,
    merge_rows,
    reduce_rows,
    rows_from_arrow,
    silver_batch,
)

UTC = timezone.utc
TS = pa.timestamp("us", tz="UTC")


def test_schema_has_value_time_and_id_per_field() -> None:
    assert SILVER_KEY == ("order_id",)
    assert SILVER_SCHEMA.field("order_id").nullable is False
    assert set(SILVER_GUARDED) == set(RESOLVED_FIELDS) == set(SILVER_EIDS)
    for f in RESOLVED_FIELDS:
        assert SILVER_SCHEMA.field(SILVER_GUARDED[f]).type == TS
        assert SILVER_SCHEMA.field(SILVER_EIDS[f]).type == pa.string()
    assert SILVER_SCHEMA.field("amount").type == pa.decimal128(18, 2)
    assert SILVER_SCHEMA.field("paid_amount").type == pa.decimal128(18, 2)
    assert SILVER_SCHEMA.field("created_time").type == TS
    assert SILVER_SCHEMA.field("deleted").type == pa.bool_()
    assert SILVER_COLUMNS[-2:] == ("last_event_time", "last_event_id")
    assert len(SILVER_COLUMNS) == 1 + 3 * len(RESOLVED_FIELDS) + 2


def _row(order_id: str, field: str, value: object, hour: int, eid: str) -> dict[str, object]:
    row = empty_row(order_id)
    row[field], row[SILVER_GUARDED[field]], row[SILVER_EIDS[field]] = (
        value,
        datetime(2024, 6, 1, hour, tzinfo=UTC),
        eid,
    )
    row["last_event_time"], row["last_event_id"] = row[SILVER_GUARDED[field]], eid
    return row


def test_reduce_rows_keeps_one_row_per_key_in_arrival_order() -> None:
    rows = [
        _row("1", "address", "A", 5, "e1"),
        _row("2", "status", "paid", 1, "e2"),
        _row("1", "address", "B", 3, "e3"),
        _row("1", "deleted", False, 4, "e4"),
    ]
    reduced = reduce_rows(rows)
    assert list(reduced) == ["1", "2"]
    assert reduced["1"]["address"] == "A" and reduced["1"]["deleted"] is False
    assert (reduced["1"]["last_event_time"], reduced["1"]["last_event_id"]) == (
        datetime(2024, 6, 1, 5, tzinfo=UTC),
        "e1",
    )


def test_last_event_is_a_greatest_column_with_ties_to_the_later_arrival() -> None:
    a, b = _row("1", "address", "A", 5, "a"), _row("1", "status", "paid", 5, "b")
    assert merge_rows(a, b)["last_event_id"] == "b"
    assert merge_rows(b, a)["last_event_id"] == "a"
    older = _row("1", "status", "x", 1, "old")
    assert merge_rows(a, older)["last_event_id"] == "a"
    assert merge_rows(a, older)["last_event_time"] == datetime(2024, 6, 1, 5, tzinfo=UTC)


def test_merge_spec_metadata_covers_every_non_key_column_once() -> None:
    covered = [*SILVER_KEY]
    for value, time in SILVER_GUARDED.items():
        covered += [value, time, *SILVER_COMPANIONS[value]]
    for col in SILVER_GREATEST:
        covered += [col, *SILVER_COMPANIONS[col]]
    assert sorted(covered) == sorted(SILVER_COLUMNS)


def test_false_is_a_value_not_a_null() -> None:
    target = _row("1", "deleted", True, 1, "d")
    merged = merge_rows(target, _row("1", "deleted", False, 2, "u"))
    assert merged["deleted"] is False


def test_batch_round_trip() -> None:
    rows = [merge_rows(_row("1", "amount", Decimal("12.30"), 1, "a"), _row("1", "deleted", False, 2, "b"))]
    batch = silver_batch(rows)
    assert batch.schema == SILVER_SCHEMA
    assert rows_from_arrow(batch) == rows
