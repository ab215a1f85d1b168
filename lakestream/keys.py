"""The keys the ingest job partitions and de-duplicates by, as pure functions.

An event's *bucket* is the Flink key group of its order (of its own event id when it has no order), so
one order's events, and every copy of one event, meet in one subtask at any parallelism; its *id hash*
is a 128-bit digest of its event id, the key of the de-dup state. Which subtask owns a bucket is Flink's
``KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup`` (DESIGN.md section 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b
from typing import NamedTuple

import numpy as np

#: Flink's bounds on the number of key groups (``KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM``).
MAX_KEY_GROUPS = 1 << 15


def _id_digest(event_id: str) -> bytes:
    return blake2b(event_id.encode("utf-8"), digest_size=16).digest()


def _bucket_digest(order_id: str | None, event_id: str) -> bytes:
    return blake2b((order_id if order_id is not None else event_id).encode("utf-8"), digest_size=8).digest()


def id_hash(event_id: str) -> tuple[int, int]:
    """The event id's 128-bit BLAKE2b digest as two signed 64-bit halves (Java ``long``s)."""
    digest = _id_digest(event_id)
    return int.from_bytes(digest[:8], "big", signed=True), int.from_bytes(digest[8:], "big", signed=True)


def bucket_of(order_id: str | None, event_id: str, max_parallelism: int) -> int:
    """The bucket (key group, ``0 <= bucket < max_parallelism``) of an event's order, else of its id."""
    return int.from_bytes(_bucket_digest(order_id, event_id), "big") % max_parallelism


def subtask_of(bucket: int, parallelism: int, max_parallelism: int) -> int:
    """The subtask that owns a key group (Flink's ``computeOperatorIndexForKeyGroup``)."""
    return bucket * parallelism // max_parallelism


class Part(NamedTuple):
    """The events of one batch that go to one subtask, as positions into the batch, in batch order."""

    subtask: int
    positions: list[int]
    buckets: list[int]
    id_hi: list[int]
    id_lo: list[int]


def split_by_subtask(
    order_ids: Sequence[str | None], event_ids: Sequence[str], *, parallelism: int, max_parallelism: int
) -> list[Part]:
    """Group a batch's events by the subtask owning their bucket (subtasks in ascending order).

    The same buckets and id hashes as ``bucket_of`` and ``id_hash``, a batch at a time: one digest call
    per key, the digests read as big-endian integers by numpy rather than one ``int.from_bytes`` each.
    """
    if not 1 <= parallelism <= max_parallelism <= MAX_KEY_GROUPS:
        raise ValueError(
            f"flink.parallelism ({parallelism}) must be at least 1 and at most flink.max_parallelism "
            f"({max_parallelism}), itself at most {MAX_KEY_GROUPS}"
        )
    n = len(event_ids)
    if len(order_ids) != n:
        raise ValueError(f"order_ids ({len(order_ids)}) and event_ids ({n}) must be as long as each other")
    if n == 0:
        return []
    ids = b"".join([_id_digest(e) for e in event_ids])
    halves = np.frombuffer(ids, dtype=">i8").reshape(n, 2)
    keys = b"".join([_bucket_digest(o, e) for o, e in zip(order_ids, event_ids, strict=True)])
    buckets = (np.frombuffer(keys, dtype=">u8") % np.uint64(max_parallelism)).astype(np.int64)
    subtasks = buckets * parallelism // max_parallelism
    parts = []
    for subtask in np.unique(subtasks).tolist():
        at = np.flatnonzero(subtasks == subtask)
        parts.append(
            Part(subtask, at.tolist(), buckets[at].tolist(), halves[at, 0].tolist(), halves[at, 1].tolist())
        )
    return parts
