"""Time at module boundaries: integer UTC milliseconds, and their aware-datetime twins.

Times cross module boundaries either as `int` milliseconds since the Unix epoch (UTC) or as
aware UTC `datetime`s; these functions are the one place that converts between them, exactly
(integer arithmetic on timedeltas, never floats).
"""

from __future__ import annotations

import datetime as dt
import time

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
ONE_MS = dt.timedelta(milliseconds=1)
ISO_SECONDS = "%Y-%m-%dT%H:%M:%SZ"  # the CLI's instant form


def now_ms() -> int:
    """Wall-clock now, unix milliseconds (UTC). Processes own clocks; libraries take `now`."""
    return time.time_ns() // 1_000_000


def ms_to_datetime(ms: int) -> dt.datetime:
    """The aware UTC datetime of unix milliseconds, exactly."""
    return EPOCH + ms * ONE_MS


def datetime_to_ms(value: dt.datetime) -> int:
    """Unix milliseconds of an aware datetime (sub-millisecond parts are dropped, floored)."""
    if value.tzinfo is None:
        raise ValueError("a naive datetime has no instant; give it a zone")
    return (value - EPOCH) // ONE_MS


def format_seconds(ms: int) -> str:
    """`YYYY-MM-DDTHH:MM:SSZ`, the form `tickwheel cron next` prints (seconds, floored)."""
    return ms_to_datetime(ms).strftime(ISO_SECONDS)


def format_ms(ms: int) -> str:
    """ISO-8601 with milliseconds and `Z`: `2026-12-01T09:00:00.250Z` (the HTTP API's form)."""
    return format_datetime(ms_to_datetime(ms))


def format_datetime(moment: dt.datetime) -> str:
    """An aware datetime as `format_ms` writes it: UTC, milliseconds (floored), `Z`."""
    # isoformat rather than strftime: %Y does not pad years before 1000 on every platform.
    text = moment.astimezone(dt.UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")
