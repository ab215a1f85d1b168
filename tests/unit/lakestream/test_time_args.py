"""Times on the command line and in query strings: ISO 8601, a time without offset is UTC."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from lakestream.time import TimeArgError, iso_utc, parse_range, parse_time, utc_day

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
