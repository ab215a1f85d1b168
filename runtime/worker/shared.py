"""Two Python sinks in one Python worker: a ``CoProcessFunction`` that hands each input to its own function.

PyFlink starts one Python process per Python operator subtask, each with its own copy of PyFlink, Beam,
Arrow and delta-rs. Two sinks at parallelism 1 on independent streams (the ingest job's silver committer
and gold writer) run as one two-input operator to save a worker. Each input keeps its own marker stream
and its function follows its own protocol; the functions share nothing but the process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyflink.datastream import CoProcessFunction, ProcessFunction, RuntimeContext


class SharedWorker(CoProcessFunction):  # type: ignore[misc]
    """Input 1 to ``first``, input 2 to ``second``; both open, close and emit as they would alone.

    The functions get the co-function's context: they must not need timers (non-keyed sinks don't).
    """

    def __init__(self, first: ProcessFunction, second: ProcessFunction) -> None:
        self.first = first
        self.second = second

    def open(self, runtime_context: RuntimeContext) -> None:
        """Open both functions (each registers its own metrics)."""
        self.first.open(runtime_context)
        self.second.open(runtime_context)

    def process_element1(self, value: Any, ctx: CoProcessFunction.Context) -> Iterator[Any]:
        """An element of the first input, for ``first``."""
        yield from _results(self.first.process_element(value, ctx))

    def process_element2(self, value: Any, ctx: CoProcessFunction.Context) -> Iterator[Any]:
        """An element of the second input, for ``second``."""
        yield from _results(self.second.process_element(value, ctx))

    def close(self) -> None:
        """Close both, the second even when the first fails."""
        try:
            self.first.close()
        finally:
            self.second.close()


def _results(out: Any) -> Iterator[Any]:
    # A process_element either yields (a generator) or returns nothing.
    if out is not None:
        yield from out
