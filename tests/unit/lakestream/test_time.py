"""Times, durations and sizes as users type them (ISO 8601, a time without offset is UTC; ``250ms``;
``10mb``) and as they are written back."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from lakestream.time import (
    TimeArgError,
    format_duration,
    human_duration,
    iso_utc,
    iso_utc_ms,
    parse_as_of,
    parse_duration,
    parse_iso,
    parse_range,
    parse_size,
    parse_time,
    plain_utc,
    utc_day,
    utc_from_ms,
)

UTC = timezone.utc


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-06-01", datetime(2024, 6, 1, tzinfo=UTC)),
        ("2024-06-01T04:00", datetime(2024, 6, 1, 4, tzinfo=UTC)),
        ("2024-06-01T04:00:00Z", datetime(2024, 6, 1, 4, tzinfo=UTC)),
        ("2024-06-01 04:00:00", datetime(2024, 6, 1, 4, tzinfo=UTC)),
        ("2024-06-01T12:00:00+08:00", datetime(2024, 6, 1, 4, tzinfo=UTC)),
        ("2024-06-01T04:00:00.250Z", datetime(2024, 6, 1, 4, 0, 0, 250_000, tzinfo=UTC)),
    ],
)
def test_accepted_forms_are_read_as_utc(text: str, expected: datetime) -> None:
    parsed = parse_time(text, name="--from")
    assert parsed == expected and parsed.utcoffset() == expected.utcoffset()


@pytest.mark.parametrize("text", ["yesterday", "2024-13-01", "06/01/2024", "", "1717200000"])
def test_a_bad_time_names_the_flag_and_the_accepted_forms(text: str) -> None:
    with pytest.raises(TimeArgError) as err:
        parse_time(text, name="--to")
    assert str(err.value).startswith(f"--to {text!r}: not an ISO 8601 date or time")
    assert "2024-06-01T04:00:00Z" in str(err.value)


def test_a_range_must_go_forward() -> None:
    assert parse_range("2024-06-01", "2024-06-02", names=("--from", "--to"))[1] == datetime(
        2024, 6, 2, tzinfo=UTC
    )
    with pytest.raises(TimeArgError, match="--to '2024-06-01' must be after --from '2024-06-01'"):
        parse_range("2024-06-01", "2024-06-01", names=("--from", "--to"))


def test_utc_day_and_the_written_form() -> None:
    start, end = utc_day(parse_time("2024-06-01T07:30:00+08:00", name="t"))  # 23:30 UTC on May 31
    assert (iso_utc(start), iso_utc(end)) == ("2024-05-31T00:00:00Z", "2024-06-01T00:00:00Z")
    assert iso_utc(datetime(2024, 6, 1, 4, 0, 0, 5, tzinfo=UTC)) == "2024-06-01T04:00:00.000005Z"


@pytest.mark.parametrize(
    "text",
    ["2024-06-01T04:00z", " 2024-06-01T04:00:00Z ", "2024-06-01t04:00:00Z", "20240601T0400", "2024-06-01T04"],
)
def test_every_iso_8601_spelling_any_time_argument_took_is_read(text: str) -> None:
    assert parse_iso(text) == datetime(2024, 6, 1, 4, tzinfo=UTC)


def test_an_error_class_of_the_callers_own_names_the_argument() -> None:
    with pytest.raises(KeyError, match="startingTimestamp 'soon': not an ISO 8601 date or time"):
        parse_time("soon", name="startingTimestamp", error=KeyError)
    with pytest.raises(LookupError, match="--poll-interval: expected a duration"):
        parse_duration("often", key="--poll-interval", error=LookupError)
    with pytest.raises(LookupError, match="k: expected a size such as '10mb'"):
        parse_size("ten", key="k", error=LookupError)


def test_as_of_is_a_version_or_a_time() -> None:
    assert parse_as_of(" 12 ", name="--as-of") == 12
    assert parse_as_of("2024-06-01", name="--as-of") == datetime(2024, 6, 1, tzinfo=UTC)
    with pytest.raises(TimeArgError, match="as_of 'last week': expected a table version"):
        parse_as_of("last week", name="as_of")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("5m", timedelta(minutes=5)),
        ("250ms", timedelta(milliseconds=250)),
        ("2h", timedelta(hours=2)),
        (30, timedelta(seconds=30)),
    ],
)
def test_durations(value: object, expected: timedelta) -> None:
    assert parse_duration(value, key="k") == expected


@pytest.mark.parametrize("value", ["soon", True, None, "5 weeks"])
def test_a_bad_duration_names_the_key(value: object) -> None:
    with pytest.raises(TimeArgError, match="k: expected a duration such as '5m'"):
        parse_duration(value, key="k")


def test_durations_written_for_people() -> None:
    assert [format_duration(timedelta(seconds=s)) for s in (40, 125, 7200, 7500, 3 * 86400 + 4 * 3600)] == [
        "40s",
        "2m 5s",
        "2h",
        "2h 5m",
        "3d 4h",
    ]
    assert [human_duration(s) for s in (42, 300, 9000, 78_917_760)] == [
        "42 s",
        "5 min",
        "2.5 h",
        "913.4 days",
    ]


def test_sizes() -> None:
    assert parse_size("10mb", key="k") == 10 * 1024 * 1024
    assert [parse_size(t, key="k") for t in ("1048576", "512k", " 1G ", "256k")] == [
        1 << 20,
        512 << 10,
        1 << 30,
        256 << 10,
    ]


def test_epoch_milliseconds() -> None:
    ms = 1_717_214_700_250  # 2024-06-01T04:05:00.250Z
    assert utc_from_ms(ms) == datetime(2024, 6, 1, 4, 5, 0, 250_000, tzinfo=UTC)
    assert iso_utc_ms(ms) == "2024-06-01T04:05:00.250000Z"
    assert plain_utc(ms) == "2024-06-01 04:05:00 UTC"
    assert plain_utc(ms, suffix=False) == "2024-06-01 04:05:00"
    assert plain_utc(None) == "?"


def test_the_written_form_is_utc_whatever_the_offset() -> None:
    shanghai = timezone(timedelta(hours=8))
    assert iso_utc(datetime(2024, 6, 1, 12, 5, tzinfo=shanghai)) == "2024-06-01T04:05:00Z"
    assert iso_utc(datetime(2024, 6, 1, 4, 5, 0, 7, tzinfo=UTC)) == "2024-06-01T04:05:00.000007Z"
