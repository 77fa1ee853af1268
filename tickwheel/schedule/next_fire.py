"""When a job fires next: its `Timing` (cron in a zone, or a one-off instant) asked of a cache.

The registry computes a job's first `next_run_at` when it is written; a shard leader computes
the following ones after each fire. Both ask the same two functions, each with a cache of its
own: a leader owns a `ScheduleCache` on its loop, while the registry validates on the intake's
thread and on the HTTP loop at once, so it shares `SHARED`, a `LockedScheduleCache`.
Instants are UTC integer milliseconds.

A cron job may have an active window (`start_at`, `end_at`, both inclusive): no occurrence
before its start, none after its end. `in_window` applies it to any next-after function, so the
registry, a leader's claim plan, a backfill and a preview all see the same occurrences.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from tickwheel.schedule.cache import CacheStats, ScheduleCache
from tickwheel.schedule.cron import CronSchedule, DstGap, DstOverlap


class AfterEnd(StrEnum):
    """A windowed schedule's `after_end`: what becomes of the job after its last occurrence
    (absent: complete)."""

    COMPLETE = "complete"
    DELETE = "delete"


class Schedules(Protocol):
    """What the functions below need of a cache: `ScheduleCache` or `LockedScheduleCache`."""

    def next_after(
        self, expr: str, tz: str, key: str | None, dst_gap: str, dst_overlap: str, after_ms: int
    ) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Timing:
    """When one job fires: exactly one of `schedule` (cron, read in `timezone` with the DST
    policies; `key` is what its `H` fields hash) and `at_ms` (a one-off instant)."""

    key: str  # the job identity `<tenant>/<job_id>` (tickwheel.domain.job_key)
    schedule: str | None = None
    at_ms: int | None = None
    timezone: str = "UTC"
    dst_gap: str = DstGap.SHIFT.value
    dst_overlap: str = DstOverlap.FIRST.value
    start_ms: int | None = None  # the active window (cron only): no occurrence before it
    end_ms: int | None = None  # … and none after it (both inclusive)


def in_window(
    next_after: Callable[[int], int | None],
    after_ms: int,
    start_ms: int | None,
    end_ms: int | None,
) -> int | None:
    """`next_after(after_ms)` within the window [start_ms, end_ms] (None: unbounded)."""
    if start_ms is not None and after_ms < start_ms - 1:
        after_ms = start_ms - 1
    found = next_after(after_ms)
    if found is not None and end_ms is not None and found > end_ms:
        return None
    return found


def next_fire_after(schedules: Schedules, timing: Timing, after_ms: int) -> int | None:
    """First scheduled instant strictly after `after_ms` (a one-off: its instant, once)."""
    if timing.at_ms is not None:
        return timing.at_ms if timing.at_ms > after_ms else None
    schedule = timing.schedule
    assert schedule is not None, "a Timing has a schedule or an instant"

    def after(t: int) -> int | None:
        return schedules.next_after(
            schedule, timing.timezone, timing.key, timing.dst_gap, timing.dst_overlap, t
        )

    if timing.start_ms is None and timing.end_ms is None:
        return after(after_ms)
    return in_window(after, after_ms, timing.start_ms, timing.end_ms)


def first_run_at(schedules: Schedules, timing: Timing, now_ms: int) -> int | None:
    """`next_run_at` of a job created or changed at `now_ms`.

    A one-off instant in the past is kept as it is: the shard leader finds it overdue and
    applies the job's misfire policy, so a late registration is never silently dropped.
    """
    if timing.at_ms is not None:
        return timing.at_ms
    return next_fire_after(schedules, timing, now_ms)


class LockedScheduleCache:
    """A `ScheduleCache` for callers on several threads: every use holds one lock.

    Uncontended, the lock costs well under a microsecond; the cache's parse-once and
    compute-once savings are worth sharing between the registry's threads.
    """

    def __init__(self, cache: ScheduleCache | None = None) -> None:
        self._cache = cache or ScheduleCache()
        self._lock = threading.Lock()

    def next_after(
        self, expr: str, tz: str, key: str | None, dst_gap: str, dst_overlap: str, after_ms: int
    ) -> int | None:
        """`ScheduleCache.next_after`, under the lock."""
        with self._lock:
            return self._cache.next_after(expr, tz, key, dst_gap, dst_overlap, after_ms)

    def schedule(
        self,
        expr: str,
        tz: str = "UTC",
        key: str | None = None,
        dst_gap: str = DstGap.SHIFT.value,
        dst_overlap: str = DstOverlap.FIRST.value,
    ) -> CronSchedule:
        """`ScheduleCache.schedule`, under the lock (raises ScheduleError like `parse_cron`)."""
        with self._lock:
            return self._cache.schedule(expr, tz, key, dst_gap, dst_overlap)

    def stats(self) -> CacheStats:
        with self._lock:
            return self._cache.stats()


# The process's shared cache, for the registry: registrations often share expressions (and,
# via H, resolved schedules), so each is parsed once per process.
SHARED = LockedScheduleCache()
