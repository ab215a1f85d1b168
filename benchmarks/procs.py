"""Peak RSS of a process tree, split into JVMs and Python processes, sampled in a background thread."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RssSampler:
    """Samples ``psutil`` RSS of ``pid`` and all its descendants every ``interval`` seconds.

    Kinds: ``jvm`` (java), ``python`` (the client and, in process mode, the Beam workers), ``other``.
    Keeps the peak per kind and a time series of the total, so growth over a run is visible.
    """

    pid: int
    interval: float = 0.5
    peak: dict[str, int] = field(default_factory=dict)
    series: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> RssSampler:
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.summary()

    def sample(self) -> dict[str, int]:
        import psutil

        now: dict[str, int] = {}
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return now
        for p in procs:
            try:
                name = p.name().lower()
                rss = p.memory_info().rss
            except psutil.Error:
                continue
            kind = "jvm" if "java" in name else "python" if "python" in name else "other"
            now[kind] = now.get(kind, 0) + rss
        return now

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            now = self.sample()
            if now:
                for k, v in now.items():
                    self.peak[k] = max(self.peak.get(k, 0), v)
                total = sum(now.values())
                self.peak["total"] = max(self.peak.get("total", 0), total)
                self.series.append((round(time.monotonic() - t0, 1), now))
            self._stop.wait(self.interval)

    def summary(self) -> dict[str, Any]:
        mib = 1024 * 1024
        totals = [(t, sum(v.values())) for t, v in self.series]
        return {
            "peak_mib": {k: round(v / mib, 1) for k, v in self.peak.items()},
            # total RSS at 10 evenly spaced points of the run: flat means bounded
            "total_mib_over_time": [(t, round(v / mib, 1)) for t, v in totals[:: max(1, len(totals) // 10)]],
        }
