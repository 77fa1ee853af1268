"""Exclusion calendars (issue 50, D-286): a tenant's named set of instants its jobs do not run at.

A calendar is read in its own IANA zone and excludes an instant when any of its rules holds:

    dates     the local dates excluded whole ("2026-12-25")
    weekdays  the local weekdays excluded whole ("sat", "sun")
    daily     local time ranges excluded every day, [start, end) ("12:00"-"13:00"; an end before
              the start wraps past midnight: "22:00"-"06:00"; "24:00" is the day's end)
    cron      cron expressions: a 6-field one excludes each second it matches, a 5-field one each
              minute it matches (wall-clock fields in the calendar's zone; no `H`)

A job names zero or more calendars; an occurrence any of them excludes is recorded `skipped`
with the reason naming the calendar and the rule (`Calendar.exclusion`). The rules are pure
functions of an instant, so a leader, the preview and `tickwheel cron next` decide alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from tickwheel.schedule.cron import parse_cron, split_fields, uses_key
from tickwheel.schedule.errors import ScheduleError
from tickwheel.schedule.wallclock import WallClockMatcher, to_wall_s
from tickwheel.schedule.zones import SECONDS_PER_DAY, load_zone

__all__ = [
    "CALENDAR_NAME_PATTERN",
    "MAX_CALENDAR_CRONS",
    "MAX_CALENDAR_DATES",
    "MAX_CALENDAR_RANGES",
    "MAX_JOB_CALENDARS",
    "WEEKDAY_NAMES",
    "Calendar",
    "excluded_by",
    "parse_calendar",
]

CALENDAR_NAME_PATTERN = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$"  # not starting with a dot
MAX_CALENDAR_DATES = 1000  # about forty years of a country's public holidays
MAX_CALENDAR_RANGES = 24
MAX_CALENDAR_CRONS = 16
MAX_JOB_CALENDARS = 8
WEEKDAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # date.weekday() order
_TIME_OF_DAY = re.compile(r"^(\d{2}):(\d{2})(?::(\d{2}))?$")


@dataclass(frozen=True, slots=True)
class DailyRange:
    """Seconds of the local day, [start_s, end_s); start_s > end_s wraps past midnight."""

    start_s: int
    end_s: int
    text: str  # as the document wrote it, for reasons: "12:00-13:00"

    def holds(self, second_of_day: int) -> bool:
        if self.start_s < self.end_s:
            return self.start_s <= second_of_day < self.end_s
        return second_of_day >= self.start_s or second_of_day < self.end_s


@dataclass(frozen=True, slots=True)
class CronRule:
    expression: str
    matcher: WallClockMatcher
    by_minute: bool  # a 5-field expression excludes each minute it matches, whole

    def holds(self, wall_s: int) -> bool:
        at = wall_s - wall_s % 60 if self.by_minute else wall_s
        return self.matcher.next_at_or_after(at) == at


@dataclass(frozen=True, slots=True)
class Calendar:
    """A parsed calendar: `exclusion(ms)` says which rule, if any, excludes an instant."""

    name: str
    timezone: str
    zone: ZoneInfo
    dates: frozenset[date]
    weekdays: frozenset[int]
    daily: tuple[DailyRange, ...]
    cron: tuple[CronRule, ...]

    def exclusion(self, ms: int) -> str | None:
        """The reason an instant (UTC ms) is excluded — "calendar NAME: RULE" — or None."""
        rule = self.rule_at(ms)
        return None if rule is None else f"calendar {self.name}: {rule}"

    def rule_at(self, ms: int) -> str | None:
        """The first rule (in the order dates, weekdays, daily, cron) excluding `ms`."""
        local = datetime.fromtimestamp(ms // 1000, tz=self.zone).replace(tzinfo=None)
        day = local.date()
        if day in self.dates:
            return f"date {day.isoformat()} ({self.timezone})"
        if day.weekday() in self.weekdays:
            return f"weekday {WEEKDAY_NAMES[day.weekday()]} ({self.timezone})"
        if self.daily:
            second = local.hour * 3600 + local.minute * 60 + local.second
            for window in self.daily:
                if window.holds(second):
                    return f"daily {window.text} ({self.timezone})"
        if self.cron:
            wall_s = to_wall_s(local)
            for rule in self.cron:
                if rule.holds(wall_s):
                    return f"cron {rule.expression!r} ({self.timezone})"
        return None


def excluded_by(calendars: Sequence[Calendar], ms: int) -> str | None:
    """Why the first of `calendars` that excludes `ms` does, or None."""
    for calendar in calendars:
        if (why := calendar.exclusion(ms)) is not None:
            return why
    return None


def parse_calendar(name: str, doc: Mapping[str, Any]) -> Calendar:
    """The calendar a document describes; ScheduleError naming the field ("dates.3", …).

    The document's shape (types, lengths) is the wire model's (`tickwheel.wire.calendar`);
    this checks what needs reading: the zone, each date, weekday, time and expression."""
    timezone = doc.get("timezone", "UTC")
    return Calendar(
        name=name,
        timezone=timezone,
        zone=load_zone(timezone),
        dates=frozenset(_dates(doc.get("dates") or ())),
        weekdays=frozenset(_weekdays(doc.get("weekdays") or ())),
        daily=tuple(_ranges(doc.get("daily") or ())),
        cron=tuple(_crons(doc.get("cron") or (), timezone)),
    )


def _dates(values: Sequence[Any]) -> list[date]:
    _bounded(values, MAX_CALENDAR_DATES, "dates")
    found = []
    for i, value in enumerate(values):
        try:
            if not isinstance(value, str) or len(value) != 10:
                raise ValueError
            found.append(date.fromisoformat(value))
        except ValueError:
            raise ScheduleError(
                f"dates.{i}", f"dates.{i} must be a date such as '2026-12-25'; got {value!r}."
            ) from None
    return found


def _weekdays(values: Sequence[Any]) -> list[int]:
    _bounded(values, len(WEEKDAY_NAMES), "weekdays")
    found = []
    for i, value in enumerate(values):
        if value not in WEEKDAY_NAMES:
            raise ScheduleError(
                f"weekdays.{i}",
                f"weekdays.{i} must be one of {', '.join(WEEKDAY_NAMES)}; got {value!r}.",
            )
        found.append(WEEKDAY_NAMES.index(value))
    return found


def _ranges(values: Sequence[Any]) -> list[DailyRange]:
    _bounded(values, MAX_CALENDAR_RANGES, "daily")
    found = []
    for i, value in enumerate(values):
        if not isinstance(value, Mapping):
            raise ScheduleError(
                f"daily.{i}", f"daily.{i} must be an object {{'start': 'HH:MM', 'end': 'HH:MM'}}."
            )
        start = _second_of_day(value.get("start"), f"daily.{i}.start", end=False)
        end = _second_of_day(value.get("end"), f"daily.{i}.end", end=True)
        if start == end:
            raise ScheduleError(
                f"daily.{i}.end",
                f"daily.{i} excludes nothing: its end equals its start; "
                "exclude whole days with 'weekdays' or 'dates'.",
            )
        found.append(DailyRange(start, end, f"{value['start']}-{value['end']}"))
    return found


def _second_of_day(value: Any, field: str, *, end: bool) -> int:
    match = _TIME_OF_DAY.match(value) if isinstance(value, str) else None
    if match is not None:
        hour, minute, second = int(match[1]), int(match[2]), int(match[3] or 0)
        if end and (hour, minute, second) == (24, 0, 0):
            return SECONDS_PER_DAY
        if hour < 24 and minute < 60 and second < 60:
            return hour * 3600 + minute * 60 + second
    latest = "'24:00'" if end else "'23:59:59'"
    raise ScheduleError(
        field, f"{field} must be a local time 'HH:MM' or 'HH:MM:SS' up to {latest}; got {value!r}."
    )


def _crons(values: Sequence[Any], timezone: str) -> list[CronRule]:
    _bounded(values, MAX_CALENDAR_CRONS, "cron")
    found = []
    for i, value in enumerate(values):
        field = f"cron.{i}"
        if not isinstance(value, str):
            raise ScheduleError(field, f"{field} must be a cron expression; got {value!r}.")
        if uses_key(value):
            raise ScheduleError(
                field, f"{field} uses H, which needs a job's key; a calendar has none."
            )
        try:
            schedule = parse_cron(value, tz=timezone)
        except ScheduleError as exc:
            raise ScheduleError(field, f"{field}: {exc.message}") from None
        found.append(CronRule(value, schedule.matcher, len(split_fields(value)) == 5))
    return found


def _bounded(values: Any, limit: int, field: str) -> None:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise ScheduleError(field, f"{field} must be a list.")
    if len(values) > limit:
        raise ScheduleError(
            field, f"{field} holds {len(values)} entries; a calendar holds at most {limit}."
        )
