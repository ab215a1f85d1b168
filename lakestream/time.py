"""ISO 8601 times as users type them on a command line or in a query string, read as UTC.

One parser for ``lakestream query`` and ``lakestream serve``, so both accept the same forms and name
the flag (or query parameter) and those forms when a value is not one of them.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

#: The forms :func:`parse_time` accepts, for error messages and help texts.
ACCEPTED_FORMS = "2024-06-01, 2024-06-01T04:00, 2024-06-01T04:00:00Z or 2024-06-01T12:00:00+08:00"


class TimeArgError(ValueError):
    """A time argument is malformed or out of order; the message names the argument and the fix."""


def parse_time(text: str, *, name: str) -> datetime:
    """``text`` as an aware UTC datetime: a date is its midnight, a time without offset is UTC.

    ``name`` is the flag or parameter (``--from``, ``from``) the value came from, for the error.
    """
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
        when = datetime.fromisoformat(value)
    except ValueError:
        raise TimeArgError(f"{name} {text!r}: not an ISO 8601 date or time; use {ACCEPTED_FORMS}") from None
    if when.tzinfo is None:
        return when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc)


def parse_range(start: str, end: str, *, names: tuple[str, str]) -> tuple[datetime, datetime]:
    """The half-open range ``[start, end)`` of two time arguments; ``end`` must be after ``start``."""
    low, high = parse_time(start, name=names[0]), parse_time(end, name=names[1])
    if high <= low:
        raise TimeArgError(
            f"{names[1]} {end!r} must be after {names[0]} {start!r} (the range is [{names[0]}, {names[1]}))"
        )
    return low, high


def utc_day(when: datetime) -> tuple[datetime, datetime]:
    """The UTC day holding ``when``: ``[midnight, next midnight)``."""
    utc = when.astimezone(timezone.utc)
    start = datetime(utc.year, utc.month, utc.day, tzinfo=timezone.utc)
    return start, start + timedelta(days=1)


def iso_utc(when: datetime) -> str:
    """``2024-06-01T04:05:00Z`` (microseconds only when there are any): the one way times are written."""
    utc = when.astimezone(timezone.utc)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond:06d}"
    return text + "Z"
