"""Matching cron fields against local wall-clock time, with no zone and no DST.

A *wall time* here is an integer count of seconds since 1970-01-01T00:00:00 on the zone's own
clock: the local date and time read as if they were UTC. Whether such a time exists in the zone,
or exists twice, is decided in `cron.py`; this module only answers "which is the first wall time
at or after w that the fields match".

croniter parses and expands the expression (names, ranges, steps, `L`, `?`, the Vixie OR of the
two day fields); `FieldMatcher` then walks the expanded value sets with bisection, roughly ten
times faster than croniter's own search because it builds no `relativedelta` per step. The
forms croniter supports beyond DESIGN §6 — `#` (nth weekday), `W` (nearest weekday) and `L` in
the day-of-week field — keep croniter's search (`CroniterMatcher`), fed naive datetimes so its
own DST handling never runs. The test suite checks the two against each other.
"""

from __future__ import annotations

from bisect import bisect_left
from calendar import monthrange
from datetime import date, datetime, timedelta
from typing import Protocol

from croniter import CroniterBadDateError, croniter

from tickwheel.schedule.zones import EPOCH_ORDINAL, MAX_YEAR, SECONDS_PER_DAY

HORIZON_YEARS = 50  # years searched past the start before a field set counts as never matching
NAIVE_EPOCH = datetime(1970, 1, 1)  # wall time 0
_DAY_CACHE_ENTRIES = 256  # (year, month) day sets kept per matcher
_SECONDS_INDEX = 5  # croniter keeps a seconds field last, after the five Vixie fields


class WallClockMatcher(Protocol):
    """Finds the next wall time a cron expression matches."""

    def next_at_or_after(self, wall_s: int) -> int | None:
        """The first matching wall time >= `wall_s`, or None within the search horizon."""
        ...


def to_wall_s(moment: datetime) -> int:
    """Wall seconds of a naive datetime (sub-second parts are dropped)."""
    day = moment.toordinal() - EPOCH_ORDINAL
    return day * SECONDS_PER_DAY + moment.hour * 3600 + moment.minute * 60 + moment.second


def from_wall_s(wall_s: int) -> datetime:
    """The naive datetime of a wall time."""
    return NAIVE_EPOCH + timedelta(seconds=wall_s)


def build_matcher(parsed: croniter) -> WallClockMatcher:
    """The fastest matcher that reproduces croniter's reading of `parsed`."""
    if parsed.nth_weekday_of_month or parsed.nearest_weekday:
        return CroniterMatcher(parsed)
    try:
        return FieldMatcher(parsed.expanded)
    except _UnexpectedField:
        return CroniterMatcher(parsed)


class _UnexpectedField(Exception):
    """croniter expanded a field into something FieldMatcher does not model."""


def _values(field: list[str] | list[int | str], low: int, high: int) -> tuple[int, ...]:
    if field == ["*"]:
        return tuple(range(low, high + 1))
    if not all(isinstance(v, int) for v in field):
        raise _UnexpectedField(field)
    return tuple(sorted({int(v) for v in field}))


class FieldMatcher:
    """A cron expression as sorted value sets, searched field by field (an odometer)."""

    __slots__ = (
        "_days",
        "_dom",
        "_dom_any",
        "_dom_last",
        "_dow",
        "_dow_any",
        "_hours",
        "_minutes",
        "_months",
        "_seconds",
    )

    def __init__(self, expanded: list[list[str]] | list[list[int | str]]) -> None:
        # croniter's order: minute, hour, day-of-month, month, day-of-week[, second].
        minute, hour, dom, month, dow = expanded[:_SECONDS_INDEX]
        self._seconds = (
            _values(expanded[_SECONDS_INDEX], 0, 59) if len(expanded) > _SECONDS_INDEX else (0,)
        )
        self._minutes = _values(minute, 0, 59)
        self._hours = _values(hour, 0, 23)
        self._months = _values(month, 1, 12)
        self._dom_any = dom == ["*"]
        self._dom_last = "l" in dom
        self._dom = frozenset(
            _values([v for v in dom if v != "l"], 1, 31) if not self._dom_any else ()
        )
        self._dow_any = dow == ["*"]
        self._dow = frozenset(_values(dow, 0, 6) if not self._dow_any else ())
        self._days: dict[int, tuple[int, ...]] = {}

    def next_at_or_after(self, wall_s: int) -> int | None:
        """The first matching wall time >= `wall_s`, or None within HORIZON_YEARS."""
        day_number, second_of_day = divmod(wall_s, SECONDS_PER_DAY)
        start = date.fromordinal(EPOCH_ORDINAL + day_number)
        year, month, day = start.year, start.month, start.day
        hour, rest = divmod(second_of_day, 3600)
        minute, second = divmod(rest, 60)
        last_year = min(year + HORIZON_YEARS, MAX_YEAR)
        months, hours, minutes, seconds = self._months, self._hours, self._minutes, self._seconds
        # Each step either accepts the current value of a field or moves it to the next allowed
        # value, resetting every smaller field to its lowest; overflowing a field carries into
        # the next larger one and restarts the walk from the month.
        while True:
            if month > 12:
                year, month = year + 1, 1
            if year > last_year:
                return None
            i = bisect_left(months, month)
            if i == len(months):
                year, month, day, hour, minute, second = year + 1, months[0], 1, 0, 0, 0
                continue
            if months[i] != month:
                month, day, hour, minute, second = months[i], 1, 0, 0, 0
            days = self._matching_days(year, month)
            i = bisect_left(days, day)
            if i == len(days):
                month, day, hour, minute, second = month + 1, 1, 0, 0, 0
                continue
            if days[i] != day:
                day, hour, minute, second = days[i], 0, 0, 0
            i = bisect_left(hours, hour)
            if i == len(hours):
                day, hour, minute, second = day + 1, 0, 0, 0
                continue
            if hours[i] != hour:
                hour, minute, second = hours[i], 0, 0
            i = bisect_left(minutes, minute)
            if i == len(minutes):
                hour, minute, second = hour + 1, 0, 0
                continue
            if minutes[i] != minute:
                minute, second = minutes[i], 0
            i = bisect_left(seconds, second)
            if i == len(seconds):
                minute, second = minute + 1, 0
                continue
            second = seconds[i]
            day_number = date(year, month, day).toordinal() - EPOCH_ORDINAL
            return day_number * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second

    def _matching_days(self, year: int, month: int) -> tuple[int, ...]:
        cache_key = year * 12 + month
        days = self._days.get(cache_key)
        if days is not None:
            return days
        length = monthrange(year, month)[1]
        if self._dom_any and self._dow_any:
            days = tuple(range(1, length + 1))
        else:
            # cron numbers weekdays from Sunday = 0; date.weekday() from Monday = 0.
            first_weekday = (date(year, month, 1).weekday() + 1) % 7
            found = []
            for d in range(1, length + 1):
                dom_ok = d in self._dom or (self._dom_last and d == length)
                dow_ok = (first_weekday + d - 1) % 7 in self._dow
                if self._dom_any:
                    ok = dow_ok
                elif self._dow_any:
                    ok = dom_ok
                else:
                    ok = dom_ok or dow_ok  # Vixie: both day fields restricted, either may match
                if ok:
                    found.append(d)
            days = tuple(found)
        if len(self._days) >= _DAY_CACHE_ENTRIES:
            self._days.clear()
        self._days[cache_key] = days
        return days


class CroniterMatcher:
    """croniter's own search, on naive wall time (so none of its DST handling applies)."""

    __slots__ = ("_parsed",)

    def __init__(self, parsed: croniter) -> None:
        self._parsed = parsed

    def next_at_or_after(self, wall_s: int) -> int | None:
        """The first matching wall time >= `wall_s`, or None within croniter's 50 years."""
        # croniter searches strictly after its start and drops the start's seconds (5 fields)
        # or sub-seconds (6 fields), so starting one second early finds a match at wall_s too.
        start = from_wall_s(wall_s - 1)
        try:
            found = self._parsed.get_next(datetime, start_time=start)
        except CroniterBadDateError:
            return None
        if found.year > MAX_YEAR:
            return None
        return to_wall_s(found)
