"""Scraping a Prometheus endpoint in tests: the text format's samples, collected while a job runs."""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> Iterator[Sample]:
    """Samples of the Prometheus text exposition format (comments skipped)."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        yield Sample(m.group(1), labels, float(m.group(3)))


def scrape(url: str, *, timeout: float = 3.0) -> list[Sample]:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return list(parse(resp.read().decode("utf-8", errors="replace")))


@dataclass
class Scraper:
    """Scrapes ``url`` every ``interval`` seconds in a thread until stopped; keeps every sample seen."""

    url: str
    interval: float = 0.3
    samples: list[Sample] = field(default_factory=list)
    scrapes: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                got = scrape(self.url)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                got = []
            if got:
                self.samples.extend(got)
                self.scrapes += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> Scraper:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def values(self, name: str, **labels: str) -> list[float]:
        """Every value seen of metric ``name`` whose labels include ``labels``."""
        return [
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def names(self) -> set[str]:
        return {s.name for s in self.samples}
