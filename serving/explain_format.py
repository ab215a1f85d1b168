"""An explanation as JSON (the CLI's ``--format json`` and ``serve``'s endpoints) and as text.

One JSON shape for both: plain values (times ISO 8601 UTC, amounts as decimal strings), the table
versions read, and per field or window what ``lakestream.explain_order`` / ``explain_window`` found.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from lakestream.explain_order import EventRef, OrderExplanation
from lakestream.explain_window import WindowExplanation
from lakestream.time import iso_utc
from serving.explain_read import TableVersions, WindowFacts

#: Entries of a list the text shows before saying how many more there are (JSON gives all).
SHOWN = 20


def plain(value: Any) -> Any:
    """A value as JSON has it: times ISO 8601 UTC, decimals as strings, containers recursively."""
    if isinstance(value, datetime):
        return iso_utc(value)
    if isinstance(value, Decimal):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _read(versions: TableVersions) -> dict[str, Any]:
    return {
        "from": versions.point.table,
        "version": versions.point.version,
        "as_of": None if versions.point.latest else iso_utc(versions.point.at),
        "tables": dict(versions.versions),
    }


def _event(ref: EventRef | None) -> dict[str, Any] | None:
    if ref is None:
        return None
    out: dict[str, Any] = plain(ref)
    out["coordinates"] = ref.coordinates
    return out


def order_json(explanation: OrderExplanation, versions: TableVersions) -> dict[str, Any]:
    """The JSON document of an order's explanation."""
    return {
        "order_id": explanation.order_id,
        "read": _read(versions),
        "in_silver": explanation.silver is not None,
        "fields": [
            {
                "field": f.field,
                "value": plain(f.value),
                "event_time": plain(f.time),
                "event_id": f.winner_id,
                "set_by": _event(f.winner),
                "others": [
                    {"event": _event(o.event), "value": plain(o.value), "outcome": o.outcome, "why": o.detail}
                    for o in f.others
                ],
            }
            for f in explanation.fields
        ],
        "timeline": [
            {
                "event": _event(e.event),
                "outcome": e.outcome,
                "why": e.detail,
                "tables": list(e.tables),
                "fields_set": list(e.fields_won),
                "late_watermark": None if e.late is None else iso_utc(e.late.watermark),
                "first_delivery": _event(e.first_delivery),
            }
            for e in explanation.timeline
        ],
        "silver_changes": [
            {
                "event": _event(c.event),
                "set": plain(c.values),
                "silver_version": c.silver_version,
                "silver_table": c.silver_table,
            }
            for c in explanation.history
        ],
        "unreadable_records_naming_it": plain(explanation.rejects),
        "problems": list(explanation.problems),
    }


def window_json(
    explanation: WindowExplanation, facts: WindowFacts, versions: TableVersions
) -> dict[str, Any]:
    """The JSON document of a window's explanation."""
    row = plain(facts.row)
    return {
        "window_start": iso_utc(explanation.window_start),
        "window_end": iso_utc(explanation.window_end),
        "read": _read(versions),
        "row": row,
        "realtime": plain(facts.realtime) if facts.row.layer == "batch" else row,
        "realtime_version": facts.realtime_version,
        "batch": row if facts.row.layer == "batch" else None,
        "recomputed": plain(explanation.recomputed),
        "speed_layer_counts": plain(explanation.speed_layer),
        "counted_by_kind": dict(explanation.counted),
        "bronze_rows": explanation.bronze_rows,
        "duplicates_left_out": plain(explanation.duplicates),
        "not_valid_left_out": plain(explanation.not_valid),
        "beyond_allowed_lateness": plain(explanation.beyond_lateness),
        "backfills": [{"gold_version": v, "run_id": run} for v, run in facts.backfills],
        "reconcile": plain(facts.reconcile),
    }


def _value(value: Any) -> str:
    return "-" if value is None else str(plain(value))


def order_text(explanation: OrderExplanation, versions: TableVersions) -> str:
    """The explanation of an order for people: per field, then the timeline."""
    p = versions.point
    lines = [
        f"order {explanation.order_id}: {p.table} version {p.version}"
        + ("" if p.latest else f" (as of {iso_utc(p.at)})")
        + "; "
        + ", ".join(f"{t} v{v}" for t, v in versions.versions.items() if t != p.table and v is not None),
    ]
    if explanation.silver is None:
        lines.append("  not in silver: no VALID event of it was applied at that version")
    for f in explanation.fields:
        if f.value is None and not f.others:
            continue
        if f.winner is not None:
            who = (
                f"set by {f.winner.event_id} ({f.winner.source} {f.winner.event_type}, "
                f"{f.winner.coordinates}, "
                f"event time {_value(f.winner.event_time)}, ingested {_value(f.winner.ingest_time)}, "
                f"bronze v{_value(f.winner.bronze_version)})"
            )
        else:
            who = "no event set it" if f.winner_id is None else f"set by {f.winner_id} (not in bronze)"
        lines.append(f"{f.field} = {_value(f.value)}  {who}")
        for o in f.others:
            lines.append(
                f"    {_value(o.value)}: {o.event.event_id} ({o.event.coordinates}) {o.outcome}: {o.detail}"
            )
    lines.append("timeline (event time order):")
    for e in explanation.timeline:
        lines.append(
            f"  {_value(e.event.event_time)}  {e.event.event_id}  {e.event.source} {e.event.event_type}  "
            f"{e.event.coordinates}  [{'+'.join(e.tables)}]  {e.outcome}: {e.detail}"
        )
    lines.append("silver changes (the rule replayed in delivery order):")
    for c in explanation.history:
        where = f"{c.silver_table} v{c.silver_version}"
        if c.silver_version is None:
            where = "silver version unknown"
        values = ", ".join(f"{k}={_value(v)}" for k, v in c.values.items())
        lines.append(f"  {where}: {values}  by {c.event.event_id} ({_value(c.event.event_time)})")
    for r in explanation.rejects:
        lines.append(
            f"  unreadable record naming it: {r.source} {r.topic}/{r.partition}@{r.offset} "
            f"quarantined: {r.reason}"
        )
    for problem in explanation.problems:
        lines.append(f"PROBLEM: {problem}")
    return "\n".join(lines) + "\n"


def window_text(explanation: WindowExplanation, facts: WindowFacts, versions: TableVersions) -> str:
    """The explanation of a window for people."""
    p = versions.point
    row = facts.row
    metrics = ("events", "orders_created", "payments", "gmv", "active_users")
    lines = [
        f"window [{iso_utc(explanation.window_start)}, {iso_utc(explanation.window_end)}): {p.table} version "
        f"{p.version}; layer {row.layer}, data time {_value(row.data_time)}, source version "
        f"{_value(row.source_version)}, updated {_value(row.updated_at)}",
        "  " + "  ".join(f"{m}={_value(getattr(row, m))}" for m in metrics) + "  (gold)",
    ]
    if facts.realtime is not None:
        lines.append(
            "  "
            + "  ".join(f"{m}={_value(getattr(facts.realtime, m))}" for m in metrics)
            + f"  (realtime, gold version {facts.realtime_version}, before the batch row replaced it)"
        )
    lines.append(
        "  "
        + "  ".join(f"{m}={_value(explanation.recomputed[m])}" for m in metrics)
        + "  (recomputed from bronze)"
    )
    lines.append(
        "  "
        + "  ".join(f"{m}={_value(explanation.speed_layer[m])}" for m in metrics)
        + "  (bronze without the events beyond the allowed lateness: what the speed layer counts)"
    )
    lines.append(
        f"counted {sum(explanation.counted.values())} of {explanation.bronze_rows} bronze rows: "
        + ", ".join(f"{k} {v}" for k, v in explanation.counted.items())
    )
    for title, entries in (
        ("re-deliveries left out", explanation.duplicates),
        ("SUSPICIOUS/INVALID left out", explanation.not_valid),
        ("beyond the allowed lateness (speed layer only)", explanation.beyond_lateness),
    ):
        lines.append(f"{title}: {len(entries)}")
        for e in entries[:SHOWN]:
            late = "" if e.lateness_s is None else f", {e.lateness_s:.0f} s behind the watermark"
            lines.append(
                f"    {e.event_id} ({e.source} {e.topic}/{e.partition}@{e.offset}{late}): {e.reason}"
            )
        if len(entries) > SHOWN:
            lines.append(f"    ... {len(entries) - SHOWN} more (--format json lists all)")
    for version, run in facts.backfills:
        lines.append(f"backfill {run or '?'} wrote it at gold version {version}")
    for r in facts.reconcile:
        fixed = "fixed" if r.get("fixed") else "not fixed"
        lines.append(
            f"reconcile {r['run_id']} at {_value(r['run_time'])}: {r['metric']} "
            f"gold {_value(r['gold_value'])} "
            f"recomputed {_value(r['recomputed_value'])} ({fixed})"
        )
    return "\n".join(lines) + "\n"
