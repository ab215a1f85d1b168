"""Per-poll progress of the Delta source, defined like Spark's ``SourceProgress`` (one poll = one trigger).

A pure function of the poll's row count and clock readings, so the metric definitions are tested
without Flink; ``sources.flink.delta_source`` only publishes the result as gauges.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Spark floors a trigger's processing time at one millisecond.
MIN_PROCESSING_S = 0.001


@dataclass(frozen=True, slots=True)
class TriggerProgress:
    """``numInputRows``, ``inputRowsPerSecond`` and ``processedRowsPerSecond`` of one poll."""

    num_input_rows: int
    #: Rows of this poll over the time since the previous poll started (0.0 for the first poll).
    input_rows_per_second: float
    #: Rows of this poll over the time this poll took (planning, reading and emitting).
    processed_rows_per_second: float


def trigger_progress(
    rows: int, *, started_s: float, ended_s: float, previous_started_s: float | None
) -> TriggerProgress:
    """Spark's definitions: rows / (start - previous start), rows / max(1 ms, end - start).

    The first poll has no previous start: its input interval is infinite, so its input rate is 0.0,
    as in Spark. A clock that stepped back gives a zero-length interval, also reported as 0.0.
    """
    processing_s = max(MIN_PROCESSING_S, ended_s - started_s)
    interval_s = None if previous_started_s is None else started_s - previous_started_s
    input_rate = rows / interval_s if interval_s is not None and interval_s > 0 else 0.0
    return TriggerProgress(
        num_input_rows=rows,
        input_rows_per_second=input_rate,
        processed_rows_per_second=rows / processing_s,
    )
