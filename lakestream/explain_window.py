"""What a gold window counted: its row, bronze's events of the window and how gold's definition took them.

``explain_window`` takes the window's gold row, its bronze rows (every delivery, every quality) and
its rows of the late table, and says by the gold definition itself (``lakestream.gold``:
``first_deliveries``, ``gold_inputs``, ``aggregate``, ``beyond_lateness``) what was counted, by kind;
which rows were left out (re-deliveries, SUSPICIOUS and INVALID events); which events the speed layer
dropped as beyond the allowed lateness; and the figures a recompute gives, with and without them.
Which reconcile runs and backfills touched the row is read by the caller (DESIGN.md section 12).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakestream.gold import (
    KIND_ORDER_CREATED,
    KIND_OTHER,
    KIND_PAYMENT,
    METRIC_NAMES,
    GoldSettings,
    aggregate,
    beyond_lateness,
    first_deliveries,
    gold_inputs,
    to_us,
)

#: Names of the kind codes, as the explanation shows them.
KIND_NAMES: Mapping[int, str] = {
    KIND_ORDER_CREATED: "order_created",
    KIND_PAYMENT: "payment",
    KIND_OTHER: "other",
}


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A bronze row of the window that gold does not count, or the speed layer dropped."""

    event_id: str
    source: str
    event_time: datetime
    topic: str
    partition: int
    offset: int
    reason: str
    #: Seconds behind the watermark it arrived at (events beyond the allowed lateness).
    lateness_s: float | None = None


@dataclass(frozen=True)
class WindowExplanation:
    """Everything ``explain window`` says about one window."""

    window_start: datetime
    window_end: datetime
    #: The figures of bronze's rows by gold's definition (what a backfill writes).
    recomputed: Mapping[str, Any]
    #: The same without the events beyond the allowed lateness (what the speed layer counts).
    speed_layer: Mapping[str, Any]
    #: Inputs counted (first VALID deliveries), by kind name.
    counted: Mapping[str, int]
    duplicates: tuple[LeftOut, ...]
    not_valid: tuple[LeftOut, ...]
    beyond_lateness: tuple[LeftOut, ...]
    bronze_rows: int


def _metrics(rows: pa.Table, start: datetime, end: datetime, settings: GoldSettings) -> dict[str, Any]:
    table = aggregate(gold_inputs(rows), settings, over=(start, end))
    row: dict[str, Any] = table.to_pylist()[0]
    return {m: row[m] for m in METRIC_NAMES}


def _left_out(
    rows: pa.Table, mask: np.ndarray[Any, Any], reason: Sequence[str], lateness: Any = None
) -> tuple[LeftOut, ...]:
    picked = rows.filter(pa.array(mask)).to_pylist()
    reasons = [r for r, m in zip(reason, mask, strict=True) if m]
    late = [None] * len(picked) if lateness is None else [v for v, m in zip(lateness, mask, strict=True) if m]
    out = [
        LeftOut(
            r["event_id"],
            r["source"],
            r["event_time"],
            r["topic"],
            int(r["partition"]),
            int(r["offset"]),
            why,
            lt,
        )
        for r, why, lt in zip(picked, reasons, late, strict=True)
    ]
    return tuple(sorted(out, key=lambda e: (e.event_time, e.topic, e.partition, e.offset)))


def explain_window(
    start: datetime,
    end: datetime,
    bronze: pa.Table,
    late: pa.Table,
    settings: GoldSettings,
) -> WindowExplanation:
    """Explain the window ``[start, end)`` from its bronze rows and its rows of the late table.

    ``bronze``: ``BRONZE_SCHEMA`` rows with event time in the window; ``late``: ``LATE_SCHEMA`` rows of
    the window (matched to bronze by Kafka coordinates).
    """
    counted = first_deliveries(bronze)
    quality = bronze["quality"].to_pylist()
    ids = bronze["event_id"].to_pylist()
    valid = np.array([q == "VALID" for q in quality], dtype=bool)
    first_at = {
        ids[i]: f"{r['topic']}/{r['partition']}@{r['offset']}"
        for i, r in enumerate(bronze.select(["topic", "partition", "offset"]).to_pylist())
        if counted[i]
    }
    duplicates = _left_out(
        bronze,
        valid & ~counted,
        [f"a re-delivery of {i}; its first delivery {first_at.get(i)} is counted" for i in ids],
    )
    reasons = bronze["quality_reason"].to_pylist()
    not_valid = _left_out(
        bronze,
        ~valid,
        [f"tagged {q}: {r or 'no reason given'}" for q, r in zip(quality, reasons, strict=True)],
    )
    # The late table's rows, by coordinates: the watermark each arrived at.
    watermarks: dict[tuple[str, int, int], datetime] = {
        (r["topic"], int(r["partition"]), int(r["offset"])): r["watermark"]
        for r in late.select(["topic", "partition", "offset", "watermark"]).to_pylist()
    }
    coords = bronze.select(["topic", "partition", "offset", "event_time"]).to_pylist()
    dropped = np.zeros(bronze.num_rows, dtype=bool)
    lateness: list[float | None] = [None] * bronze.num_rows
    for i, c in enumerate(coords):
        mark = watermarks.get((c["topic"], int(c["partition"]), int(c["offset"])))
        if mark is not None and counted[i] and beyond_lateness(to_us(c["event_time"]), to_us(mark), settings):
            dropped[i] = True
            lateness[i] = (mark - c["event_time"]).total_seconds()
    too_late = _left_out(
        bronze,
        dropped,
        [
            "arrived behind its partition's watermark by more than gold.allowed_lateness "
            f"({settings.allowed_lateness})"
        ]
        * bronze.num_rows,
        lateness,
    )
    kinds = pc.value_counts(gold_inputs(bronze)["kind"]).to_pylist()
    by_kind = {name: 0 for name in KIND_NAMES.values()}
    for entry in kinds:
        by_kind[KIND_NAMES[int(entry["values"])]] = int(entry["counts"])
    return WindowExplanation(
        window_start=start,
        window_end=end,
        recomputed=_metrics(bronze, start, end, settings),
        speed_layer=_metrics(bronze.filter(pa.array(~dropped)), start, end, settings),
        counted=by_kind,
        duplicates=duplicates,
        not_valid=not_valid,
        beyond_lateness=too_late,
        bronze_rows=bronze.num_rows,
    )
