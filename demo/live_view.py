"""The demo's live view: events produced per source, rows committed per table, late, duplicates,
quarantined and checkpoints, while the job runs.

Everything shown is read from outside the job, so it works the same for a local MiniCluster and a
cluster, on a local folder and on an object store: the producer's acknowledged counts, and the tables'
``_delta_log`` commits (:class:`storage.delta_log.TableLog`): rows from the ``add`` statistics,
checkpoints from the sinks' txn actions, late and duplicate events from the ``lakestream.counters`` of
the silver committer's commits (in ``silver/orders_changes`` when silver is merge-on-read). On a
terminal it is a ``rich`` live table redrawn twice a second; otherwise (CI logs, a pipe) one plain line
every few seconds.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from lakestream.table_names import (
    BRONZE_TABLE,
    LATE_TABLE,
    QUARANTINE_TABLE,
    REVIEW_TABLE,
    SILVER_CHANGES_TABLE,
    SILVER_TABLE,
    TABLES,
)
from storage.delta_log import END_OF_INPUT, TableLog, checkpoints_committed, counter_totals, location

ProgressMode = Literal["auto", "live", "plain"]

#: What a phase waits for, shown next to it in the live view.
STARTING_HINTS = {
    "starting the job": "JVM, job deployment, Python workers; the paced events follow once its tables exist",
}


@dataclass(frozen=True, slots=True)
class TableState:
    """One table as the live view shows it."""

    name: str
    rows: int | None
    version: int | None
    #: Commits carrying a sink's txn action (one per checkpoint that had something for the table).
    checkpoint_commits: int
    last_commit_ms: int | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the live view shows at one moment (built by :class:`Watcher`, drawn by the renderers)."""

    elapsed_s: float
    phase: str
    produced: dict[str, int]
    planned: dict[str, int]
    tables: tuple[TableState, ...]
    #: Bronze rows once every event that is not malformed has landed (the sample's model knows them).
    expected_bronze: int
    counters: dict[str, int] = field(default_factory=dict)
    #: Flink checkpoints whose commits reached a table (the end-of-input commit not counted).
    checkpoints: int = 0
    end_of_input: bool = False

    def table(self, name: str) -> TableState | None:
        """The state of table ``name``, None when it is not watched."""
        return next((t for t in self.tables if t.name == name), None)

    def rows(self, name: str) -> int:
        """Rows of table ``name`` (0 before it exists)."""
        t = self.table(name)
        return t.rows or 0 if t is not None else 0


class Watcher:
    """Polls the tables under a lakehouse root (a folder or ``s3://...``); :meth:`snapshot` reads what is
    new since the last call."""

    def __init__(self, root: str | Path, tables: Sequence[str] = TABLES) -> None:
        self.root = str(root)
        self.logs = {name: TableLog(location(self.root, name)) for name in tables}
        #: Where a merge-on-read silver's committer commits (and its counters); not shown as a table.
        self._silver_changes = TableLog(location(self.root, SILVER_CHANGES_TABLE))

    def all_exist(self) -> bool:
        """True once every watched table of the ingest (``TABLES``) has its first commit: the job's
        writers have opened."""
        return all(log.exists for name, log in self.logs.items() if name in TABLES)

    def poll(self) -> None:
        """Read every commit that appeared since the last poll."""
        for log in self.logs.values():
            log.poll()
        if SILVER_TABLE in self.logs:
            self._silver_changes.poll()

    def snapshot(
        self,
        *,
        elapsed_s: float,
        phase: str,
        produced: Mapping[str, int],
        planned: Mapping[str, int],
        expected_bronze: int,
    ) -> Snapshot:
        """Poll the tables and put the numbers together."""
        self.poll()
        states = []
        ids: set[int] = set()
        for name, log in self.logs.items():
            marked = [c for c in log.commits if c.is_checkpoint]
            ids |= checkpoints_committed(marked)
            states.append(
                TableState(
                    name=name,
                    rows=log.rows,
                    version=log.version,
                    checkpoint_commits=len(marked),
                    last_commit_ms=log.commits[-1].timestamp_ms if log.commits else None,
                )
            )
        silver = self.logs.get(SILVER_TABLE)
        return Snapshot(
            elapsed_s=elapsed_s,
            phase=phase,
            produced=dict(produced),
            planned=dict(planned),
            tables=tuple(states),
            expected_bronze=expected_bronze,
            counters=counter_totals([*silver.commits, *self._silver_changes.commits])
            if silver is not None
            else {},
            checkpoints=len(ids - {END_OF_INPUT}),
            end_of_input=END_OF_INPUT in ids,
        )


def _short(name: str) -> str:
    return name.split("/", 1)[0]


def plain_line(s: Snapshot) -> str:
    """One line for logs: ``[  12s] running | produced 1200/1989 | bronze 800 ... | checkpoints 3``."""
    produced = sum(s.produced.values())
    planned = sum(s.planned.values())
    tables = " ".join(f"{_short(t.name)} {t.rows or 0}" for t in s.tables)
    checkpoints = f"checkpoints {s.checkpoints}" + (" + end of input" if s.end_of_input else "")
    return (
        f"[{s.elapsed_s:5.0f}s] {s.phase} | produced {produced}/{planned} | rows: {tables} | "
        f"late {s.rows(LATE_TABLE)}, duplicates {s.counters.get('events_duplicate', 0)}, "
        f"quarantined {s.rows(QUARANTINE_TABLE)} | {checkpoints}"
    )


def render(s: Snapshot, *, now_ms: int | None = None) -> Any:
    """The live view as a ``rich`` renderable: two progress bars, the tables, the event counts."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    now = now_ms if now_ms is not None else int(time.time() * 1000)
    head: Any = Text.assemble(("lakestream demo", "bold"), f"  {s.elapsed_s:4.0f}s  ", (s.phase, "cyan"))
    if s.phase in STARTING_HINTS:
        head.append(f"  ({STARTING_HINTS[s.phase]})", style="dim")
    if s.phase != "done":
        from rich.spinner import Spinner

        head = Spinner("dots", text=head, style="cyan")
    bars = Table.grid(padding=(0, 1))
    bars.add_column(min_width=20)
    bars.add_column(width=34)
    bars.add_column()
    produced, planned = sum(s.produced.values()), sum(s.planned.values())
    bars.add_row(
        "produced to Kafka",
        ProgressBar(total=max(planned, 1), completed=produced),
        f"{produced}/{planned} events",
    )
    bronze = s.rows(BRONZE_TABLE)
    bars.add_row(
        "committed to bronze",
        ProgressBar(total=max(s.expected_bronze, 1), completed=min(bronze, s.expected_bronze)),
        f"{bronze}/{s.expected_bronze} events",
    )
    per_source = Text(
        "per source: " + "   ".join(f"{k} {s.produced.get(k, 0)}/{v}" for k, v in sorted(s.planned.items())),
        style="dim",
    )
    tables = Table(box=None, pad_edge=False, header_style="bold")
    for col, justify in (("table", "left"), ("rows", "right"), ("version", "right")):
        tables.add_column(col, justify=justify)  # type: ignore[arg-type]
    tables.add_column("checkpoint commits", justify="right")
    tables.add_column("last commit", justify="right")
    for t in s.tables:
        age = f"{(now - t.last_commit_ms) / 1000:.0f}s ago" if t.last_commit_ms else "-"
        tables.add_row(
            t.name,
            "-" if t.rows is None else f"{t.rows:,}",
            "-" if t.version is None else str(t.version),
            str(t.checkpoint_commits),
            age,
        )
    counts = Text(
        f"late {s.rows(LATE_TABLE)}   duplicates {s.counters.get('events_duplicate', 0)}   "
        f"quarantined {s.rows(QUARANTINE_TABLE)}   for review {s.rows(REVIEW_TABLE)}   "
        f"silver changes {s.counters.get('silver_changes', 0)}   checkpoints {s.checkpoints}"
        + (" + end of input" if s.end_of_input else "")
    )
    return Group(head, bars, per_source, Text(""), tables, Text(""), counts)


def choose_mode(mode: ProgressMode, stream: IO[str]) -> Literal["live", "plain"]:
    """``auto``: the live table on a terminal (not TERM=dumb), plain lines elsewhere."""
    if mode != "auto":
        return mode
    import os

    is_tty = hasattr(stream, "isatty") and stream.isatty()
    return "live" if is_tty and os.environ.get("TERM", "") != "dumb" else "plain"


class LiveView:
    """Shows snapshots: redraws a ``rich`` live display, or prints a plain line every ``every_s`` seconds.

    Use as a context manager; :meth:`show` with each new snapshot, :meth:`note` for a one-off message
    (printed above the live display, or as its own line).
    """

    def __init__(self, mode: ProgressMode = "auto", *, stream: IO[str] | None = None, every_s: float = 5):
        from rich.console import Console

        self.stream = stream or sys.stdout
        self.mode = choose_mode(mode, self.stream)
        self.every_s = every_s
        self.console = Console(file=self.stream, force_terminal=self.mode == "live" or None)
        self._live: Any = None
        self._last_plain = -1e9
        self._last: Snapshot | None = None
        self._last_printed = False

    def __enter__(self) -> LiveView:
        if self.mode == "live":
            from rich.live import Live

            self._live = Live(
                console=self.console, auto_refresh=False, redirect_stdout=False, redirect_stderr=False
            )
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the live display (its last frame stays on screen); print the last plain line."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        elif self._last is not None and self.mode == "plain" and not self._last_printed:
            self._print_plain(self._last)

    def note(self, message: str) -> None:
        """A message on its own line, kept above the live display."""
        if self._live is not None:
            self._live.console.print(message, markup=False, highlight=False)
        else:
            print(message, file=self.stream, flush=True)

    def show(self, s: Snapshot) -> None:
        """Draw ``s`` (live), or print it when ``every_s`` passed since the last line (plain)."""
        self._last = s
        self._last_printed = False
        if self._live is not None:
            self._live.update(render(s), refresh=True)
        elif s.elapsed_s - self._last_plain >= self.every_s:
            self._print_plain(s)

    def _print_plain(self, s: Snapshot) -> None:
        self._last_plain = s.elapsed_s
        self._last_printed = True
        print(plain_line(s), file=self.stream, flush=True)
