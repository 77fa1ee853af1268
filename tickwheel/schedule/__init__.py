"""Schedule semantics (DESIGN §6): when a job runs, as pure functions of plain values.

Cron expressions in IANA zones with DST policies and `H` fields (`cron`), one-off instants
(`instants`), the cached evaluator shard leaders use on their hot path (`cache`), a job's
next fire time asked of such a cache (`next_fire`), the misfire and overlap decisions
(`misfire`, `overlap`), and the delay a job's jitter gives each occurrence (`jitter`).
Instants crossing this boundary are UTC integer milliseconds.
"""

from __future__ import annotations

from tickwheel.schedule.cache import CacheStats, ScheduleCache
from tickwheel.schedule.cron import (
    ALIASES,
    CronSchedule,
    DstGap,
    DstOverlap,
    parse_cron,
    parse_dst_gap,
    parse_dst_overlap,
    uses_key,
)
from tickwheel.schedule.errors import ScheduleError
from tickwheel.schedule.hashing import stable_hash
from tickwheel.schedule.instants import format_utc, parse_at, parse_instant
from tickwheel.schedule.jitter import (
    GAP_SAMPLE,
    GAP_SPAN_MS,
    JITTER_MAX_MS,
    jitter_offset,
    shortest_gap,
)
from tickwheel.schedule.misfire import (
    DEFAULT_GRACE_MS,
    DEFAULT_MAX_CATCHUP,
    MAX_CATCHUP_LIMIT,
    MAX_CATCHUP_MIN,
    PLAN_LIMIT,
    REASON_MAX_CATCHUP,
    REASON_MISFIRE,
    MisfirePlan,
    MisfirePolicy,
    SkippedSpan,
    parse_misfire_policy,
    plan_misfire,
    validate_misfire,
)
from tickwheel.schedule.next_fire import (
    SHARED,
    AfterEnd,
    LockedScheduleCache,
    Schedules,
    Timing,
    first_run_at,
    in_window,
    next_fire_after,
)
from tickwheel.schedule.overlap import (
    REASON_OVERLAP,
    OverlapDecision,
    OverlapPolicy,
    decide_overlap,
    parse_overlap_policy,
)
from tickwheel.schedule.zones import load_zone

__all__ = [
    "ALIASES",
    "DEFAULT_GRACE_MS",
    "DEFAULT_MAX_CATCHUP",
    "GAP_SAMPLE",
    "GAP_SPAN_MS",
    "JITTER_MAX_MS",
    "MAX_CATCHUP_LIMIT",
    "MAX_CATCHUP_MIN",
    "PLAN_LIMIT",
    "REASON_MAX_CATCHUP",
    "REASON_MISFIRE",
    "REASON_OVERLAP",
    "SHARED",
    "AfterEnd",
    "CacheStats",
    "CronSchedule",
    "DstGap",
    "DstOverlap",
    "LockedScheduleCache",
    "MisfirePlan",
    "MisfirePolicy",
    "OverlapDecision",
    "OverlapPolicy",
    "ScheduleCache",
    "ScheduleError",
    "Schedules",
    "SkippedSpan",
    "Timing",
    "decide_overlap",
    "first_run_at",
    "format_utc",
    "in_window",
    "jitter_offset",
    "load_zone",
    "next_fire_after",
    "parse_at",
    "parse_cron",
    "parse_dst_gap",
    "parse_dst_overlap",
    "parse_instant",
    "parse_misfire_policy",
    "parse_overlap_policy",
    "plan_misfire",
    "shortest_gap",
    "stable_hash",
    "uses_key",
    "validate_misfire",
]
