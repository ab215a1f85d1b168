"""A Delta table's commits read straight from its ``_delta_log`` JSON files, version by version.

The demo's live view polls five tables twice a second while the job writes them, and its report plots
every commit; both need per commit what ``DeltaTable.history()`` does not give in one place: the rows
each ``add`` brings (its ``numRecords`` statistic), the files a ``remove`` drops, the ``txn`` actions
(the Flink checkpoint each commit belongs to, DESIGN.md section 3), the ``lakestream.counters`` the
sinks record, and the ``ingest_time`` range of the rows added. Commit files are immutable
newline-delimited JSON (the Delta protocol), so reading only the versions that are new since the last
poll is cheap and never sees a half-applied commit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

#: The txn version the sinks record for their end-of-input commit (Flink's end-of-input checkpoint id).
END_OF_INPUT = 2**63 - 1
#: Commit metadata key of the sinks' per-commit counters (``sinks.committer.COUNTERS_KEY``).
COUNTERS_KEY = "lakestream.counters"


class DeltaLogError(RuntimeError):
    """A commit file could not be understood; the message names the file."""


@dataclass(frozen=True, slots=True)
class Commit:
    """One Delta version: what it added and removed, when, and which checkpoint it belongs to."""

    version: int
    timestamp_ms: int
    operation: str
    rows_added: int
    files_added: int
    files_removed: int
    #: Paths of the added files and their ``numRecords`` (None where a file has no statistics).
    added: dict[str, int | None] = field(default_factory=dict)
    removed: tuple[str, ...] = ()
    #: ``txn`` actions: app id -> version (the checkpoint id, ``END_OF_INPUT`` at the end).
    txn: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    #: ``operationMetrics`` of the commit (MERGE: rows inserted/updated, execution time).
    metrics: dict[str, Any] = field(default_factory=dict)
    #: Earliest and latest ``ingest_time`` of the added rows (epoch ms), from the files' min/max stats.
    ingest_min_ms: int | None = None
    ingest_max_ms: int | None = None

    @property
    def checkpoint(self) -> int | None:
        """The highest checkpoint id among the txn actions, None for a commit without one."""
        return max(self.txn.values()) if self.txn else None

    @property
    def is_checkpoint(self) -> bool:
        """True for a commit made by a sink at a Flink checkpoint or at end of input (has txn)."""
        return bool(self.txn)


def _epoch_ms(value: Any) -> int | None:
    """A statistic's timestamp (``2026-12-01T13:25:40.921Z``) as epoch milliseconds."""
    if not isinstance(value, str):
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def parse_commit(version: int, lines: Iterable[str]) -> Commit:
    """One commit file's actions (newline-delimited JSON) as a :class:`Commit`."""
    timestamp = 0
    operation = ""
    counters: dict[str, int] = {}
    metrics: dict[str, Any] = {}
    added: dict[str, int | None] = {}
    removed: list[str] = []
    txn: dict[str, int] = {}
    ingest: list[int] = []
    ingest_max: list[int] = []
    for line in lines:
        if not line.strip():
            continue
        action: Mapping[str, Any] = json.loads(line)
        if "commitInfo" in action:
            info = action["commitInfo"]
            timestamp = int(info.get("inCommitTimestamp") or info.get("timestamp") or 0)
            operation = str(info.get("operation", ""))
            counters = {str(k): int(v) for k, v in (info.get(COUNTERS_KEY) or {}).items()}
            metrics = dict(info.get("operationMetrics") or {})
        elif "add" in action:
            add = action["add"]
            stats = json.loads(add["stats"]) if add.get("stats") else {}
            records = stats.get("numRecords")
            added[str(add["path"])] = int(records) if records is not None else None
            low = _epoch_ms((stats.get("minValues") or {}).get("ingest_time"))
            high = _epoch_ms((stats.get("maxValues") or {}).get("ingest_time"))
            if low is not None:
                ingest.append(low)
            if high is not None:
                ingest_max.append(high)
        elif "remove" in action:
            removed.append(str(action["remove"]["path"]))
        elif "txn" in action:
            t = action["txn"]
            txn[str(t["appId"])] = int(t["version"])
    return Commit(
        version=version,
        timestamp_ms=timestamp,
        operation=operation,
        rows_added=sum(n for n in added.values() if n is not None),
        files_added=len(added),
        files_removed=len(removed),
        added=added,
        removed=tuple(removed),
        txn=txn,
        counters=counters,
        metrics=metrics,
        ingest_min_ms=min(ingest) if ingest else None,
        ingest_max_ms=max(ingest_max) if ingest_max else None,
    )


def commit_path(table: Path, version: int) -> Path:
    """The JSON commit file of ``version``."""
    return table / "_delta_log" / f"{version:020d}.json"


@dataclass
class TableLog:
    """A table's commits so far, read incrementally; its live files give the current row count.

    Reads from version 0, so it needs the table's JSON commits since its creation (Delta keeps them for
    ``delta.logRetentionDuration``, 30 days by default: always true for the demo's fresh tables).
    """

    path: Path
    commits: list[Commit] = field(default_factory=list)
    _live: dict[str, int | None] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        """True once the table's first commit is there."""
        return commit_path(self.path, 0).is_file()

    @property
    def version(self) -> int | None:
        """The newest version read, None before the table exists."""
        return self.commits[-1].version if self.commits else None

    @property
    def rows(self) -> int | None:
        """Rows in the table's current files; None when a live file has no ``numRecords``."""
        counts = self._live.values()
        return None if any(n is None for n in counts) else sum(n for n in counts if n is not None)

    @property
    def live_files(self) -> int:
        """Data files in the table at its newest version read."""
        return len(self._live)

    def poll(self) -> list[Commit]:
        """Read every commit that appeared since the last poll and return them (oldest first)."""
        new: list[Commit] = []
        version = 0 if self.version is None else self.version + 1
        while True:
            path = commit_path(self.path, version)
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                break
            try:
                commit = parse_commit(version, text.splitlines())
            except (ValueError, KeyError, TypeError) as exc:
                raise DeltaLogError(f"{path}: not a Delta commit file ({exc})") from exc
            for removed in commit.removed:
                self._live.pop(removed, None)
            self._live.update(commit.added)
            self.commits.append(commit)
            new.append(commit)
            version += 1
        return new


def counter_totals(commits: Iterable[Commit]) -> dict[str, int]:
    """The ``lakestream.counters`` of ``commits`` added up per name (each is recorded exactly once)."""
    total: dict[str, int] = {}
    for c in commits:
        for name, value in c.counters.items():
            total[name] = total.get(name, 0) + value
    return dict(sorted(total.items()))


def checkpoints_committed(commits: Iterable[Commit]) -> set[int]:
    """The Flink checkpoint ids (``END_OF_INPUT`` included) that ``commits`` carry txn actions for."""
    return {v for c in commits for v in c.txn.values()}
