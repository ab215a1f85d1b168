"""``SharedWorker``: each input reaches its own function, both open and close, outputs pass through."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pyflink.datastream import ProcessFunction

from runtime.worker.shared import SharedWorker


class Recorder(ProcessFunction):  # type: ignore[misc]
    def __init__(self, name: str, *, fail_close: bool = False, generator: bool = True) -> None:
        self.name = name
        self.fail_close = fail_close
        self.generator = generator
        self.seen: list[Any] = []
        self.events: list[str] = []

    def open(self, runtime_context: Any) -> None:
        self.events.append(f"open {runtime_context}")

    def process_element(self, value: Any, ctx: Any) -> Iterator[str] | None:
        self.seen.append(value)
        if not self.generator:
            return None
        return iter([f"{self.name}: {value}"])

    def close(self) -> None:
        self.events.append("close")
        if self.fail_close:
            raise RuntimeError(f"{self.name} failed to close")


def test_each_input_goes_to_its_own_function_and_outputs_pass_through() -> None:
    first, second = Recorder("silver"), Recorder("gold")
    worker = SharedWorker(first, second)
    worker.open("ctx")
    out = [
        *worker.process_element1(1, None),
        *worker.process_element2("a", None),
        *worker.process_element1(2, None),
    ]
    assert out == ["silver: 1", "gold: a", "silver: 2"]
    assert first.seen == [1, 2] and second.seen == ["a"]
    assert first.events == second.events == ["open ctx"]


def test_a_function_that_returns_nothing_emits_nothing() -> None:
    second = Recorder("gold", generator=False)
    worker = SharedWorker(Recorder("silver"), second)
    assert list(worker.process_element2("a", None)) == []
    assert second.seen == ["a"]


def test_the_second_closes_when_the_first_fails_to() -> None:
    first, second = Recorder("silver", fail_close=True), Recorder("gold")
    worker = SharedWorker(first, second)
    with pytest.raises(RuntimeError, match="silver failed to close"):
        worker.close()
    assert second.events == ["close"]
