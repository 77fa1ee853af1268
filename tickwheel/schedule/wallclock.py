"""Matching cron fields against local wall-clock time, with no zone and no DST.

A *wall time* here is an integer count of seconds since 1970-01-01T00:00:00 on the zone's own
clock: the local date and time read as if they were UTC. Whether such a time exists in the zone,
or exists twice, is decided in `cron.py`; this module only answers "which is the first wall time
at or after w that the fields match".

`fields.py` reads the expression into value sets and a day rule; `FieldMatcher` walks them with
bisection, field by field, and asks the day rule once per (year, month) for the month's firing
days (kept in a small cache), so `L`, `W`, `#` and the day-field rule cost nothing per step.
"""

from __future__ import annotations

from bisect import bisect_left
from datetime import date, datetime, timedelta
from typing import Protocol

from tickwheel.schedule.fields import CronFields
from tickwheel.schedule.zones import EPOCH_ORDINAL, MAX_YEAR, SECONDS_PER_DAY

HORIZON_YEARS = 50  # years searched past the start before a field set counts as never matching
# Local years a wall time may fall in: a zone east of UTC reaches the next year's first day
# before the last supported UTC instant (9000-01-01T00:00:00Z, exclusive). cron.py keeps only
# instants inside the supported range.
MAX_WALL_YEAR = MAX_YEAR + 1
NAIVE_EPOCH = datetime(1970, 1, 1)  # wall time 0
_DAY_CACHE_ENTRIES = 256  # (year, month) day sets kept per matcher


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


class FieldMatcher:
    """A cron expression as sorted value sets, searched field by field (an odometer)."""

    __slots__ = ("_day_rule", "_days", "_hours", "_minutes", "_months", "_seconds")

    def __init__(self, fields: CronFields) -> None:
        self._seconds = fields.seconds
        self._minutes = fields.minutes
        self._hours = fields.hours
        self._months = fields.months
        self._day_rule = fields.days
        self._days: dict[int, tuple[int, ...]] = {}

    def next_at_or_after(self, wall_s: int) -> int | None:
        """The first matching wall time >= `wall_s`, or None within HORIZON_YEARS."""
        day_number, second_of_day = divmod(wall_s, SECONDS_PER_DAY)
        start = date.fromordinal(EPOCH_ORDINAL + day_number)
        year, month, day = start.year, start.month, start.day
        hour, rest = divmod(second_of_day, 3600)
        minute, second = divmod(rest, 60)
        last_year = min(year + HORIZON_YEARS, MAX_WALL_YEAR)
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
        days = self._day_rule.days_of(year, month)
        if len(self._days) >= _DAY_CACHE_ENTRIES:
            self._days.clear()
        self._days[cache_key] = days
        return days
