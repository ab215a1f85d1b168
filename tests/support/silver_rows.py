"""Hand-built silver change rows (partial rows, as ``silver_source`` makes them) for MERGE tests."""

from __future__ import annotations

import datetime as dt
from typing import Any

from lakestream.silver import SILVER_SCHEMA


def ts(second: int) -> dt.datetime:
    """12:00:<second> UTC on a fixed day."""
    return dt.datetime(2024, 5, 1, 12, 0, second, tzinfo=dt.timezone.utc)


def change(order: str, eid: str, second: int, **values: Any) -> dict[str, Any]:
    """A silver change row: the given fields set by event ``eid`` at ``second``, all else null."""
    row: dict[str, Any] = dict.fromkeys(SILVER_SCHEMA.names)
    row["order_id"] = order
    for name, value in values.items():
        row[name], row[f"{name}__ts"], row[f"{name}__eid"] = value, ts(second), eid
    row["last_event_time"], row["last_event_id"] = ts(second), eid
    return row
