"""The live page of ``lakestream serve`` in a real headless Chromium: today's numbers, then new ones.

The expected numbers are read from the Delta tables with delta-rs directly, not through the server's
code. Needs Chromium (``apt-get install chromium``); without it the test fails and says so.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from lakestream.config import Config, LakehouseConfig, ServeConfig
from lakestream.standard import LATE_SCHEMA, QUARANTINE_SCHEMA
from lakestream.time import iso_utc
from serving.http_server import HttpServer
from tests.support.chromium import Browser
from tests.support.gold_tables import WINDOW, append_rows, backfill, ingest_rows, row, upsert_realtime

UTC = timezone.utc


def _today_windows(now: datetime) -> list[datetime]:
    """Up to eight windows of today that have ended, the newest ending at or before ``now``."""
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    done = int((now - midnight) / WINDOW)
    return [midnight + i * WINDOW for i in range(max(0, done - 8), done)] or [midnight]


def _expected(table: Path, day: datetime) -> dict[str, str]:
    """Today's totals and newest data time, computed from the table's rows with pyarrow."""
    data = pq.read_table(DeltaTable(str(table)).file_uris())
    ts = pa.timestamp("us", tz="UTC")
    mask = pc.and_(
        pc.greater_equal(data["window_start"], pa.scalar(day, type=ts)),
        pc.less(data["window_start"], pa.scalar(day + timedelta(days=1), type=ts)),
    )
    today = data.filter(mask)
    gmv = sum((Decimal(str(v)) for v in today["gmv"].to_pylist()), Decimal("0"))
    newest = max(today["data_time"].to_pylist())
    return {
        "gmv": f"{gmv:,.2f}",
        "orders": f"{pc.sum(today['orders_created']).as_py():,}",
        "events": f"{pc.sum(today['events']).as_py():,}",
        "data_as_of": newest.astimezone(UTC).strftime("%H:%M:%S"),
        "windows": str(today.num_rows),
    }


READ = """JSON.stringify({
  gmv: document.getElementById('total-gmv').textContent,
  orders: document.getElementById('total-orders').textContent,
  events: document.getElementById('total-events').textContent,
  data_as_of: document.getElementById('data-as-of').textContent,
  late: document.getElementById('late-count').textContent,
  quarantined: document.getElementById('quarantine-count').textContent,
  version: document.body.dataset.version,
  bars: String(document.querySelectorAll('#chart rect').length),
  rows: String(document.querySelectorAll('#windows tbody tr').length),
  error: document.getElementById('error').style.display
})"""


@pytest.fixture
def browser() -> Iterator[Browser]:
    b = Browser()
    try:
        yield b
    finally:
        b.close()


def _page(browser: Browser) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(browser.evaluate(READ))
    return value


def test_the_page_shows_todays_numbers_and_follows_a_new_commit(tmp_path: Path, browser: Browser) -> None:
    root = tmp_path / "lakehouse"
    gold = root / "gold/order_metrics_5m"
    now = datetime.now(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    windows = _today_windows(now)
    upsert_realtime(gold, [row(w, events=7, orders=3, payments=2, gmv="12.34") for w in windows])
    upsert_realtime(gold, [row(day - WINDOW, events=99, gmv="999.99")])  # yesterday: not on the page
    append_rows(root / "late/order_events", ingest_rows(LATE_SCHEMA, [now, now, day - timedelta(seconds=1)]))
    append_rows(root / "quarantine/order_events", ingest_rows(QUARANTINE_SCHEMA, [now] * 4))

    cfg = Config(
        lakehouse=LakehouseConfig(root=str(root)), serve=ServeConfig(port=0, refresh=timedelta(seconds=0.5))
    )
    httpd = HttpServer(cfg, quiet=True).start()
    try:
        browser.goto(f"http://127.0.0.1:{httpd.address[1]}/")
        browser.wait_for("document.body.dataset.version === '1'")
        shown = _page(browser)
        expected = _expected(gold, day)
        assert shown["error"] == "none"
        assert {k: shown[k] for k in ("gmv", "orders", "events", "data_as_of")} == {
            k: expected[k] for k in ("gmv", "orders", "events", "data_as_of")
        }
        assert shown["gmv"] == f"{Decimal('12.34') * len(windows):,.2f}"
        assert (shown["late"], shown["quarantined"]) == ("2", "4")
        assert shown["bars"] == str(2 * len(windows))  # a GMV bar and an orders bar per window
        assert shown["rows"] == str(min(12, len(windows)))
        # Each window links to its explanation: the newest row (first) and every bar.
        href = browser.evaluate(
            "document.querySelector('#windows tbody tr td:first-child a').getAttribute('href')"
        )
        assert href == f"/api/explain/window/{iso_utc(windows[-1])}"
        assert browser.evaluate("document.querySelectorAll('#chart a rect').length") == 2 * len(windows)
        with urllib.request.urlopen(f"http://127.0.0.1:{httpd.address[1]}{href}", timeout=30) as resp:
            explained = json.loads(resp.read())
        assert (explained["window_start"], explained["row"]["gmv"]) == (iso_utc(windows[-1]), "12.34")
        browser.screenshot(tmp_path / "before.png")

        # A batch backfill of the first window and a new realtime window: the page follows by itself.
        first = windows[0]
        backfill(gold, [row(first, layer="batch", events=1, orders=1, gmv="1000.00")], first, first + WINDOW)
        newest = windows[-1] + WINDOW
        upsert_realtime(gold, [row(newest, events=5, orders=4, gmv="0.66", data_time=newest + WINDOW)])
        browser.wait_for("document.body.dataset.version === '3'", timeout=20)
        shown = _page(browser)
        expected = _expected(gold, day)
        assert {k: shown[k] for k in ("gmv", "orders", "events", "data_as_of")} == {
            k: expected[k] for k in ("gmv", "orders", "events", "data_as_of")
        }
        assert shown["gmv"] == f"{Decimal('12.34') * (len(windows) - 1) + Decimal('1000.66'):,.2f}"
        assert browser.evaluate("document.getElementById('boundary').textContent").startswith(
            "batch through "
        )
        browser.screenshot(tmp_path / "after.png")
    finally:
        httpd.stop()
