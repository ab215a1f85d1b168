"""Field readers shared by the adapters: each either returns a clean value or raises ``FieldError``.

The split the adapters follow (DESIGN.md section 5): a field that is *present but malformed* (wrong JSON
type, unparseable, out of range) is a ``FieldError`` and the record is rejected; an *absent or null*
optional field becomes ``None`` and the quality stage decides whether that makes the event INVALID.
Fields the event cannot exist without (its time, its id, its op) are required here.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone, tzinfo
from decimal import MAX_EMAX, Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo

import orjson

from lakestream.adapters.settings import DEFAULT_SETTINGS, AdapterSettings
from lakestream.standard import Rejected, StandardEvent
from lakestream.time import EPOCH

try:  # the C accelerators behind ``json``; absent only on exotic Pythons, where the slow paths serve
    from _json import encode_basestring as _c_encode_basestring
    from _json import make_encoder as _c_make_encoder
except ImportError:  # pragma: no cover - CPython always has them
    _c_make_encoder = None  # type: ignore[assignment, misc]

UTC = timezone.utc
CENT = Decimal("0.01")
MILLI = Decimal("0.001")
#: decimal128(18, 2) holds 16 integer digits.
AMOUNT_LIMIT = Decimal(10) ** 16
_NAIVE_EPOCH = datetime(1970, 1, 1)
_MILLISECOND = timedelta(milliseconds=1)
#: 9999-12-31T23:59:59.999Z: the last instant a ``datetime`` can hold.
_MAX_EPOCH_MILLIS = 253_402_300_799_999
_MAX_EPOCH_MICROS = _MAX_EPOCH_MILLIS * 1000
_PLAIN_DECIMAL = re.compile(r"-?\d{1,40}(?:\.\d{1,40})?")
#: The usual spelling of a yuan string ("487.42", "12.5", "3"): ASCII digits, at most 16 integer digits and
#: 2 decimals. For these ``_yuan``'s range and fen checks cannot fail, so ``get_yuan`` skips them.
_PLAIN_YUAN = re.compile(r"-?[0-9]{1,16}(?:\.[0-9]{1,2})?")
#: Integers below this many fen (or yuan) pass every range check of the slow paths.
_FEN_LIMIT = 10**18
_YUAN_LIMIT = 10**16
_DIGITS = re.compile(r"-?\d{1,20}")
_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?"
    r"\s*(?:(Z|z)|([+-])(\d{2})(?::?(\d{2}))?)?"
)
#: The fast path of ``parse_timestamp``: the spellings ``datetime.fromisoformat`` reads, and reads the same
#: way as ``_TIMESTAMP`` does, on every supported Python (3.10+); a ``Z`` suffix is handled separately. ASCII
#: digits only (``\d`` also matches other scripts' digits, which only the slow path reads), hours 00-23,
#: offsets below 24 h: whatever the slow path rejects or reads another way does not match.
_ISO_FAST = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{3}|\.[0-9]{6})?"
    r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])?"
)
_fromisoformat = datetime.fromisoformat
_sha256 = hashlib.sha256
_orjson_loads = orjson.loads
_orjson_dumps = orjson.dumps
_SORT_KEYS = orjson.OPT_SORT_KEYS
#: Value types orjson decodes exactly as the ``json`` module does. It reads numbers with a fraction or an
#: exponent, and integers beyond 64 bits, as ``float`` (the contract is ``Decimal``, or the exact int).
_EXACT_TYPES = frozenset({str, int, bool, type(None)})


class FieldError(ValueError):
    """A payload field is malformed; the message is ``"<field>: <what was expected>, got <what came>"``.

    Not a ``LakestreamError``: the adapter turns it into the reject reason of a quarantined record, it
    never ends a command.
    """

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


def _decimal(text: str) -> Decimal:
    """``Decimal(text)``; a number beyond the decimal module's exponent range is invalid JSON here."""
    try:
        return Decimal(text)
    except InvalidOperation:
        shown = text if len(text) <= 40 else f"{text[:37]}..."
        raise ValueError(
            f"the number {shown} is beyond the exact decimal range (exponent above {MAX_EMAX:,}); "
            "send amounts as yuan or fen within decimal(18, 2)"
        ) from None


#: Built once: ``json.loads``/``json.dumps`` with non-default options build a new codec per call.
_DECODER = json.JSONDecoder(parse_float=_decimal, parse_constant=_no_constants)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
#: ``_DECODER``'s scanner, called directly by ``parse_object``'s fast path.
_scan_once: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
#: The C encoder ``_CANONICAL.encode`` builds on every call, built once. It skips the circular-reference
#: check (``markers=None``): its inputs are decoded JSON or flat lists of strings, which cannot be circular,
#: and a shared markers dict could keep stale entries after an error.
_canonical_chunks = (
    None
    if _c_make_encoder is None
    else _c_make_encoder(None, str, _c_encode_basestring, None, ":", ",", True, False, True)
)


def canonical_json(payload: object) -> str:
    """``_CANONICAL.encode(payload)`` for acyclic payloads, without rebuilding the C encoder per call."""
    if _canonical_chunks is None:  # pragma: no cover - CPython always has the C encoder
        return _CANONICAL.encode(payload)
    return "".join(_canonical_chunks(payload, 0))


def parse_object(value: bytes, settings: AdapterSettings) -> dict[str, Any]:
    """Decode one Kafka value into a JSON object, with decimals kept exact (never float).

    Fast paths for the usual record, ``{...}`` without BOM or surrounding whitespace. First orjson (with
    its type check, 1.4x faster than the ``json`` scanner path below on the usual records), kept only for
    a flat object of strings, integers, booleans and nulls, which orjson decodes to the very values the
    ``json`` module gives; anything else it read (a float, a nested container) or refused is left to
    the next path. Then plain UTF-8 decoding (the ``utf-8-sig`` codec is a Python-level wrapper, 15x
    slower) and one ``json`` scanner call instead of ``JSONDecoder.decode``'s two whitespace matches and
    wrapper calls. Those steps do exactly what the slow path does on such input, and anything unusual
    (an error of any kind, trailing data) is redone by the slow path, so the result or the reject reason
    is the slow path's.
    """
    if len(value) > settings.max_payload_bytes:
        raise FieldError(
            "payload",
            f"{len(value)} bytes exceeds max_payload_bytes={settings.max_payload_bytes} "
            "(raise AdapterSettings.max_payload_bytes if such records are legitimate)",
        )
    if value and value[0] == 0x7B and value[-1] == 0x7D:  # b"{" ... b"}"
        try:
            obj = _orjson_loads(value)
        except orjson.JSONDecodeError:
            pass  # invalid JSON, or JSON orjson refuses (lone surrogate escapes): the paths below decide
        else:
            if type(obj) is dict:
                for item in obj.values():
                    if type(item) not in _EXACT_TYPES:
                        break
                else:
                    return obj
        try:
            text = value.decode("utf-8")
            obj, end = _scan_once(text, 0)
        except Exception:  # noqa: BLE001, S110 - the slow path below reproduces the error and its reason
            pass
        else:
            if end == len(text) and type(obj) is dict:
                return obj
    return _parse_object_slow(value)


def _parse_object_slow(value: bytes) -> dict[str, Any]:
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
    if len(names) == 1:  # most fields have one spelling: skip the loop
        name = names[0]
        value = obj.get(name)
        return ("", None) if value is None else (name, value)
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
    """A yuan amount from a JSON number or a plain decimal string, exact to the fen.

    Fast paths for the usual spellings (a plain ASCII string with at most 2 decimals, an integer) whose
    range and fen checks cannot fail: only the ``quantize`` that gives the result its 2 decimals is left.
    """
    name, value = pick(obj, names)
    if not name:
        return None
    kind = type(value)
    if kind is str:
        if _PLAIN_YUAN.fullmatch(value):
            # Already 2 decimals ("487.42"): exactly what ``quantize`` would return, without the call.
            return Decimal(value) if value[-3:-2] == "." else Decimal(value).quantize(CENT)
    elif kind is int and -_YUAN_LIMIT < value < _YUAN_LIMIT:
        return Decimal(value).quantize(CENT)
    return _yuan_slow(name, value)


def _yuan_slow(name: str, value: Any) -> Decimal:
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
    if type(value) is int and -_FEN_LIMIT < value < _FEN_LIMIT:
        # The slow path's checks cannot fail, and the exact ``scaleb`` already has 2 decimals (what its
        # ``quantize`` would give).
        return Decimal(value).scaleb(-2)
    return _fen_as_yuan_slow(name, value)


def _fen_as_yuan_slow(name: str, value: Any) -> Decimal:
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
    if type(value) is int and 0 <= value <= _MAX_EPOCH_MILLIS:  # the usual case, checks done
        return EPOCH + _MILLISECOND * value  # exact integer microseconds, no constructor call
    return _millis_to_utc_slow(name, value)


def _millis_to_utc_slow(name: str, value: Any) -> datetime:
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
    if not 0 <= micros <= _MAX_EPOCH_MICROS:
        raise FieldError(name, f"epoch milliseconds {describe(value)} outside 1970-01-01..9999-12-31")
    return EPOCH + timedelta(0, 0, micros)  # positional: half the cost of ``microseconds=``


def parse_timestamp(name: str, text: str, *, naive_zone: tzinfo | None) -> datetime:
    """ISO-8601-ish text (``T`` or space, optional seconds/fraction/offset) to UTC, microsecond precision.

    One strict parser for every source, so behaviour does not depend on the Python version's
    ``fromisoformat``. Fractions beyond microseconds are truncated. A text without offset is read in
    ``naive_zone``, or rejected when that is ``None``. Ambiguous local times (DST fall-back) take the first
    occurrence (``fold=0``), which is deterministic.

    The usual spellings (``_ISO_FAST``) take a fast path, several times faster: C ``fromisoformat`` instead
    of regex groups and ``int`` calls, and datetime arithmetic instead of ``replace``/``astimezone`` (whose
    keyword parsing dominates). It computes what the slow path computes: ``astimezone(UTC)`` is the local
    wall time minus its UTC offset, labelled UTC, and a ``ZoneInfo`` finds the offset of a wall time from
    its fields and ``fold`` (0 here, as in the slow path), whatever its ``tzinfo``. Naive times in zones
    other than ``ZoneInfo`` and every error go to the slow path, so reasons stay the slow path's.
    """
    parsed = _parse_timestamp_fast(text.strip(), naive_zone)
    return _parse_timestamp_slow(name, text, naive_zone) if parsed is None else parsed


def parse_timestamp_iso(name: str, text: str, *, naive_zone: tzinfo | None) -> tuple[datetime, str]:
    """``(t, t.isoformat())`` for ``t = parse_timestamp(name, text, naive_zone=naive_zone)``.

    ``isoformat`` costs as much as the parse. When the text is already the ISO form of a UTC instant
    (``2024-06-01T12:00:00+00:00``, or with ``Z``), that is what ``isoformat`` returns, so it is reused:
    the fast path accepted it, so ``_ISO_FAST`` guarantees zero-padded fields and no fraction at these
    lengths, and converting a UTC text to UTC keeps its fields.
    """
    stripped = text.strip()
    parsed = _parse_timestamp_fast(stripped, naive_zone)
    if parsed is None:
        parsed = _parse_timestamp_slow(name, text, naive_zone)
    elif stripped[10] == "T":
        n = len(stripped)
        if n == 25 and stripped.endswith("+00:00"):
            return parsed, stripped
        if n == 20 and stripped[19] == "Z":
            return parsed, stripped[:19] + "+00:00"
    return parsed, parsed.isoformat()


def _parse_timestamp_fast(stripped: str, naive_zone: tzinfo | None) -> datetime | None:
    """``parse_timestamp``'s fast path; ``None`` where it does not apply or fails (the slow path decides)."""
    if _ISO_FAST.fullmatch(stripped) is None:
        return None
    try:
        if stripped[-1] == "Z":
            return EPOCH + (_fromisoformat(stripped[:-1]) - _NAIVE_EPOCH)
        local = _fromisoformat(stripped)
        if local.tzinfo is not None:  # a fixed offset from the text
            return EPOCH + (local - EPOCH)
        if type(naive_zone) is ZoneInfo:
            offset = naive_zone.utcoffset(local)
            if offset is not None:  # always, for a ZoneInfo
                return EPOCH + (local - _NAIVE_EPOCH - offset)
    except (ValueError, OverflowError):
        pass
    return None


def _parse_timestamp_slow(name: str, text: str, naive_zone: tzinfo | None) -> datetime:
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


def canonical_json_bytes(payload: object) -> bytes:
    """``canonical_json(payload)`` as UTF-8, for decoded JSON (``parse_object``'s values, ``Decimal``s).

    orjson with sorted keys writes those bytes 5.8x faster. Where it would write something else it refuses
    instead (integers beyond 64 bits, lone surrogates, nesting deeper than 255), and the ``json`` module
    gives the result or the error it always gave. Not for floats (orjson spells ``1e16`` where ``json``
    writes ``1e+16``): decoded JSON never holds one here, ``parse_object`` reads decimals as ``Decimal``.
    """
    try:
        return _orjson_dumps(payload, default=str, option=_SORT_KEYS)
    except orjson.JSONEncodeError:
        return canonical_json(payload).encode("utf-8")


def stable_id(source: str, payload: object) -> str:
    """``<source>:<128-bit sha256 prefix>`` of the canonical JSON of ``payload`` (sorted keys, no spaces).

    Canonical means key order and whitespace of the original bytes do not matter, so a re-delivered record
    (re-serialised by a retrying producer) gets the same id and is de-duplicated.
    """
    try:  # ``canonical_json_bytes`` written out: one call less per record
        canonical = _orjson_dumps(payload, default=str, option=_SORT_KEYS)
    except orjson.JSONEncodeError:
        canonical = canonical_json(payload).encode("utf-8")
    return f"{source}:{_sha256(canonical).hexdigest()[:32]}"


Builder = Callable[[dict[str, Any], bytes, str, int, int, AdapterSettings], StandardEvent]


def make_adapter(source: str, build: Builder, doc: str) -> Callable[..., StandardEvent | Rejected]:
    """The public ``adapt`` of one source module: the shared shell around that source's builder.

    The shell turns bytes into an event or a ``Rejected``, never an exception. A record that breaks an
    adapter through a bug (not a ``FieldError``) is still quarantined, with the exception in the reason,
    because one poison record must not crash-loop the streaming job; the unit tests fuzz the adapters and
    fail on any such reason. It is written out in the closure (no further call) because it runs once per
    Kafka record.
    """

    def adapt(
        value: bytes | None,
        *,
        topic: str,
        partition: int,
        offset: int,
        settings: AdapterSettings = DEFAULT_SETTINGS,
    ) -> StandardEvent | Rejected:
        # ``bytes(b)`` returns ``b`` itself for exact ``bytes``, after a costly ``__bytes__`` lookup and call.
        raw = value if type(value) is bytes else b"" if value is None else bytes(value)
        try:
            if value is None or not raw:
                raise FieldError("payload", "empty record (null Kafka value or zero bytes)")
            return build(parse_object(raw, settings), raw, topic, partition, offset, settings)
        except FieldError as exc:
            reason = str(exc)
        except Exception as exc:  # noqa: BLE001 - see docstring: quarantine instead of crash-looping
            reason = f"payload: adapter error {type(exc).__name__}: {exc}"
        # The bytes go to quarantine whole, however large: a rejected record must be replayable after a fix.
        return Rejected(
            raw=raw, source=source, reason=reason, topic=topic, partition=partition, offset=offset
        )

    adapt.__doc__ = doc
    adapt.__qualname__ = adapt.__name__ = "adapt"
    return adapt
