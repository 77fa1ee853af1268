"""The calendar document (issue 50, D-286): a tenant's named exclusions, one shape over HTTP and
in Kafka registrations.

The shape — types, lengths, no extra fields — is checked here; what needs reading (the zone,
each date, time and cron expression) by `tickwheel.schedule.calendars.parse_calendar`, which the
registry runs on every calendar it stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias

from pydantic import BaseModel, Field

from tickwheel.schedule.calendars import (
    CALENDAR_NAME_PATTERN,
    MAX_CALENDAR_CRONS,
    MAX_CALENDAR_DATES,
    MAX_CALENDAR_RANGES,
    WEEKDAY_NAMES,
)
from tickwheel.wire.job import StrictModel

__all__ = [
    "CALENDAR_NAME_PATTERN",
    "Calendar",
    "CalendarDocument",
    "CalendarPage",
    "DailyRange",
]

if TYPE_CHECKING:
    Weekday: TypeAlias = str
else:
    Weekday = Literal[WEEKDAY_NAMES]


class DailyRange(StrictModel):
    start: str = Field(..., max_length=8, description="local time 'HH:MM' or 'HH:MM:SS'")
    end: str = Field(
        ...,
        max_length=8,
        description="local time, exclusive ('24:00': the day's end); before start: the range "
        "wraps past midnight",
    )


class CalendarDocument(StrictModel):
    """What a tenant writes: the instants its jobs naming this calendar do not run at."""

    timezone: str = Field("UTC", max_length=64, description="IANA zone the rules are read in")
    description: str | None = Field(
        None, max_length=500, exclude_if=lambda v: v is None, description="for people"
    )
    dates: list[str] = Field(
        default_factory=list,
        max_length=MAX_CALENDAR_DATES,
        description="local dates excluded whole, 'YYYY-MM-DD'",
    )
    weekdays: list[Weekday] = Field(
        default_factory=list, max_length=7, description="local weekdays excluded whole"
    )
    daily: list[DailyRange] = Field(
        default_factory=list,
        max_length=MAX_CALENDAR_RANGES,
        description="local time ranges excluded every day, [start, end)",
    )
    cron: list[str] = Field(
        default_factory=list,
        max_length=MAX_CALENDAR_CRONS,
        description="cron expressions (no H): a 6-field one excludes each second it matches, "
        "a 5-field one each minute",
    )


class Calendar(CalendarDocument):
    """A stored calendar, as the registry answers it."""

    name: str = Field(..., pattern=CALENDAR_NAME_PATTERN)
    version: int = Field(..., description="1 when created, +1 on every change")
    updated_at: str = Field(..., description="ISO-8601, UTC")


class CalendarPage(BaseModel):
    items: list[Calendar]
