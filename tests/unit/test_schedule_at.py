"""One-off instants: ISO-8601 with Z or an offset becomes UTC milliseconds; nothing is guessed."""

from __future__ import annotations

import pytest

from tickwheel.schedule import ScheduleError, format_utc, parse_at, parse_instant

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("2026-12-01T09:00:00Z", 1_796_115_600_000),
        ("2026-12-01T10:00:00+01:00", 1_796_115_600_000),
        ("2026-12-01T04:00:00-05:00", 1_796_115_600_000),
        ("2026-12-01T09:00:00.250Z", 1_796_115_600_250),
        ("2026-12-01T09:00:00.2509Z", 1_796_115_600_250),
        ("2026-12-01T09:00Z", 1_796_115_600_000),
        ("1970-01-01T00:00:00Z", 0),
    ],
)
def test_instants_with_z_or_offset_become_utc_milliseconds(text: str, expected_ms: int) -> None:
    """Z and ±hh:mm offsets give the same UTC instant; sub-milliseconds are dropped."""
    assert parse_at(text) == expected_ms


@pytest.mark.parametrize("text", ["2026-12-01T09:00:00", "2026-12-01", "2026-12-01 09:00"])
def test_timestamps_without_offset_are_rejected(text: str) -> None:
    """A naive timestamp names a wall time, not an instant: ScheduleError('at')."""
    with pytest.raises(ScheduleError, match=r"^at .* has no Z or UTC offset") as raised:
        parse_at(text)
    assert raised.value.field == "at"


@pytest.mark.parametrize("text", ["tomorrow", "2026-13-01T00:00:00Z", "", "2026-12-01T25:00Z"])
def test_unparseable_text_is_rejected_with_an_example(text: str) -> None:
    """Text that is no ISO-8601 instant is ScheduleError('at') showing the expected form."""
    with pytest.raises(ScheduleError, match=r"is not an ISO-8601 instant; use for example"):
        parse_at(text)


@pytest.mark.parametrize("value", [None, 1_796_115_600_000])
def test_non_strings_are_rejected(value: object) -> None:
    """Only strings are instants here; a number is not silently read as epoch time."""
    with pytest.raises(ScheduleError, match=r"^at must be an ISO-8601 instant string"):
        parse_at(value)  # type: ignore[arg-type]


def test_years_outside_the_supported_range_are_rejected() -> None:
    """Instants before 1900 or after 8999 are refused, naming the range."""
    with pytest.raises(ScheduleError, match=r"between the years 1900 and 8999"):
        parse_at("1899-12-31T23:59:59Z")


def test_field_name_is_the_callers() -> None:
    """parse_instant names the field it is given (the CLI's --after)."""
    with pytest.raises(ScheduleError, match=r"^after ") as raised:
        parse_instant("soon", "after")
    assert raised.value.field == "after"


def test_format_utc_prints_whole_seconds() -> None:
    """format_utc gives YYYY-MM-DDTHH:MM:SSZ and drops milliseconds."""
    assert format_utc(1_796_115_600_999) == "2026-12-01T09:00:00Z"
    assert format_utc(0) == "1970-01-01T00:00:00Z"


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:00-01:00"])
def test_offsets_pushing_past_datetime_range_are_a_schedule_error(text: str) -> None:
    """an offset that pushes an instant out of datetime's range is refused, not an overflow"""
    with pytest.raises(ScheduleError, match="must lie between the years"):
        parse_at(text)


@pytest.mark.parametrize(
    "text",
    ["2026-01-01T00:00:00Z\x00garbage", "2026-01-01T00:00:00Z\x00", "2026-01-01T00:00:00Z\n"],
)
def test_a_nul_or_control_character_is_refused_not_cut_off(text: str) -> None:
    """issue 28 (low): the stdlib parser stopped at a NUL and ignored what followed it, so
    '…Z\\x00garbage' was an instant; any character but printable ASCII is refused"""
    with pytest.raises(ScheduleError, match="printable ASCII") as refused:
        parse_instant(text, "from")
    assert refused.value.field == "from"
