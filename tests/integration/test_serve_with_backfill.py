"""Serving what the real batch layer wrote: ``lakestream backfill`` from bronze, then ``query metrics``
and ``/api/metrics`` over it and over realtime windows after it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from deltalake import write_deltalake

from lakestream.adapters import get_adapter
from lakestream.config import Config, LakehouseConfig, ServeConfig
from lakestream.standard import StandardEvent, bronze_batch
from serving.http_server import HttpServer
from tests.support.cli import run_cli
from tests.support.gold_tables import WINDOW, row, upsert_realtime

UTC = timezone.utc
T1 = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)


def _event(source: str, payload: dict[str, object], offset: int) -> StandardEvent:
    event = get_adapter(source)(json.dumps(payload).encode(), topic=f"{source}.t", partition=0, offset=offset)
    assert isinstance(event, StandardEvent), event
    return event


def _bronze(root: Path) -> None:
    """Orders and payments in four windows of [04:00, 05:00): 04:00, 04:05, 04:20, 04:50."""
    events = []
    for i, minute in enumerate([0, 1, 6, 21, 22, 51]):
        t = T1 + timedelta(minutes=minute)
        local = (t + timedelta(hours=8)).strftime("%Y-%m-%d %H:%M:%S")  # the order database's clock
        events.append(
            _event(
                "orders_db",
                {
                    "op": "c",
                    "order_id": f"o{i}",
                    "user_id": f"u{i % 2}",
                    "amount": "9.90",
                    "status": "created",
                    "updated_at": local,
                },
                2 * i,
            )
        )
        paid = int((t + timedelta(seconds=20)).timestamp() * 1000)
        events.append(
            _event(
                "payments",
                {"payId": f"P{i}", "orderId": f"o{i}", "payMoney": 1234 + i, "paidAt": paid},
                2 * i + 1,
            )
        )
    write_deltalake(
        str(root / "bronze/order_events"),
        bronze_batch(events, ingest_time=T1 + timedelta(hours=2)),
        mode="append",
        partition_by=["source"],
    )


def test_backfilled_windows_are_served_as_batch_with_zeros_then_realtime(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    _bronze(root)
    run_cli("backfill", "--lakehouse", str(root), "--from", "2024-06-01T04:00Z", "--to", "2024-06-01T05:00Z")
    upsert_realtime(root / "gold/order_metrics_5m", [row(T1 + timedelta(hours=1), gmv="5.00", events=2)])

    out = run_cli(
        "query",
        "metrics",
        "--lakehouse",
        str(root),
        "--from",
        "2024-06-01T04:00Z",
        "--to",
        "2024-06-01T05:10Z",
        "--format",
        "json",
    ).stdout
    rows = json.loads(out)
    assert [r["layer"] for r in rows] == ["batch"] * 12 + ["realtime"]  # every backfilled window, zeros too
    by_start = {r["window_start"][11:16]: r for r in rows}
    assert (by_start["04:00"]["events"], by_start["04:00"]["orders_created"]) == (4, 2)
    assert by_start["04:00"]["gmv"] == f"{(Decimal(1234) + Decimal(1235)) / 100:.2f}"
    assert (by_start["04:10"]["events"], by_start["04:10"]["gmv"]) == (0, "0.00")
    assert by_start["04:10"]["data_time"] == "2024-06-01T06:00:00Z"  # the newest bronze ingest time read
    assert by_start["04:10"]["source_version"] == 0
    paid = sum(Decimal(1234 + i) / 100 for i in range(6))
    assert by_start["04:55"]["day_gmv"] == f"{paid:.2f}" and by_start["04:55"]["day_orders_created"] == 6
    assert by_start["05:00"]["day_gmv"] == f"{paid + Decimal('5.00'):.2f}"

    cfg = Config(lakehouse=LakehouseConfig(root=str(root)), serve=ServeConfig(port=0))
    httpd = HttpServer(cfg, quiet=True).start()
    try:
        import urllib.request

        port = httpd.address[1]
        url = f"http://127.0.0.1:{port}/api/metrics?from=2024-06-01T04:00Z&to=2024-06-01T05:10Z"
        with urllib.request.urlopen(url, timeout=30) as resp:
            assert json.loads(resp.read()) == rows
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/today?day=2024-06-01", timeout=30) as resp:
            day = json.loads(resp.read())
        assert day["batch_through"] == "2024-06-01T05:00:00Z" and day["totals"]["gmv"] == f"{paid + 5:.2f}"
        assert len(day["windows"]) == 13 and WINDOW == timedelta(minutes=5)
    finally:
        httpd.stop()
