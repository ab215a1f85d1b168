"""A stand-in for PyFlink's runtime context in Flink-free operator tests: counters by name."""

from __future__ import annotations

from typing import Any


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        self.count += n


class MetricGroup:
    """Records counters by name; stands in for PyFlink's metric group (not part of what is tested)."""

    def __init__(self) -> None:
        self.counters: dict[str, Counter] = {}

    def add_group(self, *_: str) -> MetricGroup:
        return self

    def counter(self, name: str) -> Counter:
        return self.counters.setdefault(name, Counter())

    def gauge(self, *_: Any) -> None:
        pass


class MetricsContext:
    def __init__(self) -> None:
        self.group = MetricGroup()

    def get_metrics_group(self) -> MetricGroup:
        return self.group
