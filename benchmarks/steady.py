"""Steady-state rate of an ingest run: events committed per second from one mid-run checkpoint to another.

The bounded run's "sustained" rate (first record read -> everything committed) includes the end of input:
after the last batch the resolve operator drains, the last MERGE runs and the job shuts down, about 2 s
that an unbounded job never pays. This module measures what an unbounded job keeps up with instead,
from the tables themselves: every commit of the ingest job carries its checkpoint id (the Delta txn
version, also in the commit's ``lakestream.appVersions``), and every staged file's name carries the
checkpoint it belongs to (``...-c<id>.snappy.parquet``). So for checkpoints k1 < k2, both completed
before the end of input,

    steady rate = input events staged under checkpoints k1+1 .. k2 / (T(k2) - T(k1))

where T(k) is when the last table's commit of checkpoint k landed and the input events of a checkpoint
are its bronze plus quarantine rows (every Kafka record lands in exactly one of the two). The interval
holds whole checkpoint cycles (reading, barriers, Parquet staging, the Delta commits and the silver
MERGE), so nothing the job does per checkpoint is left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sinks.writer import EOI_CHECKPOINT_ID  # end-of-input commits: not a steady-state checkpoint

#: Tables whose rows are the input events (each Kafka record is in exactly one of them).
INPUT_TABLES = ("bronze/order_events", "quarantine/order_events")
#: Tables whose commits must all have landed for a checkpoint to count as committed.
COMMIT_TABLES = (
    "bronze/order_events",
    "quarantine/order_events",
    "review/order_events",
    "late/order_events",
    "silver/orders",
)
_FILE_CHECKPOINT = re.compile(r"-c(\d+)\.[^/]*$")
APP_VERSIONS = "lakestream.appVersions"


@dataclass(frozen=True)
class Commit:
    """One Delta commit of the job: its table, when it landed (epoch s), the txn versions it carries."""

    table: str
    at_s: float
    versions: Mapping[str, int]


def file_checkpoint(path: str) -> int | None:
    """Checkpoint id in a staged data file's name, ``None`` for files not written by the sink."""
    m = _FILE_CHECKPOINT.search(path)
    return int(m.group(1)) if m else None


def commit_times(commits: Iterable[Commit], *, required: Iterable[str]) -> dict[int, float]:
    """T(k) for every mid-run checkpoint k that each ``required`` table committed under its own id.

    T(k) is the latest commit carrying version k, over all tables. A checkpoint counts only when every
    app id of the required tables (one per writing subtask) has a commit of exactly version k: a
    catch-up commit (one commit for several checkpoints) or a subtask without a commit for k would
    leave T(k) undefined, and such a checkpoint is skipped rather than guessed.
    """
    commits = list(commits)
    required = set(required)
    apps: dict[str, set[str]] = {}
    exact: dict[tuple[str, int], float] = {}
    latest: dict[int, float] = {}
    for c in commits:
        for app, version in c.versions.items():
            apps.setdefault(c.table, set()).add(app)
            if version == EOI_CHECKPOINT_ID:
                continue
            exact[(app, version)] = max(exact.get((app, version), 0.0), c.at_s)
            latest[version] = max(latest.get(version, 0.0), c.at_s)
    out = {}
    for k, t in latest.items():
        if all((app, k) in exact for table in required for app in apps.get(table, {"<none>"})):
            out[k] = t
    return dict(sorted(out.items()))


def steady_rate(times: Mapping[int, float], events: Mapping[int, int]) -> dict[str, Any] | None:
    """Events per second from the first to the last committed mid-run checkpoint (None: fewer than two)."""
    ks = sorted(times)
    if len(ks) < 2:
        return None
    k1, k2 = ks[0], ks[-1]
    n = sum(v for k, v in events.items() if k1 < k <= k2)
    seconds = times[k2] - times[k1]
    if seconds <= 0:
        return None
    return {
        "from_checkpoint": k1,
        "to_checkpoint": k2,
        "events": n,
        "seconds": round(seconds, 3),
        "events_per_s": round(n / seconds),
    }


def read_commits(root: Path, tables: Iterable[str] = COMMIT_TABLES) -> list[Commit]:
    """The job's commits (those carrying ``lakestream.appVersions``) of the tables under ``root``."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    out = []
    for table in tables:
        try:
            history = DeltaTable(str(root / table)).history()
        except TableNotFoundError:
            continue
        for h in history:
            versions = h.get(APP_VERSIONS)
            if isinstance(versions, dict) and versions:
                out.append(Commit(table, h["timestamp"] / 1000.0, {a: int(v) for a, v in versions.items()}))
    return out


def events_by_checkpoint(root: Path, tables: Iterable[str] = INPUT_TABLES) -> dict[int, int]:
    """Rows of the input tables per checkpoint id (from the file names and the log's ``numRecords``)."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    out: dict[int, int] = {}
    for table in tables:
        try:
            adds = pa.table(DeltaTable(str(root / table)).get_add_actions(flatten=True))
        except TableNotFoundError:
            continue
        for path, rows in zip(adds["path"].to_pylist(), adds["num_records"].to_pylist(), strict=True):
            k = file_checkpoint(path)
            if k is not None and rows is not None:
                out[k] = out.get(k, 0) + int(rows)
    return out


def produce_input(bootstrap: str, topics: dict[str, str], events: int, *, chunk_orders: int = 50_000) -> int:
    """At least ``events`` messy events with fresh order ids, produced chunk by chunk; how many were sent.

    The chunks of the memory run (``benchmarks.memory.chunk_messages``: every chunk its own seed, its
    order ids past the previous chunk's), so the run resolves new orders throughout, as the 1M-event
    workload does, instead of de-duplicating a repeated one. One chunk is in memory at a time.
    """
    from benchmarks.memory import chunk_messages
    from benchmarks.workload import produce_messages

    sent, k = 0, 0
    while sent < events:
        chunk = chunk_messages(k, chunk_orders, topics)[: events - sent]
        sent += sum(produce_messages(bootstrap, ((t, key, v) for (t, key, v, _), _oid in chunk)).values())
        k += 1
    return sent


def measure(root: Path) -> dict[str, Any] | None:
    """The steady-state rate of the ingest run whose tables are under ``root`` (None: too short a run)."""
    times = commit_times(read_commits(root), required=("bronze/order_events", "silver/orders"))
    return steady_rate(times, events_by_checkpoint(root))
