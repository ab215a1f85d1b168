"""Field readers shared by the adapters: each either returns a clean value or raises ``FieldError``.

The split the adapters follow (documented in ``lakestream.adapters``): a field that is *present but
malformed* (wrong JSON type, unparseable, out of range) is a ``FieldError`` and the record is rejected;
an *absent or null* optional field becomes ``None`` and the quality stage decides whether that makes the
event INVALID. Fields the event cannot exist without (its time, its id, its op) are required here.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone, tzinfo
from decimal import Decimal, InvalidOperation
from typing import Any

from lakestream.adapters.settings import DEFAULT_SETTINGS, AdapterSettings
from lakestream.standard import Rejected, StandardEvent

UTC = timezone.utc
CENT = Decimal("0.01")
MILLI = Decimal("0.001")
#: decimal128(18, 2) holds 16 integer digits.
AMOUNT_LIMIT = Decimal(10) ** 16
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: 9999-12-31T23:59:59.999Z: the last instant a ``datetime`` can hold.
_MAX_EPOCH_MILLIS = 253_402_300_799_999
_PLAIN_DECIMAL = re.compile(r"-?\d{1,40}(?:\.\d{1,40})?")
_DIGITS = re.compile(r"-?\d{1,20}")
_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?"
    r"\s*(?:(Z|z)|([+-])(\d{2})(?::?(\d{2}))?)?"
)


class FieldError(ValueError):
    """A payload field is malformed; the message is ``"<field>: <what was expected>, got <what came>"``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")


def describe(value: object) -> str:
    """Render an offending value for a reject reason: short, and its JSON type when it is a container."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if value is True or value is False:
        return "true" if value else "false"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


#: Built once: ``json.loads``/``json.dumps`` with non-default options build a new codec per call.
_DECODER = json.JSONDecoder(parse_float=Decimal, parse_constant=_no_constants)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def parse_object(value: bytes, settings: AdapterSettings) -> dict[str, Any]:
    """Decode one Kafka value into a JSON object, with decimals kept exact (never float)."""
    if len(value) > settings.max_payload_bytes:
        raise FieldError(
            "payload",
            f"{len(value)} bytes exceeds max_payload_bytes={settings.max_payload_bytes} "
            "(raise AdapterSettings.max_payload_bytes if such records are legitimate)",
        )
    try:
        obj = _DECODER.decode(value.decode("utf-8-sig"))
    except RecursionError:
        raise FieldError("payload", "invalid JSON: nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise FieldError("payload", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, ints beyond Python's digit limit
        raise FieldError("payload", f"invalid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise FieldError("payload", f"expected a JSON object, got {describe(obj)}")
    return obj


def pick(obj: Mapping[str, Any], names: Sequence[str]) -> tuple[str, Any]:
    """Value of the first present, non-null alias in ``names`` (``("", None)`` if none).

    Two aliases carrying different values is an error, not a silent preference: it means a client sends
    something nobody documented.
    """
    found_name = ""
    found: Any = None
    for name in names:
        value = obj.get(name)
        if value is None:
            continue
        if found_name and value != found:
            raise FieldError(
                "/".join(names),
                f"conflicting values {describe(found)} ({found_name}) and {describe(value)} ({name})",
            )
        if not found_name:
            found_name, found = name, value
    return found_name, found


def _label(names: Sequence[str]) -> str:
    return "/".join(names)


def get_id(obj: Mapping[str, Any], names: Sequence[str], settings: AdapterSettings) -> str | None:
    """An identifier: a non-empty string or an integer (many sources emit numeric ids), as ``str``."""
    name, value = pick(obj, names)
    if not name:
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    else:
        raise FieldError(name, f"expected a string or integer id, got {describe(value)}")
    if len(text) > settings.max_id_chars:
        raise FieldError(name, f"id of {len(text)} characters exceeds max_id_chars={settings.max_id_chars}")
    return text


def require(value: Any, names: Sequence[str]) -> Any:
    """Fail with ``"<field>: missing"`` when a required field is absent, null or empty."""
    if value is None:
        raise FieldError(_label(names), "missing (required)")
    return value


def get_text(obj: Mapping[str, Any], names: Sequence[str], settings: AdapterSettings) -> str | None:
    """Free text, stripped; empty means absent (CDC tools emit '' for unset columns)."""
    name, value = pick(obj, names)
    if not name:
        return None
    if not isinstance(value, str):
        raise FieldError(name, f"expected a string, got {describe(value)}")
    text = value.strip()
    if len(text) > settings.max_text_chars:
        raise FieldError(
            name, f"text of {len(text)} characters exceeds max_text_chars={settings.max_text_chars}"
        )
    return text or None


def get_code(obj: Mapping[str, Any], names: Sequence[str], settings: AdapterSettings) -> str | None:
    """An enumeration value (status, state), normalised to lower case so sources agree on spelling."""
    text = get_text(obj, names, settings)
    return None if text is None else text.lower()


def _yuan(name: str, value: Decimal) -> Decimal:
    # Magnitude is checked with ``adjusted()`` (no arithmetic) first: arithmetic on a JSON number such as
    # 1e999999999 would raise decimal.Overflow in the default context.
    if not value.is_finite():
        raise FieldError(name, f"expected a finite amount, got {value}")
    if value.adjusted() >= 16 or abs(value) >= AMOUNT_LIMIT:
        raise FieldError(name, f"{describe(value)} is outside decimal(18, 2) (at most 16 integer digits)")
    try:
        cents = value.quantize(CENT)
    except InvalidOperation:
        raise FieldError(name, f"{describe(value)} cannot be represented in fen") from None
    if cents != value:
        raise FieldError(name, f"{describe(value)} has fractions of a fen (more than 2 decimal places)")
    return cents


def get_yuan(obj: Mapping[str, Any], names: Sequence[str]) -> Decimal | None:
    """A yuan amount from a JSON number or a plain decimal string, exact to the fen."""
    name, value = pick(obj, names)
    if not name:
        return None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, Decimal):
        number = value
    elif isinstance(value, str) and _PLAIN_DECIMAL.fullmatch(value.strip()):
        number = Decimal(value.strip())
    else:
        number = None
    if number is None:
        raise FieldError(name, f"expected a decimal number of yuan, got {describe(value)}")
    return _yuan(name, number)


def get_fen_as_yuan(obj: Mapping[str, Any], names: Sequence[str]) -> Decimal | None:
    """An integer fen amount converted to yuan (fen / 100), exact."""
    name, value = pick(obj, names)
    if not name:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        fen = Decimal(value)
    elif isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        fen = value
    else:
        raise FieldError(name, f"expected an integer number of fen, got {describe(value)}")
    if fen.adjusted() >= 18:
        raise FieldError(
            name, f"{describe(fen)} fen is outside decimal(18, 2) (at most 16 integer digits of yuan)"
        )
    return _yuan(name, fen.scaleb(-2))


def millis_to_utc(name: str, value: Any) -> datetime:
    """Epoch milliseconds (JSON integer, or a number with up to 3 decimals = microseconds) to UTC."""
    if isinstance(value, bool):
        raise FieldError(name, f"expected epoch milliseconds, got {describe(value)}")
    if isinstance(value, int):
        micros = value * 1000
    elif isinstance(value, Decimal) and value.is_finite():
        # adjusted() first: arithmetic on 1e999999999 would raise decimal.Overflow.
        if value.adjusted() > 15:
            raise FieldError(name, f"epoch milliseconds {describe(value)} outside 1970-01-01..9999-12-31")
        if value.quantize(MILLI) != value:
            raise FieldError(name, f"expected epoch milliseconds (at most 3 decimals), got {describe(value)}")
        micros = int(value.scaleb(3))
    else:
        raise FieldError(name, f"expected epoch milliseconds, got {describe(value)}")
    if not 0 <= micros <= _MAX_EPOCH_MILLIS * 1000:
        raise FieldError(name, f"epoch milliseconds {describe(value)} outside 1970-01-01..9999-12-31")
    return _EPOCH + timedelta(microseconds=micros)


def parse_timestamp(name: str, text: str, *, naive_zone: tzinfo | None) -> datetime:
    """ISO-8601-ish text (``T`` or space, optional seconds/fraction/offset) to UTC, microsecond precision.

    One strict parser for every source, so behaviour does not depend on the Python version's
    ``fromisoformat``. Fractions beyond microseconds are truncated. A text without offset is read in
    ``naive_zone``, or rejected when that is ``None``. Ambiguous local times (DST fall-back) take the first
    occurrence (``fold=0``), which is deterministic.
    """
    m = _TIMESTAMP.fullmatch(text.strip())
    if m is None:
        raise FieldError(
            name, f"expected a timestamp like '2024-06-01 12:00:00[+08:00]', got {describe(text)}"
        )
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = m.groups()
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    tz: tzinfo | None
    if zulu:
        tz = UTC
    elif sign:
        offset = timedelta(hours=int(off_h), minutes=int(off_m or 0))
        if offset >= timedelta(hours=24):
            raise FieldError(name, f"UTC offset out of range in {describe(text)}")
        tz = timezone(-offset if sign == "-" else offset)
    elif naive_zone is not None:
        tz = naive_zone
    else:
        raise FieldError(
            name, f"timestamp {describe(text)} has no UTC offset and this source has no zone configured"
        )
    try:
        local = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second or 0), micro, tzinfo=tz
        )
        return local.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise FieldError(name, f"invalid timestamp {describe(text)} ({exc})") from None


def stable_id(source: str, payload: object) -> str:
    """``<source>:<128-bit sha256 prefix>`` of the canonical JSON of ``payload`` (sorted keys, no spaces).

    Canonical means key order and whitespace of the original bytes do not matter, so a re-delivered record
    (re-serialised by a retrying producer) gets the same id and is de-duplicated.
    """
    canonical = _CANONICAL.encode(payload)
    return f"{source}:{hashlib.sha256(canonical.encode('utf-8')).hexdigest()[:32]}"


Builder = Callable[[dict[str, Any], bytes, str, int, int, AdapterSettings], StandardEvent]


def make_adapter(source: str, build: Builder, doc: str) -> Callable[..., StandardEvent | Rejected]:
    """The public ``adapt`` of one source module: ``run_adapter`` bound to that source's builder."""

    def adapt(
        value: bytes | None,
        *,
        topic: str,
        partition: int,
        offset: int,
        settings: AdapterSettings = DEFAULT_SETTINGS,
    ) -> StandardEvent | Rejected:
        return run_adapter(
            source, build, value, topic=topic, partition=partition, offset=offset, settings=settings
        )

    adapt.__doc__ = doc
    adapt.__qualname__ = adapt.__name__ = "adapt"
    return adapt


def run_adapter(
    source: str,
    build: Builder,
    value: bytes | None,
    *,
    topic: str,
    partition: int,
    offset: int,
    settings: AdapterSettings,
) -> StandardEvent | Rejected:
    """Shared adapter shell: bytes in, event or ``Rejected`` out, never an exception.

    A record that breaks an adapter through a bug (not a ``FieldError``) is still quarantined, with the
    exception in the reason, because one poison record must not crash-loop the streaming job; the unit
    tests fuzz the adapters and fail on any such reason.
    """
    raw = b"" if value is None else bytes(value)
    try:
        if value is None or not raw:
            raise FieldError("payload", "empty record (null Kafka value or zero bytes)")
        obj = parse_object(raw, settings)
        return build(obj, raw, topic, partition, offset, settings)
    except FieldError as exc:
        reason = str(exc)
    except Exception as exc:  # noqa: BLE001 - see docstring: quarantine instead of crash-looping
        reason = f"payload: adapter error {type(exc).__name__}: {exc}"
    # The bytes go to quarantine whole, however large: a rejected record must be replayable after a fix.
    return Rejected(raw=raw, source=source, reason=reason, topic=topic, partition=partition, offset=offset)
