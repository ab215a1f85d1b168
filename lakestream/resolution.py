"""Per-order resolution: fold standard events into the silver state of their order.

Which event sets which field:

- order changes (``orders_db``, any op): the non-null ``user_id``, ``amount``, ``status``, ``address`` of
  the row image they carry; ``op='c'`` also sets ``created_time`` (= its event time); ``op`` c/u set
  ``deleted=False``, ``op='d'`` sets ``deleted=True``: a tombstone, the row stays, and an update stamped
  before the delete cannot resurrect it (its ``deleted=False`` loses the guard), while a later re-create
  does. A key-only delete (all other fields null) only sets the tombstone.
- payments: ``paid_amount`` and ``status='paid'``.
- logistics: ``logistics_state``.
- behaviour: nothing (behaviour feeds bronze and gold only).

Per field the value with the newest event time wins, ties go to the later arrival, and a null never
erases a value: exactly ``lakestream.silver.merge_rows``'s guard, so the streaming state, a batch recompute
and the Delta MERGE all converge on the same row whatever the arrival order and batch boundaries.

Only events tagged VALID are applied by default: SUSPICIOUS ones (e.g. stamped in the future) would pin
fields, INVALID ones lack the key.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakestream.silver import (
    LAST_EVENT_ID,
    LAST_EVENT_TIME,
    RESOLVED_FIELDS,
    SILVER_COLUMNS,
    SILVER_EIDS,
    SILVER_GUARDED,
    SILVER_SCHEMA,
    SilverRow,
    silver_batch,
)
from lakestream.standard import (
    LOGISTICS,
    ORDER_CREATED,
    ORDER_DELETED,
    ORDER_UPDATED,
    PAYMENT,
    Quality,
    StandardEvent,
)

#: Quality tags ``apply`` accepts by default.
SILVER_ACCEPTS: frozenset[Quality] = frozenset({"VALID"})
PAID = "paid"

_IDX = {name: i for i, name in enumerate(RESOLVED_FIELDS)}
_USER, _STATUS, _AMOUNT, _PAID_AMOUNT = _IDX["user_id"], _IDX["status"], _IDX["amount"], _IDX["paid_amount"]
_ADDRESS, _LOGISTICS, _CREATED, _DELETED = (
    _IDX["address"],
    _IDX["logistics_state"],
    _IDX["created_time"],
    _IDX["deleted"],
)
_N = len(RESOLVED_FIELDS)

Update = tuple[int, Any]


class OrderState:
    """Resolved state of one order: per field, the value and the (event time, event id) that set it.

    Mutable on purpose: ``apply`` updates it in place (one state per key in a Flink keyed state or a dict),
    which keeps the per-event path free of copies. Use ``copy()`` to snapshot.
    """

    __slots__ = ("order_id", "values", "times", "eids", "last_time", "last_eid")

    def __init__(self, order_id: str) -> None:
        """Start an order with no field set."""
        self.order_id = order_id
        self.values: list[Any] = [None] * _N
        self.times: list[datetime | None] = [None] * _N
        self.eids: list[str | None] = [None] * _N
        #: The newest event that set any field (ties: the later arrival): ``last_event_time``/``_id``.
        self.last_time: datetime | None = None
        self.last_eid: str | None = None

    def copy(self) -> OrderState:
        """An independent snapshot."""
        other = OrderState(self.order_id)
        other.values = self.values.copy()
        other.times = self.times.copy()
        other.eids = self.eids.copy()
        other.last_time, other.last_eid = self.last_time, self.last_eid
        return other

    def get(self, field: str) -> Any:
        """Current value of a resolved field (``None`` when never set)."""
        return self.values[_IDX[field]]

    def __eq__(self, other: object) -> bool:
        """States are equal when they would produce the same silver row."""
        if not isinstance(other, OrderState):
            return NotImplemented
        return (
            self.order_id == other.order_id
            and self.values == other.values
            and self.times == other.times
            and self.eids == other.eids
            and self.last_time == other.last_time
            and self.last_eid == other.last_eid
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        """Show the set fields only."""
        fields = ", ".join(f"{f}={self.values[i]!r}" for i, f in enumerate(RESOLVED_FIELDS) if self.times[i])
        return f"OrderState({self.order_id!r}, {fields})"


def updates_of(event: StandardEvent) -> Sequence[Update]:
    """(field index, value) pairs an event offers; nulls are included and skipped by ``apply``."""
    etype = event.event_type
    if etype == ORDER_UPDATED:
        return (
            (_USER, event.user_id),
            (_AMOUNT, event.amount),
            (_STATUS, event.status),
            (_ADDRESS, event.address),
            (_DELETED, False),
        )
    if etype == ORDER_CREATED:
        return (
            (_USER, event.user_id),
            (_AMOUNT, event.amount),
            (_STATUS, event.status),
            (_ADDRESS, event.address),
            (_CREATED, event.event_time),
            (_DELETED, False),
        )
    if etype == PAYMENT:
        return ((_PAID_AMOUNT, event.amount), (_STATUS, PAID))
    if etype == LOGISTICS:
        return ((_LOGISTICS, event.logistics_state),)
    if etype == ORDER_DELETED:
        return (
            (_USER, event.user_id),
            (_AMOUNT, event.amount),
            (_STATUS, event.status),
            (_ADDRESS, event.address),
            (_DELETED, True),
        )
    return ()


def apply(
    state: OrderState | None,
    event: StandardEvent,
    *,
    accept: frozenset[Quality] = SILVER_ACCEPTS,
) -> tuple[OrderState | None, bool]:
    """Fold one event into its order's state; returns the state (mutated in place) and whether it changed.

    ``state=None`` means the key has no state yet; it stays ``None`` when the event sets nothing (behaviour
    events, events whose quality is not accepted, or events without order id).
    """
    if event.quality not in accept or event.order_id is None:
        return state, False
    updates = updates_of(event)
    if not updates:
        return state, False
    if state is not None and state.order_id != event.order_id:
        raise ValueError(
            f"order_id: event {event.event_id} is for order {event.order_id!r}, "
            f"state is for {state.order_id!r}"
        )
    ts = event.event_time
    eid = event.event_id
    changed = False
    offered = False
    for idx, value in updates:
        if value is None:
            continue
        if state is None:
            state = OrderState(event.order_id)
        offered = True
        times = state.times
        cur = times[idx]
        if cur is None or ts >= cur:
            if not changed and (cur != ts or state.eids[idx] != eid or state.values[idx] != value):
                changed = True
            state.values[idx] = value
            times[idx] = ts
            state.eids[idx] = eid
    if offered and state is not None:
        last = state.last_time
        if last is None or ts >= last:
            if last != ts or state.last_eid != eid:
                changed = True
            state.last_time = ts
            state.last_eid = eid
    return state, changed


def state_to_row(state: OrderState) -> SilverRow:
    """The silver row (``SILVER_SCHEMA`` columns) of a state."""
    row: SilverRow = {"order_id": state.order_id}
    for i, f in enumerate(RESOLVED_FIELDS):
        row[f] = state.values[i]
        row[SILVER_GUARDED[f]] = state.times[i]
        row[SILVER_EIDS[f]] = state.eids[i]
    row[LAST_EVENT_TIME] = state.last_time
    row[LAST_EVENT_ID] = state.last_eid
    return row


def state_from_row(row: Mapping[str, Any]) -> OrderState:
    """Rebuild a state from a silver row (e.g. to continue folding on top of the current Delta table)."""
    state = OrderState(row["order_id"])
    for i, f in enumerate(RESOLVED_FIELDS):
        state.values[i] = row.get(f)
        state.times[i] = row.get(SILVER_GUARDED[f])
        state.eids[i] = row.get(SILVER_EIDS[f])
    state.last_time = row.get(LAST_EVENT_TIME)
    state.last_eid = row.get(LAST_EVENT_ID)
    return state


_COL = {name: i for i, name in enumerate(SILVER_COLUMNS)}
#: Per resolved field index: positions of its value, event time and event id in a silver tuple.
_TRIPLE_POS = tuple(
    (_COL[f], _COL[SILVER_GUARDED[f]], _COL[SILVER_EIDS[f]]) for f in RESOLVED_FIELDS
)
_ORDER_POS, _LAST_TIME_POS, _LAST_EID_POS = _COL["order_id"], _COL[LAST_EVENT_TIME], _COL[LAST_EVENT_ID]
_N_COLS = len(SILVER_COLUMNS)


def event_tuple(
    event: StandardEvent, *, accept: frozenset[Quality] = SILVER_ACCEPTS
) -> tuple[Any, ...] | None:
    """``event_row`` as a tuple in ``SILVER_COLUMNS`` order, built without an ``OrderState``.

    The streaming job turns every event into this MERGE source row, so it is the per-event hot path;
    it reads the same ``updates_of`` as ``apply`` (a unit test checks it equals ``event_row``).
    """
    if event.quality not in accept or event.order_id is None:
        return None
    ts, eid = event.event_time, event.event_id
    row: list[Any] | None = None
    for idx, value in updates_of(event):
        if value is None:
            continue
        if row is None:
            row = [None] * _N_COLS
        v, t, e = _TRIPLE_POS[idx]
        row[v], row[t], row[e] = value, ts, eid
    if row is None:
        return None
    row[_ORDER_POS], row[_LAST_TIME_POS], row[_LAST_EID_POS] = event.order_id, ts, eid
    return tuple(row)


def silver_source(
    events: pa.Table | pa.RecordBatch, *, accept: frozenset[Quality] = SILVER_ACCEPTS
) -> pa.Table:
    """``event_tuple`` column-wise: events with ``BRONZE_SCHEMA`` columns -> MERGE source rows, in order.

    The streaming job receives events as Arrow batches; building the rows per column avoids turning
    every event back into Python objects (which cost about as much as parsing it). The rules are those
    of ``updates_of`` (a property test checks equality with ``event_tuple`` row by row): order changes
    set user/amount/status/address/deleted (+ created_time on create), payments set paid_amount and
    status 'paid', logistics pushes set logistics_state; a null offers nothing; rows that set nothing
    are dropped.
    """
    t = events if isinstance(events, pa.Table) else pa.Table.from_batches([events])
    keep = pc.and_(
        pc.is_in(t["quality"], value_set=pa.array(sorted(accept), pa.string())), pc.is_valid(t["order_id"])
    )
    t = t.filter(keep)
    etype = t["event_type"]

    def is_type(*types: str) -> pa.ChunkedArray:
        return pc.fill_null(pc.is_in(etype, value_set=pa.array(types, pa.string())), False)

    def when(cond: Any, value: Any, typ: pa.DataType) -> Any:
        return pc.if_else(cond, value, pa.scalar(None, typ))

    order = is_type(ORDER_CREATED, ORDER_UPDATED, ORDER_DELETED)
    payment = is_type(PAYMENT)
    n = t.num_rows
    values = {
        "user_id": when(order, t["user_id"], pa.string()),
        "status": pc.if_else(order, t["status"], when(payment, pa.scalar(PAID), pa.string())),
        "amount": when(order, t["amount"], t.schema.field("amount").type),
        "paid_amount": when(payment, t["amount"], t.schema.field("amount").type),
        "address": when(order, t["address"], pa.string()),
        "logistics_state": when(is_type(LOGISTICS), t["logistics_state"], pa.string()),
        "created_time": when(is_type(ORDER_CREATED), t["event_time"], t.schema.field("event_time").type),
        "deleted": when(order, is_type(ORDER_DELETED), pa.bool_()),
    }
    any_set = pa.array(np.zeros(n, dtype=bool))
    columns: dict[str, Any] = {"order_id": t["order_id"]}
    for f in RESOLVED_FIELDS:
        value = values[f]
        offered = pc.is_valid(value)
        any_set = pc.or_(any_set, offered)
        columns[f] = value
        columns[SILVER_GUARDED[f]] = when(offered, t["event_time"], t.schema.field("event_time").type)
        columns[SILVER_EIDS[f]] = when(offered, t["event_id"], pa.string())
    columns[LAST_EVENT_TIME] = t["event_time"]
    columns[LAST_EVENT_ID] = t["event_id"]
    out = pa.table([columns[c] for c in SILVER_COLUMNS], names=list(SILVER_COLUMNS))
    return out.filter(any_set).cast(SILVER_SCHEMA)


def event_row(event: StandardEvent, *, accept: frozenset[Quality] = SILVER_ACCEPTS) -> SilverRow | None:
    """The single-event silver row an event contributes (``None`` if it sets nothing): a MERGE source row."""
    state, _ = apply(None, event, accept=accept)
    return None if state is None else state_to_row(state)


def fold(
    events: Iterable[StandardEvent],
    states: dict[str, OrderState] | None = None,
    *,
    accept: frozenset[Quality] = SILVER_ACCEPTS,
) -> dict[str, OrderState]:
    """Fold events in arrival order into per-order states (batch recompute; updates ``states`` in place)."""
    out = {} if states is None else states
    for event in events:
        key = event.order_id
        if key is None:
            continue
        state, _ = apply(out.get(key), event, accept=accept)
        if state is not None:
            out[key] = state
    return out


def states_batch(states: Iterable[OrderState]) -> pa.RecordBatch:
    """A ``SILVER_SCHEMA`` ``RecordBatch`` of states (e.g. the changed keys of a micro-batch)."""
    return silver_batch([state_to_row(s) for s in states])


class DedupCache:
    """Remembers event ids for ``ttl`` of *processing* time; ``seen`` answers "is this a re-delivery?".

    Processing time, not event time, because duplicates come from re-delivery (producer retries, consumer
    replays after a restart), which happen close together in arrival time however old the event itself
    is; keyed by event time, a late duplicate would be compared against an already-expired window (or keep
    state for far-future stamps forever). It also matches Flink state TTL, which only supports processing
    time, so the streaming wrapper and this batch/test version expire identically.

    Silver does not depend on de-dup (``apply`` is idempotent); de-dup protects the append-only tables
    (bronze, gold counts) from double counting within the TTL. Entries are not refreshed by hits (Flink's
    ``OnCreateAndWrite``). ``max_entries`` bounds memory by evicting the oldest ids first.
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
