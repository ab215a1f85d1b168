"""The speed layer's Python parts without Flink: the gold columns of a part, the payload -> row mapping,
and the realtime upsert against a concurrent batch backfill on a real Delta table."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakestream.gold import GOLD_SCHEMA, LAYER_BATCH, GoldSettings, gold_inputs
from lakestream.standard import BRONZE_SCHEMA
from sinks.committer import CommitHooks
from storage.retry_policy import RetryPolicy
from tests.support.delta_tables import open_writer
from udfs.ingest_gold import GOLD_MERGE, NO_AMOUNT, gold_columns, gold_row

UTC = timezone.utc
T0 = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
W = timedelta(minutes=5)


def _bronze(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    base = {name: None for name in BRONZE_SCHEMA.names}
    full = []
    for i, r in enumerate(rows):
        row = {
            **base,
            "event_id": f"e{i}",
            "event_type": "x",
            "event_time": T0 + timedelta(seconds=i),
            "quality": "VALID",
            "raw": b"{}",
            "topic": "t",
            "partition": 0,
            "offset": i,
            "ingest_time": T0,
            **r,
        }
        full.append(row)
    return pa.RecordBatch.from_pylist(full, schema=BRONZE_SCHEMA)


def test_gold_columns_follow_the_shared_rule_event_by_event() -> None:
    events = _bronze(
        [
            {"source": "orders_db", "op": "c", "order_id": "o1", "user_id": "u1", "amount": Decimal("12.34")},
            {"source": "orders_db", "op": "u", "order_id": "o1", "user_id": "u1", "amount": None},
            {"source": "payments", "order_id": "o2", "amount": Decimal("0.01")},
            {"source": "behaviour", "user_id": "u9"},
            {"source": "payments", "order_id": None, "amount": Decimal("99999999.99")},
        ]
    )
    kinds, fen, orders, users = gold_columns(events)
    inputs = gold_inputs(events)  # the definition's own rule, same events (no re-delivery here)
    assert list(kinds) == inputs.column("kind").to_pylist()
    assert fen == [1234, NO_AMOUNT, 1, NO_AMOUNT, 9999999999]
    assert [None if f == NO_AMOUNT else Decimal(f) / 100 for f in fen] == inputs.column("amount").to_pylist()
    assert orders == inputs.column("order_id").to_pylist()
    assert users == inputs.column("user_id").to_pylist()


def test_a_payload_becomes_a_realtime_gold_row() -> None:
    ms = int(T0.timestamp() * 1000)
    row = gold_row((ms, ms + 300_000, 7, 2, 3, 123456, 4, ms + 360_000, ms + 999))
    assert row == (
        T0,
        T0 + W,
        7,
        2,
        3,
        Decimal("1234.56"),
        4,
        "realtime",
        T0 + timedelta(minutes=6),
        None,
        T0 + timedelta(milliseconds=999),
    )
    assert len(row) == len(GOLD_SCHEMA)
    # No watermark yet: the epoch.
    assert gold_row((ms, ms + 300_000, 1, 0, 0, 0, 0, None, ms))[8] == datetime(1970, 1, 1, tzinfo=UTC)


def _gold(window: int, events: int, layer: str) -> dict[str, Any]:
    start = T0 + window * W
    return {
        "window_start": start,
        "window_end": start + W,
        "events": events,
        "orders_created": 0,
        "payments": 0,
        "gmv": Decimal("0.00"),
        "active_users": 0,
        "layer": layer,
        "data_time": start + W,
        "source_version": 3 if layer == LAYER_BATCH else None,
        "updated_at": T0,
    }


class BackfillBeforeCommit(CommitHooks):
    """The batch layer replaces windows 0 and 1 after our snapshot and before our MERGE commits."""

    def __init__(self, table: Path) -> None:
        self.table = table
        self.done = False

    def before_attempt(self, attempt: int, snapshot: DeltaTable) -> None:
        if not self.done:
            self.done = True
            rows = [_gold(0, 100, LAYER_BATCH), _gold(1, 200, LAYER_BATCH)]
            first, last = T0.isoformat(), (T0 + 2 * W).isoformat()
            write_deltalake(
                str(self.table),
                pa.Table.from_pylist(rows, schema=GOLD_SCHEMA),
                mode="overwrite",
                predicate=f"window_start >= '{first}' AND window_start < '{last}'",
            )


def test_the_realtime_upsert_replans_over_a_concurrent_backfill_and_never_doubles_a_window(
    tmp_path: Path,
) -> None:
    t = tmp_path / "gold"
    fast = RetryPolicy(max_attempts=5, initial_backoff_s=0.001, max_backoff_s=0.01)
    w = open_writer(t, restored=None, schema=GOLD_SCHEMA, mode="upsert", merge=GOLD_MERGE, retry=fast)
    w.write(pa.Table.from_pylist([_gold(0, 1, "realtime")], schema=GOLD_SCHEMA))
    w.prepare(1)
    w.commit(1)
    hooks = BackfillBeforeCommit(t)
    w = open_writer(
        t, restored=1, schema=GOLD_SCHEMA, mode="upsert", merge=GOLD_MERGE, retry=fast, commit_hooks=hooks
    )
    # Realtime updates of window 0 (now batch), window 1 (inserted by the backfill meanwhile), window 2.
    w.write(
        pa.Table.from_pylist(
            [_gold(0, 2, "realtime"), _gold(1, 5, "realtime"), _gold(2, 9, "realtime")], schema=GOLD_SCHEMA
        )
    )
    w.prepare(2)
    result = w.commit(2)
    assert result.committed and result.retries >= 1
    rows = sorted(DeltaTable(str(t)).to_pyarrow_table().to_pylist(), key=lambda r: r["window_start"])
    assert [(r["window_start"], r["events"], r["layer"]) for r in rows] == [
        (T0, 100, "batch"),
        (T0 + W, 200, "batch"),
        (T0 + 2 * W, 9, "realtime"),
    ]


def test_the_gold_aggregate_uid_names_the_window_and_the_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """The aggregate's state holds one value per metric and window: its uid is a digest of both, so a
    changed window or metric list gets another (and its old state is refused, not misread), while the
    allowed lateness, which the state does not depend on, keeps it."""
    from lakestream import gold
    from udfs.ingest_gold import aggregate_uid

    assert aggregate_uid(GoldSettings()) == "ingest-gold-aggregate-b97252a4"
    assert aggregate_uid(GoldSettings(window=timedelta(minutes=10))) == "ingest-gold-aggregate-9f3940a7"
    assert aggregate_uid(GoldSettings(allowed_lateness=timedelta(minutes=1))) == aggregate_uid(GoldSettings())
    monkeypatch.setattr(gold, "METRICS", gold.METRICS[:-1])
    assert aggregate_uid(GoldSettings()) != "ingest-gold-aggregate-b97252a4"
