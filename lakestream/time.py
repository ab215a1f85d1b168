"""Times, durations and sizes as users type them and as lakestream writes them; times are UTC.

One module for every flag, query parameter, source option and configuration key that takes an instant
(ISO 8601), a duration (``250ms``, ``5m``) or a size (``10mb``), so all accept the same forms and name
the flag and those forms when a value is not one of them; and one way each is written back.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, timezone

from lakestream.errors import LakestreamError

#: The Unix epoch, aware: epoch counts are exact integer differences from it (``(t - EPOCH) // unit``).
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

#: The forms :func:`parse_time` accepts, for error messages and help texts.
ACCEPTED_FORMS = "2024-06-01, 2024-06-01T04:00, 2024-06-01T04:00:00Z or 2024-06-01T12:00:00+08:00"


class TimeArgError(LakestreamError, ValueError):
    """A time, duration or size argument is malformed or out of order; the message names the argument
    and the fix."""


def parse_iso(text: str) -> datetime:
    """ISO 8601 ``text`` as an aware UTC datetime: a date is its midnight, a time without offset is UTC.

    ``ValueError`` when it is not one; :func:`parse_time` names the argument in that error.
    """
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    if len(value) == 10:
        try:
            day = date.fromisoformat(value)
            return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
        except ValueError:
            pass
    when = datetime.fromisoformat(value)
    if when.tzinfo is None:
        return when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc)


def parse_time(text: str, *, name: str, error: type[Exception] = TimeArgError) -> datetime:
    """``text`` as an aware UTC datetime (:func:`parse_iso`).

    ``name`` is the flag, parameter or option (``--from``, ``from``) the value came from, for the
    ``error`` that names it and the accepted forms.
    """
    try:
        return parse_iso(text)
    except ValueError:
        raise error(f"{name} {text!r}: not an ISO 8601 date or time; use {ACCEPTED_FORMS}") from None


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
    text = when.isoformat()
    if text.endswith("+00:00"):  # already UTC: C ``isoformat`` alone, for the rows the server writes
        return text[:-6] + "Z"
    utc = when.astimezone(timezone.utc)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond:06d}"
    return text + "Z"


def parse_as_of(text: str, *, name: str) -> int | datetime:
    """``--as-of`` / ``as_of``: a table version (``12``) or an ISO 8601 time (read as UTC)."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        return parse_iso(value)
    except ValueError:
        raise TimeArgError(
            f"{name} {text!r}: expected a table version (a whole number such as 12) or a time "
            f"({ACCEPTED_FORMS})"
        ) from None


def utc_from_ms(ms: float) -> datetime:
    """Epoch milliseconds (a Delta commit time, a Kafka timestamp) as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def iso_utc_ms(ms: float) -> str:
    """:func:`iso_utc` of epoch milliseconds."""
    return iso_utc(utc_from_ms(ms))


def plain_utc(ms: object, *, suffix: bool = True) -> str:
    """Epoch milliseconds as ``2024-06-01 04:05:00 UTC`` for people to read; ``?`` for anything but a
    number (a time that is not known). ``suffix=False`` leaves out `` UTC`` under a heading that says it."""
    if not isinstance(ms, int | float):
        return "?"
    return utc_from_ms(ms).strftime("%Y-%m-%d %H:%M:%S") + (" UTC" if suffix else "")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: object, *, key: str, error: type[Exception] = TimeArgError) -> timedelta:
    """Parse ``"5m"``, ``"250ms"``, ``"1h"``, ``"30"`` (seconds) or a number of seconds.

    ``key`` is the configuration key or flag the value came from, for the ``error`` that names it.
    """
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise error(f"{key}: expected a duration such as '5m' or '30s', got {value!r}")
    if isinstance(value, int | float):
        return timedelta(seconds=float(value))
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])
    raise error(f"{key}: expected a duration such as '5m', '30s' or '250ms', got {value!r}")


def format_duration(duration: timedelta) -> str:
    """``3d 4h``, ``2h 5m``, ``40s``: exact to the second, short and readable."""
    seconds = int(duration.total_seconds())
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m {secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def human_duration(seconds: float) -> str:
    """A duration in one unit, rounded, for charts: ``42 s``, ``5 min``, ``2.5 h``, ``913.4 days``."""
    if seconds < 120:
        return f"{seconds:g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:,.1f} days"


_SIZE_UNITS = {"b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3, "gb": 1024**3}


def parse_size(text: str, *, key: str, error: type[Exception] = TimeArgError) -> int:
    """``1048576``, ``512k``, ``10mb``, ``1g`` -> bytes (units of 1024).

    ``key`` is the option or configuration key the value came from, for the ``error`` that names it.
    """
    s = text.strip().lower()
    digits = s.rstrip("abgkm")
    unit = s[len(digits) :] or "b"
    if not digits.isdigit() or unit not in _SIZE_UNITS:
        raise error(f"{key}: expected a size such as '10mb' or '1048576', got {text!r}")
    return int(digits) * _SIZE_UNITS[unit]
