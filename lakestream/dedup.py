"""De-duplication by event id: ids remembered for a TTL of processing time, the reference of the rule.

The streaming job runs this rule in Flink keyed state (``io.lakestream.flink.ingest.KeyedDedupEpochOperator``,
tested against a port of ``first_seen``); ``DedupCache`` is the plain-Python definition for tests and
batch recomputes. The contract: DESIGN.md section 2.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime, timedelta


class DedupCache:
    """Remembers event ids for ``ttl`` of *processing* time; ``seen`` answers "is this a re-delivery?".

    Processing time, not event time: duplicates come from re-delivery (producer retries, consumer replays),
    close together in arrival time however old the event is; keyed by event time, a late duplicate would
    meet an expired window (or far-future stamps would be kept forever). The first sighting starts the
    clock and hits do not refresh it (Flink state TTL's ``OnCreateAndWrite``). ``max_entries`` bounds
    memory by evicting the oldest ids first (the keyed-state version needs no bound: its state can
    live on disk).
    """

    __slots__ = ("ttl", "max_entries", "_expiry")

    def __init__(self, ttl: timedelta, *, max_entries: int | None = None) -> None:
        """Create an empty cache; ``ttl`` must be positive."""
        if ttl <= timedelta(0):
            raise ValueError(f"ttl: must be positive, got {ttl}")
        if max_entries is not None and max_entries <= 0:
            raise ValueError(f"max_entries: must be positive or None, got {max_entries}")
        self.ttl = ttl
        self.max_entries = max_entries
        self._expiry: OrderedDict[str, datetime] = OrderedDict()

    def seen(self, event_id: str, now: datetime) -> bool:
        """True if ``event_id`` was recorded less than ``ttl`` before ``now``; otherwise record it."""
        return not self.first_seen((event_id,), now)[0]

    def first_seen(self, event_ids: Iterable[str], now: datetime) -> list[bool]:
        """Per id, in order: True when it is new (then recorded), False for a re-delivery within ``ttl``.

        The same answers as ``not seen(id, now)`` one id after the other (an id repeated within the call
        is new only the first time), at one expiry sweep per call: the streaming job asks once per
        batch, where a call per record had cost about a microsecond each.
        """
        expiry = self._expiry
        while expiry:
            first = next(iter(expiry.values()))
            if first > now:
                break
            expiry.popitem(last=False)
        until_new = now + self.ttl
        limit = self.max_entries
        get, move_to_end, popitem = expiry.get, expiry.move_to_end, expiry.popitem
        fresh: list[bool] = []
        append = fresh.append
        for event_id in event_ids:
            until = get(event_id)
            if until is not None:
                if until > now:
                    append(False)
                    continue
                move_to_end(event_id)  # expired but not swept (the clock went back): re-record at the end
            expiry[event_id] = until_new
            if limit is not None and len(expiry) > limit:
                popitem(last=False)
            append(True)
        return fresh

    def __len__(self) -> int:
        """Number of remembered ids (expired ones may linger until the next ``seen``)."""
        return len(self._expiry)
