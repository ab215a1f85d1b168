"""``lakestream.gold.flink_sql`` in a real Flink TableEnvironment equals the Python reference.

One batch query over a values table covering what the floor and the filters must get right: times
before 1970 and on window boundaries, a re-created order, null user ids, every kind, a window with
only other events, decimal edges. The session time zone is not UTC, so a zone-dependent floor fails.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from lakestream.gold import (
    EPOCH,
    KIND_ORDER_CREATED,
    KIND_OTHER,
    KIND_PAYMENT,
    METRIC_NAMES,
    GoldSettings,
    flink_sql,
    kind_of,
    kind_sql,
    reference_aggregate,
    to_us,
)

UTC = timezone.utc


def _rows() -> list[dict[str, Any]]:
    t0 = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    ms = timedelta(milliseconds=1)
    spec = [
        (t0, KIND_ORDER_CREATED, Decimal("10.00"), "o1", "u1"),
        (t0 + timedelta(minutes=4, seconds=59, milliseconds=999), KIND_ORDER_CREATED, None, "o1", "u1"),
        (t0 + timedelta(minutes=1), KIND_PAYMENT, Decimal("9999999999999999.99"), "o1", None),
        (t0 + timedelta(minutes=2), KIND_PAYMENT, Decimal("-0.01"), "o2", None),
        (t0 + timedelta(minutes=5), KIND_OTHER, Decimal("1.00"), "o3", "u2"),
        (t0 + timedelta(minutes=6), KIND_PAYMENT, Decimal("0.01"), None, "u2"),
        (epoch - ms, KIND_ORDER_CREATED, None, "o4", "u3"),
        (epoch - timedelta(minutes=5), KIND_OTHER, None, None, None),
        (epoch - timedelta(minutes=5) - ms, KIND_PAYMENT, Decimal("2.50"), "o4", "u3"),
        (epoch, KIND_OTHER, None, None, "u4"),
    ]
    return [{"event_time": t, "kind": k, "amount": a, "order_id": o, "user_id": u} for t, k, a, o, u in spec]


def _literal(value: Any, sql_type: str) -> str:
    if value is None:
        return f"CAST(NULL AS {sql_type})"
    if isinstance(value, str):
        return f"CAST('{value}' AS {sql_type})"
    return f"CAST({value} AS {sql_type})"


def test_flink_sql_equals_the_reference() -> None:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    settings = GoldSettings(window=timedelta(minutes=5))
    rows = _rows()
    env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    env.get_config().set("parallelism.default", "1")
    env.get_config().set("table.local-time-zone", "America/St_Johns")
    values = ", ".join(
        "("
        + ", ".join(
            [
                _literal(to_us(r["event_time"]) // 1000, "BIGINT"),
                _literal(r["kind"], "TINYINT"),
                _literal(r["amount"], "DECIMAL(18, 2)"),
                _literal(r["order_id"], "STRING"),
                _literal(r["user_id"], "STRING"),
            ]
        )
        + ")"
        for r in rows
    )
    env.execute_sql(
        "CREATE TEMPORARY VIEW gold_inputs AS SELECT ms AS event_time_ms, kind, amount, "
        f"order_id, user_id FROM (VALUES {values}) AS t(ms, kind, amount, order_id, user_id)"
    )
    result = env.sql_query(flink_sql("gold_inputs", settings))
    # The Java schema: pyflink's Python types report every TIMESTAMP_LTZ as precision 6.
    j_schema = result._j_table.getResolvedSchema()
    types = {str(c.getName()): str(c.getDataType()) for c in j_schema.getColumns()}
    assert types["window_start"] == types["window_end"] == "TIMESTAMP_LTZ(3)", types
    assert types["gmv"].startswith("DECIMAL(18, 2)"), types
    assert all(types[m].startswith("BIGINT") for m in METRIC_NAMES if m != "gmv"), types
    # TIMESTAMP_LTZ values cannot be collected into Python: read the window bounds as epoch minutes.
    env.create_temporary_view("gold_result", result)
    minutes = ", ".join(
        f"TIMESTAMPDIFF(MINUTE, TO_TIMESTAMP_LTZ(0, 3), {c}) AS {c}" for c in ("window_start", "window_end")
    )
    metrics = ", ".join(METRIC_NAMES)
    query = env.sql_query(f"SELECT {minutes}, {metrics} FROM gold_result")
    names = query.get_schema().get_field_names()
    with query.execute().collect() as collected:
        got = [dict(zip(names, list(row), strict=True)) for row in collected]
    for row in got:
        for key in ("window_start", "window_end"):
            row[key] = EPOCH + timedelta(minutes=row[key])
    expected = reference_aggregate(rows, settings)
    assert sorted(got, key=lambda r: r["window_start"]) == expected
    assert len(expected) == 5

    # The kind rule as SQL (for views built from bronze-shaped rows) equals kind_of.
    pairs = [
        ("orders_db", "c"),
        ("orders_db", "u"),
        ("orders_db", None),
        ("payments", None),
        ("logistics", "c"),
    ]
    kinds_in = ", ".join(f"({_literal(s, 'STRING')}, {_literal(o, 'STRING')})" for s, o in pairs)
    query = env.sql_query(
        f"SELECT source, op, {kind_sql()} AS kind FROM (VALUES {kinds_in}) AS k(source, op)"
    )
    with query.execute().collect() as collected:
        kinds = {(row[0], row[1]): row[2] for row in collected}
    assert kinds == {(s, o): kind_of(s, o) for s, o in pairs}
