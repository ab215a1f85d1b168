"""What the change feed writes to Kafka: JSON change events and the source's position records.

A change event is one output row of the Delta source in CDF mode as a flat JSON object, the table's
columns plus ``_change_type``, ``_commit_version`` and ``_commit_timestamp``, like Spark's
``to_json(struct(*))`` of a change feed: times ISO 8601, decimals as strings, binary as base64.
A position record's value holds the source's progress values, so the next run starts where the last
committed changes end (DESIGN.md section 9).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

#: What a position record's value holds besides the progress values.
POSITION_FORMAT = 1


def _json_value(value: Any) -> Any:
    """``value`` as JSON can hold it, without loss of precision."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value


def change_event_json(names: Sequence[str], row: Sequence[Any]) -> str:
    """One output row of the CDF source as a JSON change event (columns + metadata fields)."""
    return json.dumps(
        {name: _json_value(v) for name, v in zip(names, row, strict=True)},
        separators=(",", ":"),
        ensure_ascii=False,
    )


def position_value(progress: dict[str, int]) -> str:
    """A position record's value (JSON)."""
    return json.dumps({"format": POSITION_FORMAT, "progress": dict(sorted(progress.items()))})


def parse_position(text: str) -> dict[str, int]:
    """The progress values of a position record's value."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("format") != POSITION_FORMAT:
        raise ValueError(f"not a lakestream position record: {text[:200]!r}")
    return {str(k): int(v) for k, v in doc["progress"].items()}
