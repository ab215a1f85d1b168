"""Where a job's input stands, recorded in its own output: the progress values of its commits.

A job that ends by itself leaves no Flink checkpoint, so its writers record where the input stands in
the commit that holds the rows it covers: a Delta ``txn`` action ``<app prefix>:progress:<key>`` whose
version is the value, so position and data cannot diverge (DESIGN.md section 9). Keys:
``kafka/<topic>/<partition>`` the next offset; ``watermark/<topic>/<partition>`` the newest VALID event
time (epoch ms), where the next run's event-time gate starts; ``delta/...`` the Delta source's offset
(``sources.offsets.SourceOffset.progress``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lakestream.errors import LakestreamError

#: Middle part of a progress value's txn app id; never a run id (those are hex or ``legacy-...``).
PROGRESS_SEGMENT = "progress"
#: Commit metadata key of the progress values a commit records (also readable in ``history()``).
PROGRESS_KEY = "lakestream.progress"


class ResumeError(LakestreamError, RuntimeError):
    """The recorded position cannot be used as it is; the message says why and what to do (exit 2)."""


@dataclass(frozen=True, slots=True)
class Progress:
    """Progress values handed in-band from a source to its sink, between the rows they follow.

    Not a tuple, so a sink tells it from a row by its type: everything emitted before it is covered.
    """

    values: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checked_progress(self.values)


def kafka_key(topic: str, partition: int) -> str:
    """Progress key of a Kafka partition: its value is the offset the next run reads first."""
    return f"kafka/{topic}/{partition}"


def watermark_key(topic: str, partition: int) -> str:
    """Progress key of a partition's newest VALID event time (epoch ms): the gate's start next run."""
    return f"watermark/{topic}/{partition}"


def recorded_watermarks(app_versions: Mapping[str, int]) -> dict[str, int]:
    """Per ``<topic>/<partition>``, the newest event time any writer recorded among ``app_versions``
    (every txn app id of a table and its version): the progress ``watermark/...`` values."""
    marker = f":{PROGRESS_SEGMENT}:watermark/"
    out: dict[str, int] = {}
    for app_id, version in app_versions.items():
        _, found, partition = app_id.partition(marker)
        if found and partition:
            out[partition] = max(version, out.get(partition, version))
    return dict(sorted(out.items()))


def progress_app_id(app_prefix: str, key: str) -> str:
    """The Delta txn app id that records progress value ``key`` of a writer with ``app_prefix``."""
    return f"{app_prefix}:{PROGRESS_SEGMENT}:{key}"


def checked_progress(values: Mapping[str, int] | None) -> dict[str, int]:
    """``values`` as a plain dict, refusing what a txn action cannot record (non-negative ints only)."""
    out: dict[str, int] = {}
    for key, value in (values or {}).items():
        if not isinstance(key, str) or not key or any(c.isspace() for c in key):
            raise ValueError(f"progress keys must be non-empty strings without spaces, got {key!r}")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
            raise ValueError(f"progress {key!r} must be an int in [0, 2^63), got {value!r}")
        out[key] = value
    return out


def merged(values: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Progress of several commits' worth of values in commit order: the later value of a key wins."""
    out: dict[str, int] = {}
    for v in values:
        out.update(v)
    return dict(sorted(out.items()))


def read_progress(table: Any, app_prefix: str, keys: Iterable[str]) -> dict[str, int]:
    """The recorded value of each of ``keys`` (absent keys left out); ``table`` is a ``DeltaTable``."""
    out: dict[str, int] = {}
    for key in keys:
        version = table.transaction_version(progress_app_id(app_prefix, key))
        if version is not None:
            out[key] = int(version)
    return out


def kafka_offsets_of(batch: pa.RecordBatch | pa.Table) -> dict[str, int]:
    """The Kafka progress rows with ``topic``, ``partition``, ``offset`` columns imply: max offset + 1."""
    if batch.num_rows == 0:
        return {}
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    grouped = table.select(["topic", "partition", "offset"]).group_by(["topic", "partition"])
    top = grouped.aggregate([("offset", "max")])
    return {
        kafka_key(str(t), int(p)): int(o) + 1
        for t, p, o in zip(
            top.column("topic").to_pylist(),
            top.column("partition").to_pylist(),
            top.column("offset_max").to_pylist(),
            strict=True,
        )
    }
