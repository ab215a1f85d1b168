"""``logistics``: carrier pushes (``trackingNo``, ``order``, ``state``, ``ts`` ISO-8601 with offset).

The event id hashes (trackingNo, order, state, ts in UTC), so re-pushes of a scan de-duplicate and each
order of a shared parcel gets its own event (DESIGN.md section 5). A ``ts`` without offset is rejected
unless ``AdapterSettings.logistics_naive_zone`` names the carrier's clock.
"""

from __future__ import annotations

from typing import Any

from lakestream.adapters.parsing import (
    FieldError,
    describe,
    get_code,
    get_id,
    make_adapter,
    parse_timestamp_iso,
    stable_id,
)
from lakestream.adapters.settings import AdapterSettings, zone
from lakestream.standard import LOGISTICS, StandardEvent, _new_event

SOURCE = "logistics"
_TRACKING_NO = ("trackingNo",)
_ORDER = ("order",)
_STATE = ("state",)


def _build(
    obj: dict[str, Any], raw: bytes, topic: str, partition: int, offset: int, settings: AdapterSettings
) -> StandardEvent:
    # Runs once per record: checks written out instead of ``require`` calls, ``_new_event`` (the
    # hot-path ``StandardEvent`` constructor) called positionally.
    tracking_no = get_id(obj, _TRACKING_NO, settings)
    if tracking_no is None:
        raise FieldError("trackingNo", "missing (required)")
    ts = obj.get("ts")
    if ts is None:
        raise FieldError("ts", "missing (required)")
    if not isinstance(ts, str):
        raise FieldError("ts", f"expected an ISO-8601 timestamp string, got {describe(ts)}")
    naive = None if settings.logistics_naive_zone is None else zone(settings.logistics_naive_zone)
    event_time, event_time_iso = parse_timestamp_iso("ts", ts, naive_zone=naive)
    order_id = get_id(obj, _ORDER, settings)
    state = get_code(obj, _STATE, settings)
    return _new_event(
        stable_id(SOURCE, [tracking_no, order_id, state, event_time_iso]),  # event_id
        order_id,
        None,  # user_id
        LOGISTICS,  # event_type
        event_time,
        None,  # amount
        None,  # status
        None,  # address
        state,  # logistics_state
        None,  # op
        SOURCE,
        raw,
        topic,
        partition,
        offset,
    )


adapt = make_adapter(SOURCE, _build, "Adapt one logistics push; never raises.")
