"""Flink wrapper of per-order resolution: late routing, de-duplication, ``resolution.apply``.

Input: the gate's value rows ``(event_time_ms, late_watermark_ms | None, split, bronze tuple)``, keyed
by order id.

- A row the gate stamped late goes to ``LATE`` with its watermark (every late arrival, re-deliveries
  included, like bronze) and is counted; it is then still applied below: the per-field event-time
  guard, not the watermark, keeps it from overwriting newer values.
- ONE ``ValueState`` per order holds ``(OrderState | None, {event_id: expiry_ms})`` and expires
  ``event_time.order_state_ttl`` after its last write: one get and at most one update per event,
  because Python state access in process mode costs a round trip to the JVM and dominates the
  per-record cost. Event ids expire ``dedup_ttl`` of processing time after they
  were first seen (the semantics of ``resolution.DedupCache``: re-deliveries come close together in
  arrival time however old the event is); a re-delivery within that time is counted and dropped.
- When ``apply`` changed the state, the whole silver row is emitted (``SILVER_SCHEMA`` tuple); the
  MERGE guard makes re-emitting a full row safe and order-independent.

Events without an order id (anonymous behaviour) only pass the late check; they touch no state.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from pyflink.common import Types
from pyflink.common.time import Time
from pyflink.datastream import KeyedProcessFunction, OutputTag, RuntimeContext
from pyflink.datastream.state import StateTtlConfig, ValueStateDescriptor

from lakestream.resolution import apply
from udfs.ingest_rows import event_of, from_epoch_millis, late_row, silver_row

LATE = OutputTag("late", Types.PICKLED_BYTE_ARRAY())


class ResolveOrders(KeyedProcessFunction):  # type: ignore[misc]
    """Keyed by order id: late side output, de-dup by event id, fold into the order, emit changed rows."""

    def __init__(self, *, dedup_ttl: timedelta, order_state_ttl: timedelta) -> None:
        if dedup_ttl <= timedelta(0):
            raise ValueError(f"event_time.dedup_ttl: must be positive, got {dedup_ttl}")
        if order_state_ttl <= timedelta(0):
            raise ValueError(f"event_time.order_state_ttl: must be positive, got {order_state_ttl}")
        self.ttl_ms = int(dedup_ttl.total_seconds() * 1000)
        self.state_ttl_ms = max(1, int(order_state_ttl.total_seconds() * 1000))

    def open(self, runtime_context: RuntimeContext) -> None:
        """Declare the per-order state and the counters."""
        descriptor = ValueStateDescriptor("order", Types.PICKLED_BYTE_ARRAY())
        # Bounded memory: an order idle for order_state_ttl loses its state (and its seen ids). The next
        # event starts from a cold state; the silver MERGE guard keeps the table exact regardless.
        descriptor.enable_time_to_live(
            StateTtlConfig.new_builder(Time.milliseconds(self.state_ttl_ms))
            .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
            .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
            .build()
        )
        self._state = runtime_context.get_state(descriptor)
        group = runtime_context.get_metrics_group().add_group("lakestream")
        self._late = group.counter("events_late")
        self._duplicates = group.counter("events_duplicate")
        self._changes = group.counter("silver_changes")

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        """Route a late arrival, then de-duplicate and resolve the event onto its order."""
        late_wm, row = value[1], value[3]
        if late_wm is not None:
            self._late.inc()
            yield LATE, late_row(row, from_epoch_millis(late_wm))
        event = event_of(row)
        if event.order_id is None:
            return
        now_ms = int(time.time() * 1000)
        stored = self._state.value()
        if stored is None:
            order, seen = None, {}
        else:
            order, seen = stored
            # Ids are inserted in arrival order with one TTL, so expiries are ascending: pop the front.
            while seen:
                first = next(iter(seen))
                if seen[first] > now_ms:
                    break
                del seen[first]
        if event.event_id in seen:
            self._duplicates.inc()
            return
        seen[event.event_id] = now_ms + self.ttl_ms
        order, changed = apply(order, event)
        self._state.update((order, seen))
        if changed and order is not None:
            self._changes.inc()
            yield silver_row(order)
