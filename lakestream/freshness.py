"""What a table holds, written in its commit metadata: the newest event and checkpoint it includes.

Commits of silver (copy-on-write MERGEs, merge-on-read changes and folds) carry ``FRESHNESS_KEY``: a
JSON object with ``newest_event_time`` (ISO 8601 UTC, the greatest event time the table holds after
the commit) and what the commit adds (``checkpoint``, or a fold's ``folded_through``). Any engine sees
it in the table history; ``lakestream tables`` shows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from lakestream.time import iso_utc, parse_time

#: Commit metadata key of a commit's freshness.
FRESHNESS_KEY = "lakestream.freshness"


def newest(*times: str | datetime | None) -> str | None:
    """The latest of ISO texts / datetimes (None ignored), as ISO text; None when there is none."""
    parsed = [parse_time(t, name=FRESHNESS_KEY) if isinstance(t, str) else t for t in times if t is not None]
    return iso_utc(max(parsed)) if parsed else None


def latest_freshness(history: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The freshness of the newest commit (newest first, as ``DeltaTable.history`` lists) that has one."""
    for entry in history:
        value = entry.get(FRESHNESS_KEY)
        if isinstance(value, dict):
            return value
    return {}


def describe(freshness: Mapping[str, Any]) -> str:
    """One line for people: the newest event, and the checkpoint or fold point."""
    parts = []
    if freshness.get("newest_event_time"):
        parts.append(f"newest event {freshness['newest_event_time']}")
    if freshness.get("checkpoint") is not None:
        parts.append(f"checkpoint {freshness['checkpoint']}")
    if freshness.get("folded_through") is not None:
        parts.append(f"changes folded through {freshness['folded_through']}")
    return ", ".join(parts)
