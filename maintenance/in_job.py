"""A job's own maintenance: the rounds of ``lakestream maintain auto`` over the tables it writes.

A job that commits every few seconds leaves thousands of small files and commits a day in each table,
and reads and log replays grow with them. With ``maintenance.in_job`` the ingest job runs the rounds of
``maintenance.auto`` (compaction, log checkpoints, and vacuum and log cleanup where the retention rules
allow) itself, in one background thread of its silver committer's worker (parallelism 1: one per job),
every ``maintenance.interval``, the first one interval after it starts. Rewrites take each table's lock
as ``maintain`` does, so a ``maintain`` run beside the job waits its turn, and the streaming commits
race them as they race ``maintain`` (DESIGN.md section 10). A round that fails is logged and counted and
the next one runs: maintenance never stops ingest.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from lakestream.config import Config
from maintenance.auto import Maintainer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobMaintenance:
    """What a job maintains: ``tables`` (names under ``cfg``'s lakehouse root) with ``cfg.maintenance``'s
    settings; ``not_compacted`` are never compacted (a merge-on-read snapshot, which its folds keep
    sorted)."""

    cfg: Config
    tables: tuple[str, ...]
    not_compacted: frozenset[str] = frozenset()


class BackgroundMaintenance:
    """Runs a round over ``task.tables`` every ``task.cfg.maintenance.interval`` in one daemon thread."""

    def __init__(self, task: JobMaintenance) -> None:
        cfg = task.cfg.replace("maintenance", tables=task.tables)
        self._maintainer = Maintainer(cfg, report=self._report, not_compacted=task.not_compacted)
        self._every = cfg.maintenance.interval.total_seconds()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lakestream-maintenance", daemon=True)
        self.rounds = 0
        self.failures = 0
        self.last_round_s = 0.0

    def start(self) -> BackgroundMaintenance:
        """Start the thread; its first round runs one interval from now."""
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the operation running now (waits up to ``timeout`` s for it)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @staticmethod
    def _report(line: str) -> None:
        log.info("maintenance: %s", line)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            started = time.monotonic()
            try:
                self._maintainer.run_round(self._stop)
            except Exception:  # a round never stops ingest; the next one runs
                self.failures += 1
                log.exception("maintenance: the round failed; the next one runs in %.0f s", self._every)
            self.rounds += 1
            self.last_round_s = time.monotonic() - started
