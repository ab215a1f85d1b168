"""The resolve operator with its table writers, without Flink, on real Delta tables.

Marker rows drive it as ``KeyedDedupEpochOperator`` would (OPEN, DATA, PRECOMMIT, COMMIT); a second
operator then OPENs as after a restore. Late watermarks, events without order, and the de-dup flags of
re-deliveries decide what reaches the late and silver tables; silver uses the production merge spec and
is held to the independent oracle.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakestream.silver import SILVER_MERGE, SILVER_SCHEMA
from lakestream.standard import BRONZE_SCHEMA, LATE_SCHEMA, StandardEvent
from runtime.checkpoint_markers import COMMIT, DATA, OPEN, PRECOMMIT
from sinks.flink.delta_sink import DeltaSinkSpec
from sinks.table_spec import TableSpec
from tests.support.metrics import MetricsContext
from tests.support.silver_oracle import oracle_rows
from udfs.ingest_resolve import LATE, SILVER, ResolveBatches
from udfs.ingest_rows import NOT_LATE, bronze_row, epoch_millis, pack_events

UTC = timezone.utc
T0 = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
INGESTED = datetime(2024, 6, 1, 5, 0, tzinfo=UTC)


def event(eid: str, minute: int, *, order_id: str | None = "1001", **fields: Any) -> StandardEvent:
    kind = fields.pop("kind", "order_updated")
    return StandardEvent(
        event_id=eid,
        order_id=order_id,
        user_id=fields.get("user_id"),
        event_type=kind,
        event_time=T0 + timedelta(minutes=minute),
        amount=fields.get("amount"),
        status=fields.get("status"),
        address=fields.get("address"),
        logistics_state=fields.get("logistics_state"),
        op="u" if kind.startswith("order") else None,
        source="test",
        raw=b"",
        topic="t",
        partition=0,
        offset=minute,
        quality="VALID",
    )


def blob(events: list[StandardEvent]) -> bytes:
    rows = [dict(zip(BRONZE_SCHEMA.names, bronze_row(e, INGESTED), strict=True)) for e in events]
    return pack_events(pa.RecordBatch.from_pylist(rows, schema=BRONZE_SCHEMA))


def data(parts: list[list[StandardEvent]], late: dict[str, int], duplicates: set[int]) -> tuple[Any, ...]:
    """A DATA marker row: ``late`` maps event id -> watermark minute; ``duplicates`` are positions."""
    flat = [e for p in parts for e in p]
    wms = [
        epoch_millis(T0 + timedelta(minutes=late[e.event_id])) if e.event_id in late else NOT_LATE
        for e in flat
    ]
    fresh = [i not in duplicates for i in range(len(flat))]
    return (DATA, -1, -1, -1, None, ([blob(p) for p in parts], wms, fresh, len(flat)))


def operator(tmp_path: Path) -> tuple[ResolveBatches, MetricsContext]:
    def spec(name: str, schema: pa.Schema, **kw: Any) -> DeltaSinkSpec:
        return DeltaSinkSpec(
            table=TableSpec(table_uri=str(tmp_path / name), schema=schema, **kw), app_prefix=f"job/{name}"
        )

    fn = ResolveBatches(
        tables={
            LATE: spec("late", LATE_SCHEMA),
            SILVER: spec("silver", SILVER_SCHEMA, mode="merge", merge=SILVER_MERGE),
        }
    )
    ctx = MetricsContext()
    fn.open(ctx)
    return fn, ctx


def run(fn: ResolveBatches, *rows: tuple[Any, ...]) -> None:
    for row in rows:
        list(fn.process_element(row, None))


def table(path: Path, key: str) -> list[dict[str, Any]]:
    return DeltaTable(str(path)).to_pyarrow_table().sort_by(key).to_pylist()


def test_late_rows_first_sightings_and_restore(tmp_path: Path) -> None:
    create = event("c1", 0, kind="order_created", status="created", address="A", amount=Decimal("9.90"))
    newer = event("u1", 10, address="B")
    late_old = event("u0", 1, address="OLD", status="pending")  # late: behind its partition's watermark
    redelivered = event("u1", 10, address="B")  # same id again: flagged by the de-dup operator
    no_order = event("b1", 3, order_id=None, kind="behaviour:view")
    other = event("p1", 5, order_id="1002", kind="payment", amount=Decimal("5.00"), status="paid")

    fn, ctx = operator(tmp_path)
    run(
        fn,
        (OPEN, -1, 0, 1, "run-1", None),
        data([[create, newer], [late_old, redelivered, no_order, other]], {"u0": 4, "u1": 4}, {3}),
        (PRECOMMIT, 1, 0, 1, "run-1", None),
        (COMMIT, 1, 0, 1, "run-1", None),
    )
    counts = {name: c.count for name, c in ctx.group.counters.items()}
    assert counts == {"events_late": 3, "silver_changes": 4}
    [entry] = DeltaTable(str(tmp_path / "silver")).history(1)
    assert entry["lakestream.counters"] == {"events_late": 3, "events_duplicate": 1, "silver_changes": 4}

    # Every late arrival, the re-delivery included, with its watermark.
    late = table(tmp_path / "late", "offset")
    assert [(r["event_id"], r["watermark"]) for r in late] == [
        ("u0", T0 + timedelta(minutes=4)),
        ("u1", T0 + timedelta(minutes=4)),
        ("u1", T0 + timedelta(minutes=4)),
    ]
    silver = {r["order_id"]: r for r in table(tmp_path / "silver", "order_id")}
    assert silver == oracle_rows([create, newer, late_old, other])
    assert silver["1001"]["address"] == "B" and silver["1001"]["status"] == "pending"

    # A fresh operator after a restore from checkpoint 1: OPEN finds nothing to redo, new data lands.
    fn.close()
    fn2, ctx2 = operator(tmp_path)
    later = event("l1", 20, kind="logistics", logistics_state="in_transit")
    run(
        fn2,
        (OPEN, 1, 0, 1, "run-1", None),
        data([[later]], {}, set()),
        (PRECOMMIT, 2, 0, 1, "run-1", None),
        (COMMIT, 2, 0, 1, "run-1", None),
    )
    silver = {r["order_id"]: r for r in table(tmp_path / "silver", "order_id")}
    assert silver == oracle_rows([create, newer, late_old, other, later])
    assert len(table(tmp_path / "late", "offset")) == 3
    assert {name: c.count for name, c in ctx2.group.counters.items()}["silver_changes"] == 1
    fn2.close()


def test_a_malformed_batch_names_the_mismatch(tmp_path: Path) -> None:
    fn, _ = operator(tmp_path)
    run(fn, (OPEN, -1, 0, 1, "run-1", None))
    bad = (DATA, -1, -1, -1, None, ([blob([event("x", 0, status="s")])], [NOT_LATE, NOT_LATE], [True], 1))
    with pytest.raises(ValueError, match="1 events but 2 late watermarks and 1 de-dup flags"):
        run(fn, bad)
    fn.close()
