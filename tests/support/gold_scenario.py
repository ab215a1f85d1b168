"""One small gold history as the layers write it, with the numbers each version must serve.

  v0  realtime upsert: 2024-05-31 23:55 and 2024-06-01 00:00 .. 00:55 (events 5, gmv 10.00 each)
  v1  batch backfill of [00:00, 00:30): events 6, gmv 11.11 each (source_version 41)
  v2  realtime upsert of 00:25 .. 01:05: events 8, gmv 20.00 each; 00:25 is a batch window and keeps
      its batch row, 00:30 .. 00:55 are updated, 01:00 and 01:05 are new

Versions are committed at least 50 ms apart, so each has its own commit time for ``--as-of TIME``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from deltalake import DeltaTable

from tests.support.gold_tables import WINDOW, at, backfill, row, upsert_realtime

DAY = at("2024-06-01T00:00")
BATCH_END = at("2024-06-01T00:30")


@dataclass(frozen=True)
class Scenario:
    """The gold table and the commit time of each version (epoch ms)."""

    table: str
    committed_ms: dict[int, int]

    @property
    def root(self) -> str:
        """The lakehouse root the gold table is under."""
        return self.table.rsplit("/", 2)[0]


def write(root: Path | str, table: str = "gold/order_metrics_5m") -> Scenario:
    """Write the three versions under lakehouse ``root`` (a folder or an object-store URI)."""
    uri = f"{root}/{table}"
    upsert_realtime(
        uri,
        [row(at("2024-05-31T23:55"), events=5, gmv="10.00")]
        + [row(DAY + i * WINDOW, events=5, gmv="10.00") for i in range(12)],
    )
    time.sleep(0.05)
    backfill(
        uri,
        [row(DAY + i * WINDOW, layer="batch", events=6, gmv="11.11", source_version=41) for i in range(6)],
        DAY,
        BATCH_END,
    )
    time.sleep(0.05)
    upsert_realtime(uri, [row(DAY + i * WINDOW, events=8, gmv="20.00") for i in range(5, 14)])
    history = DeltaTable(uri).history()
    return Scenario(uri, {int(h["version"]): int(h["timestamp"]) for h in history})


def expected_v2(start_index: int, end_index: int) -> list[tuple[str, str, int, str, str]]:
    """(window_start, layer, events, gmv, day_gmv) of windows ``DAY + i * WINDOW`` for i in range, at v2."""
    out = []
    day_gmv = Decimal("0")
    for i in range(14):
        layer, events, gmv = ("batch", 6, "11.11") if i < 6 else ("realtime", 8, "20.00")
        day_gmv += Decimal(gmv)
        if start_index <= i < end_index:
            start = (DAY + i * WINDOW).strftime("%Y-%m-%dT%H:%M:%SZ")
            out.append((start, layer, events, gmv, f"{day_gmv:.2f}"))
    return out
