"""A stand-in for PyFlink's runtime context in Flink-free operator tests: counters and gauges."""

from __future__ import annotations

from typing import Any


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        self.count += n


class MetricGroup:
    """Stands in for PyFlink's metric group: records counters and gauges by group path."""

    def __init__(self, path: tuple[str, ...] = (), root: MetricGroup | None = None) -> None:
        self.path = path
        self.root = root or self
        self.counters: dict[str, Counter] = {}
        self.gauges: dict[tuple[str, ...], Any] = {}

    def add_group(self, *names: str) -> MetricGroup:
        return MetricGroup(self.path + names, self.root)

    def counter(self, name: str) -> Counter:
        return self.root.counters.setdefault(name, Counter())

    def gauge(self, name: str, read: Any) -> None:
        self.root.gauges[(*self.path, name)] = read


class MetricsContext:
    def __init__(self) -> None:
        self.group = MetricGroup()

    def get_metrics_group(self) -> MetricGroup:
        return self.group
