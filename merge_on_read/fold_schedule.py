"""When the running job folds its merge-on-read changes, and the thread that does it beside the commits.

The committer of the changes table calls ``committed`` after each commit; a fold starts in a background
thread once ``every`` passed since the last one started, or ``rows`` change rows were committed since,
and never two at once. The commits go on meanwhile: the fold only reads the changes table and writes
the snapshot. A fold that failed fails the next ``committed`` call (the job restarts; the next fold
starts above the snapshot's fold point, so nothing is folded twice). ``finish`` (end of input) waits
for a running fold and folds the rest, so a bounded run leaves the snapshot complete.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from merge_on_read.fold_changes import DEFAULT_RETENTION, FoldResult, fold_once
from merge_on_read.table import MergeOnReadTable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FoldSchedule:
    """How often the job folds: after ``every``, or after ``rows`` committed change rows (0: time only)."""

    every: timedelta = timedelta(minutes=1)
    rows: int = 1_000_000
    retention: timedelta = DEFAULT_RETENTION

    def __post_init__(self) -> None:
        if self.every <= timedelta(0) or self.rows < 0 or self.retention < timedelta(0):
            raise ValueError(f"fold schedule: every > 0, rows >= 0, retention >= 0; got {self}")

    def due(self, *, since_s: float, rows: int) -> bool:
        """Whether a fold is due ``since_s`` seconds after the last one started, ``rows`` rows later."""
        return since_s >= self.every.total_seconds() or (self.rows > 0 and rows >= self.rows)


@dataclass(frozen=True)
class FoldTask:
    """A merge-on-read table and its schedule, as a sink spec carries it to the committer."""

    table: MergeOnReadTable
    schedule: FoldSchedule


class BackgroundFold:
    """Folds ``task.table`` in one background thread when ``task.schedule`` says so (module docstring)."""

    def __init__(self, task: FoldTask, *, clock: Callable[[], float] = time.monotonic) -> None:
        task.table.open_snapshot()  # the snapshot exists from the job's start, for every reader
        self.task = task
        self._clock = clock
        self._last_start = clock()
        self._rows = 0
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.folds = 0
        self.last: FoldResult | None = None

    @property
    def running(self) -> bool:
        """Whether a fold is running now."""
        return self._thread is not None and self._thread.is_alive()

    def committed(self, rows: int) -> None:
        """A commit of ``rows`` change rows landed: start a fold when due; raise a failed fold's error."""
        self._raise_failure()
        self._rows += rows
        if self.running:
            return
        if self.task.schedule.due(since_s=self._clock() - self._last_start, rows=self._rows):
            self._start()

    def finish(self) -> FoldResult:
        """Wait for a running fold, then fold everything committed and merge every run into one (end of
        input: the snapshot alone then holds one current row per key)."""
        if self._thread is not None:
            self._thread.join()
        self._raise_failure()
        result = self._fold(full=True)
        self._rows = 0
        return result

    def _start(self) -> None:
        self._last_start = self._clock()
        self._rows = 0
        self._thread = threading.Thread(target=self._run, name="lakestream-fold", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._fold()
        except BaseException as exc:  # handed to the committer's thread by the next call
            log.exception("%s: the fold failed", self.task.table.snapshot_uri)
            self._error = exc

    def _fold(self, *, full: bool = False) -> FoldResult:
        result = fold_once(self.task.table, retention=self.task.schedule.retention, full=full)
        self.last = result
        self.folds += 1
        return result

    def _raise_failure(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(
                f"{self.task.table.snapshot_uri}: the background fold failed: {error}"
            ) from error
