"""One-off instants: ISO-8601 text in, UTC integer milliseconds out, and back for display."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from tickwheel.clock import datetime_to_ms
from tickwheel.clock import format_seconds as format_utc
from tickwheel.schedule.errors import ScheduleError
from tickwheel.schedule.zones import MAX_YEAR, MIN_YEAR

# `format_utc` (the CLI's output form, DESIGN §7) is tickwheel.clock.format_seconds, kept under
# the schedule's name for its callers.
__all__ = ["format_utc", "parse_at", "parse_instant"]

_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")


def parse_instant(text: object, field: str = "at") -> int:
    """UTC milliseconds of an ISO-8601 instant with `Z` or a UTC offset; ScheduleError(field).

    A timestamp without an offset is rejected rather than guessed: it names a wall time, and
    which instant that is depends on a zone the text does not give.
    """
    example = "for example 2026-12-01T09:00:00Z or 2026-12-01T10:00:00+01:00"
    if not isinstance(text, str):
        raise ScheduleError(field, f"{field} must be an ISO-8601 instant string, {example}.")
    if not _PRINTABLE_ASCII.fullmatch(text):
        # The C parser behind fromisoformat stops at a NUL and ignores what follows it.
        raise ScheduleError(
            field,
            f"{field} {text[:64]!r} is not an ISO-8601 instant: it holds a character other "
            f"than printable ASCII; use {example}.",
        )
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ScheduleError(
            field, f"{field} {text!r} is not an ISO-8601 instant; use {example}."
        ) from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ScheduleError(
            field,
            f"{field} {text!r} has no Z or UTC offset, so it names no instant; use {example}.",
        )
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 pushed past datetime's range by its offset
        utc = None
    if utc is None or not MIN_YEAR <= utc.year <= MAX_YEAR:
        raise ScheduleError(
            field, f"{field} {text!r} must lie between the years {MIN_YEAR} and {MAX_YEAR} (UTC)."
        )
    return datetime_to_ms(utc)


def parse_at(text: str) -> int:
    """UTC milliseconds of a one-off job's `at`; raises ScheduleError("at") on bad input."""
    return parse_instant(text, "at")
