"""The event-time horizon: how far the stream's windows are closed, judged from recorded progress only.

Ingest records each Kafka partition's newest VALID event time with bronze's commits
(``watermark/<topic>/<partition>``, ``lakestream.progress``). A partition whose newest event trails
the newest of all partitions by more than ``event_time.quiet_after`` is *quiet*: like an idle split
in Flink, it does not hold event time back. The horizon is the lowest newest time of the partitions
that are not quiet, minus the out-of-orderness and 1 ms (Flink's bounded-out-of-orderness
watermark). ``backfill`` and ``reconcile`` close the windows behind it, and a run that starts from
the records raises each quiet partition to it (``seeds``), so an old event the partition brings when
it wakes up is late for the stream exactly when the batch layer already owns its window. The rule
reads committed records only, so the same records give the same decision in every run; DESIGN.md
section 9.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class Horizon:
    """The horizon of a set of recorded partition maxima (epoch ms, keyed by partition)."""

    #: The stream's watermark as the records bound it: the lowest active newest time - bound - 1 ms.
    watermark_ms: int
    #: Partitions that hold the horizon (newest event time within ``quiet_after`` of the newest).
    active: Mapping[str, int]
    #: Partitions that trail by more than ``quiet_after``: their newest time, as recorded.
    quiet: Mapping[str, int]

    @property
    def floor_ms(self) -> int:
        """The newest event time a quiet partition is raised to when a run starts from the records."""
        return min(self.active.values())

    def seeds(self, maxima: Mapping[str, int]) -> dict[str, int]:
        """``maxima`` (a run's starting newest times per partition) with every quiet one raised to the
        floor: its watermark then starts at the horizon, as if it had been idle in one long run."""
        floor = self.floor_ms
        return {key: max(value, floor) if key in self.quiet else value for key, value in maxima.items()}


def horizon_of(
    maxima: Mapping[str, int], max_out_of_orderness: timedelta, quiet_after: timedelta
) -> Horizon | None:
    """The horizon of the recorded newest event times ``maxima``; None when nothing was recorded."""
    if not maxima:
        return None
    if quiet_after <= timedelta(0):
        raise ValueError(f"event_time.quiet_after must be positive, got {quiet_after}")
    cutoff = max(maxima.values()) - quiet_after // _MS
    active = {k: v for k, v in sorted(maxima.items()) if v >= cutoff}
    quiet = {k: v for k, v in sorted(maxima.items()) if v < cutoff}
    watermark = min(active.values()) - max_out_of_orderness // _MS - 1
    return Horizon(watermark_ms=watermark, active=active, quiet=quiet)
