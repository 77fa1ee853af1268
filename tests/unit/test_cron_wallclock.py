"""The fast field matcher reads every expression exactly as croniter does, on naive wall time."""

from __future__ import annotations

from datetime import datetime

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.schedule.wallclock import (
    CroniterMatcher,
    FieldMatcher,
    build_matcher,
    from_wall_s,
    to_wall_s,
)

pytestmark = pytest.mark.unit

WALL_2000 = to_wall_s(datetime(2000, 1, 1))  # wall seconds
WALL_2040 = to_wall_s(datetime(2040, 1, 1))  # wall seconds
MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


def _numeric_field(low: int, high: int) -> st.SearchStrategy[str]:
    value = st.integers(low, high).map(str)
    span = st.tuples(st.integers(low, high), st.integers(low, high)).map(lambda p: f"{p[0]}-{p[1]}")
    step = st.integers(1, high - low + 1).map(lambda n: f"*/{n}")
    span_step = st.tuples(st.integers(low, high), st.integers(low, high), st.integers(1, 9)).map(
        lambda t: f"{min(t[0], t[1])}-{max(t[0], t[1])}/{t[2]}"
    )
    start_step = st.tuples(st.integers(low, high), st.integers(1, 9)).map(
        lambda t: f"{t[0]}/{t[1]}"
    )
    item = st.one_of(value, span, step, span_step, start_step)
    listing = st.lists(item, min_size=2, max_size=3).map(",".join)
    return st.one_of(st.just("*"), item, listing)


def _named_field(names: list[str]) -> st.SearchStrategy[str]:
    name = st.sampled_from(names)
    span = st.tuples(name, name).map(lambda p: f"{p[0]}-{p[1]}")
    return st.one_of(
        name.map(str.upper), span, st.lists(name, min_size=2, max_size=3).map(",".join)
    )


SECOND = _numeric_field(0, 59)
MINUTE = _numeric_field(0, 59)
HOUR = _numeric_field(0, 23)
DAY_OF_MONTH = st.one_of(
    _numeric_field(1, 31), st.sampled_from(["L", "?", "1,L", "15,L", "29-31", "31"])
)
MONTH = st.one_of(_numeric_field(1, 12), _named_field(MONTHS))
DAY_OF_WEEK = st.one_of(_numeric_field(0, 7), _named_field(WEEKDAYS), st.just("?"))


@st.composite
def expressions(draw: st.DrawFn) -> str:
    fields = [draw(MINUTE), draw(HOUR), draw(DAY_OF_MONTH), draw(MONTH), draw(DAY_OF_WEEK)]
    if draw(st.booleans()):
        fields.insert(0, draw(SECOND))
    return " ".join(fields)


def _parsed(expr: str) -> croniter:
    return croniter(expr, start_time=0.0, second_at_beginning=True)


@settings(max_examples=300, deadline=None)
@given(expr=expressions(), start=st.integers(WALL_2000, WALL_2040))
def test_field_matcher_agrees_with_croniter(expr: str, start: int) -> None:
    """For any standard expression and start, the next match equals croniter's naive answer."""
    parsed = _parsed(expr)
    fast = FieldMatcher(parsed.expanded)
    assert fast.next_at_or_after(start) == CroniterMatcher(parsed).next_at_or_after(start)


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
    ],
)
def test_field_matcher_examples(expr: str, start: str, expected: str) -> None:
    """L, short months, leap days, Vixie OR of the day fields and a seconds field match as cron."""
    matcher = FieldMatcher(_parsed(expr).expanded)
    found = matcher.next_at_or_after(to_wall_s(datetime.fromisoformat(start)))
    assert found is not None
    assert from_wall_s(found) == datetime.fromisoformat(expected)


def test_never_matching_fields_give_none() -> None:
    """A field set with no date (30 February) gives None once the horizon is searched."""
    assert FieldMatcher(_parsed("0 0 30 2 *").expanded).next_at_or_after(WALL_2000) is None


@pytest.mark.parametrize("expr", ["0 0 * * 5#3", "0 0 15W * *", "0 0 * * L5"])
def test_croniter_extras_use_croniter_search(expr: str) -> None:
    """Expressions with '#', 'W' or a day-of-week 'L' are searched by croniter itself."""
    matcher = build_matcher(_parsed(expr))
    assert isinstance(matcher, CroniterMatcher)
    expected = croniter(expr, datetime(2024, 1, 1)).get_next(datetime)
    assert matcher.next_at_or_after(to_wall_s(datetime(2024, 1, 1))) == to_wall_s(expected)


def test_standard_expressions_use_the_field_matcher() -> None:
    """An expression of standard fields gets the fast matcher."""
    assert isinstance(build_matcher(_parsed("*/5 9-17 * JAN-MAR MON-FRI")), FieldMatcher)
