"""The wall-clock field matcher: naive local time, no zone, search bounded by the horizon."""

from __future__ import annotations

from datetime import datetime

import pytest

from tickwheel.schedule.fields import parse_fields
from tickwheel.schedule.wallclock import FieldMatcher, from_wall_s, to_wall_s

pytestmark = pytest.mark.unit

WALL_2000 = to_wall_s(datetime(2000, 1, 1))  # wall seconds


def _matcher(expr: str) -> FieldMatcher:
    return FieldMatcher(parse_fields(expr.split()))


@pytest.mark.parametrize(
    ("expr", "start", "expected"),
    [
        ("0 0 * * *", "2024-05-01T00:00:00", "2024-05-01T00:00:00"),
        ("0 0 * * *", "2024-05-01T00:00:01", "2024-05-02T00:00:00"),
        ("0 0 L * *", "2024-02-03T00:00:00", "2024-02-29T00:00:00"),
        ("0 0 31 * *", "2024-04-01T00:00:00", "2024-05-31T00:00:00"),
        ("0 0 29 2 *", "2025-01-01T00:00:00", "2028-02-29T00:00:00"),
        ("0 0 13 * FRI", "2024-09-01T00:00:00", "2024-09-06T00:00:00"),
        ("30 10 0 * * *", "2024-05-01T00:00:00", "2024-05-01T00:10:30"),
        ("59 59 23 31 DEC *", "2024-12-31T23:59:59", "2024-12-31T23:59:59"),
        ("0 0 * 2 MON#5", "2017-01-01T00:00:00", "2044-02-29T00:00:00"),
        ("0 0 1 1 *", "8999-06-01T00:00:00", "9000-01-01T00:00:00"),
    ],
)
def test_field_matcher_examples(expr: str, start: str, expected: str) -> None:
    """L, short months, leap days, the day-field rule, seconds and local year 9000 match."""
    found = _matcher(expr).next_at_or_after(to_wall_s(datetime.fromisoformat(start)))
    assert found is not None
    assert from_wall_s(found) == datetime.fromisoformat(expected)


def test_never_matching_fields_give_none() -> None:
    """A field set with no date (30 February) gives None once the horizon is searched."""
    assert _matcher("0 0 30 2 *").next_at_or_after(WALL_2000) is None


def test_no_wall_time_past_local_year_9000() -> None:
    """Wall times stop with local year 9000 (cron.py keeps only instants before 9000 UTC)."""
    assert _matcher("0 0 1 1 *").next_at_or_after(to_wall_s(datetime(9000, 1, 2))) is None
