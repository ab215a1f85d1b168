"""``behaviour``: client behaviour logs, whose field names and time formats drift between app versions.

Each field has several accepted spellings (``USER_FIELDS``, ``EVENT_FIELDS``, ``ORDER_FIELDS``,
``TIME_FIELDS``, ``ID_FIELDS``; the first present wins, two different values conflict). The variants, and
why epoch seconds are not guessed from magnitude: DESIGN.md section 5.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from lakestream.adapters.parsing import (
    FieldError,
    describe,
    get_id,
    get_text,
    make_adapter,
    millis_to_utc,
    parse_timestamp,
    pick,
    stable_id,
)
from lakestream.adapters.settings import AdapterSettings, zone
from lakestream.standard import BEHAVIOUR_PREFIX, StandardEvent, _new_event

SOURCE = "behaviour"
USER_FIELDS = ("uid", "user_id", "userId")
EVENT_FIELDS = ("event", "event_type", "eventType")
ORDER_FIELDS = ("orderId", "order_id")
TIME_FIELDS = ("ts", "timestamp", "event_time")
ID_FIELDS = ("eventId", "event_id")
_MILLIS_TEXT = re.compile(r"\d{1,16}")
_MAX_EVENT_NAME = 128
_EVENT_LABEL = "/".join(EVENT_FIELDS)
_TIME_LABEL = "/".join(TIME_FIELDS)


def _event_time(obj: dict[str, Any], settings: AdapterSettings) -> datetime:
    name, value = pick(obj, TIME_FIELDS)
    if value is None:
        raise FieldError(_TIME_LABEL, "missing (required)")
    if isinstance(value, str):
        text = value.strip()
        if _MILLIS_TEXT.fullmatch(text):
            return millis_to_utc(name, int(text))
        naive = None if settings.behaviour_naive_zone is None else zone(settings.behaviour_naive_zone)
        return parse_timestamp(name, text, naive_zone=naive)
    return millis_to_utc(name, value)


def _build(
    obj: dict[str, Any], raw: bytes, topic: str, partition: int, offset: int, settings: AdapterSettings
) -> StandardEvent:
    # Runs once per record: checks written out instead of ``require`` calls, ``_new_event`` (the
    # hot-path ``StandardEvent`` constructor) called positionally.
    event_name = get_text(obj, EVENT_FIELDS, settings)
    if event_name is None:
        raise FieldError(_EVENT_LABEL, "missing (required)")
    if len(event_name) > _MAX_EVENT_NAME:
        raise FieldError(_EVENT_LABEL, f"event name longer than {_MAX_EVENT_NAME}: {describe(event_name)}")
    own_id = get_id(obj, ID_FIELDS, settings)
    return _new_event(
        f"{SOURCE}:{own_id}" if own_id is not None else stable_id(SOURCE, obj),  # event_id
        get_id(obj, ORDER_FIELDS, settings),  # order_id
        get_id(obj, USER_FIELDS, settings),  # user_id
        BEHAVIOUR_PREFIX + event_name,  # event_type
        _event_time(obj, settings),  # event_time
        None,  # amount
        None,  # status
        None,  # address
        None,  # logistics_state
        None,  # op
        SOURCE,
        raw,
        topic,
        partition,
        offset,
    )


adapt = make_adapter(SOURCE, _build, "Adapt one behaviour log line; never raises.")
