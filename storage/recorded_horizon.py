"""The event-time horizon of a bronze table, from the progress its writers recorded in its snapshot.

The one reader behind the horizon of ``backfill``, ``reconcile`` and a run's starting seeds
(``lakestream.horizon``): every ``watermark/<topic>/<partition>`` txn value of the snapshot, by any
writer, the newest per partition.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from lakestream.horizon import Horizon, horizon_of
from lakestream.progress import recorded_watermarks
from storage.delta_log import DeltaLog


def recorded_horizon(
    table_uri: str,
    max_out_of_orderness: timedelta,
    quiet_after: timedelta,
    *,
    version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Horizon | None:
    """The horizon of what bronze at ``version`` (latest when None) recorded; None: no ingest wrote it."""
    log = DeltaLog(table_uri, storage_options=storage_options, cache_size=0)
    return horizon_of(recorded_watermarks(log.app_versions(version)), max_out_of_orderness, quiet_after)
