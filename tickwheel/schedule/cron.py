"""Cron schedules in IANA zones: parsing, `H` resolution and the DST rules of DESIGN §6.

An expression has 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first
(the Quartz/Spring/Temporal order), or is one of the aliases `@yearly` `@annually` `@monthly`
`@weekly` `@daily` `@midnight` `@hourly` (their Vixie meaning, not hashed). It is read in local
wall time of its zone and yields UTC instants (integer milliseconds).

Fields read as crontab(5) and Vixie cron / cronie read them (`fields.py` has the full grammar):
a range of one value is that value (`MON-MON` is Mondays, `2-2` is 02:00), and the two day
fields follow **the day-field rule**, decided from each field's own text: if either day field
begins with `*` (or is `?`), a day must match both; otherwise, when both are restricted, a day
matching either fires. So `0 9 */2 * 1-5` fires at 09:00 on odd-numbered days that are weekdays
(`*/2` begins with `*`: AND), and `0 0 1,*/15 * 0-6` fires every day (neither begins with `*`:
OR, and `0-6` is every day). The `#`, `L` and `W` forms are items of their field under the same
rule: `0 0 1 * MON#1` fires on the 1st and on first Mondays, `0 0 1 * 5L` on the 1st and on last
Fridays.

Wall times and instants are not one-to-one around DST changes, so every matching wall time is
mapped to instants by these rules:

* interval-style schedules — the hour field written `*`, `*/n` or `H/n` — follow elapsed time:
  a wall time that happens twice fires twice, a wall time that does not exist does not fire;
* fixed-hour schedules (any other hour field) follow the job's policies:
  - `dst.overlap` for a wall time that happens twice: `first` (default) fires at the earlier
    instant, `last` at the later, `both` at each;
  - `dst.gap` for a wall time that does not exist: `shift` (default) fires at the first instant
    after the gap — the transition itself, e.g. 03:00 CEST for 02:30 on the spring-forward night
    in Europe/Berlin — and `skip` does not fire that day.
  Several wall times shifted out of one gap, and a real wall time at the end of the gap, land on
  the same instant; they are one run, since a run is identified by job and instant.

Evaluation walks the zone's offset segments (`zones.py`): within a segment wall time and instant
differ by a constant, so the next fire in a segment is the next matching wall time in the part of
the segment's wall-time range the policies allow, found by `wallclock.py` without DST. When the
next matching wall time is years ahead (`0 0 * 2 MON#5`), the segments in between cannot fire,
so the walk jumps to the one just before it instead of visiting each. The supported range ends
on a UTC instant, 9000-01-01T00:00:00Z: wall times run into local year 9000, and only instants
are cut.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from itertools import islice

from tickwheel import broken
from tickwheel.schedule.errors import ScheduleError, parse_choice
from tickwheel.schedule.fields import FIELDS_5, FIELDS_6, FieldError, parse_fields
from tickwheel.schedule.hashing import (
    RANDOM_TOKEN,
    expand_hash_token,
    is_hash_token,
)
from tickwheel.schedule.instants import format_utc
from tickwheel.schedule.wallclock import HORIZON_YEARS, FieldMatcher, WallClockMatcher
from tickwheel.schedule.zones import (
    MAX_INSTANT_S,
    MAX_YEAR,
    MIN_INSTANT_S,
    ZoneTimeline,
    timeline,
    year_start_s,
)

MAX_EXPRESSION_CHARS = 256  # characters; longer input is rejected before it is read
MIN_AFTER_MS = MIN_INSTANT_S * 1000  # milliseconds, 1900-01-01T00:00:00Z
MAX_AFTER_MS = MAX_INSTANT_S * 1000  # milliseconds, 9000-01-01T00:00:00Z (exclusive)
# Wall time a new expression must match after (within the horizon) to count as satisfiable.
_SATISFIABLE_FROM_WALL_S = year_start_s(2000)  # seconds
# Seconds kept between a skipped stretch of time and both the search start and the next
# match's wall time: more than any UTC offset (tzdata's extremes are under 16 hours).
_JUMP_MARGIN_S = 2 * 86_400
_MATCHER_CACHE_ENTRIES = 4096  # compiled expressions shared across zones, keys and policies

ALIASES: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_FIELD_SEPARATOR = re.compile(r"[ \t]+")
_INTERVAL_HOUR = re.compile(r"^(?:\*|\*/\d+|[hH]/\d+)$")


class DstGap(StrEnum):
    """What a fixed-hour schedule does with a wall time the zone skips."""

    SHIFT = "shift"
    SKIP = "skip"


class DstOverlap(StrEnum):
    """What a fixed-hour schedule does with a wall time the zone repeats."""

    FIRST = "first"
    LAST = "last"
    BOTH = "both"


_FORM = (
    "5 fields (minute hour day-of-month month day-of-week), 6 with seconds first, "
    "or an alias such as @daily"
)


def parse_dst_gap(value: object) -> DstGap:
    """The `dst.gap` policy named `value`, or ScheduleError("dst.gap")."""
    return parse_choice(DstGap, value, "dst.gap")


def parse_dst_overlap(value: object) -> DstOverlap:
    """The `dst.overlap` policy named `value`, or ScheduleError("dst.overlap")."""
    return parse_choice(DstOverlap, value, "dst.overlap")


def split_fields(expr: object) -> list[str]:
    """The fields of a cron expression (aliases expanded), or ScheduleError("schedule")."""
    if not isinstance(expr, str):
        raise ScheduleError("schedule", f"schedule must be a string of {_FORM}.")
    if len(expr) > MAX_EXPRESSION_CHARS:
        raise ScheduleError(
            "schedule", f"schedule is longer than {MAX_EXPRESSION_CHARS} characters."
        )
    text = expr.strip(" \t")
    if text.startswith("@"):
        alias = ALIASES.get(text.lower())
        if alias is None:
            raise ScheduleError(
                "schedule",
                f"schedule alias {text!r} is unknown; use one of {', '.join(ALIASES)}.",
            )
        text = alias
    fields = _FIELD_SEPARATOR.split(text) if text else []
    if len(fields) not in (5, 6):
        raise ScheduleError(
            "schedule", f"schedule {expr!r} has {len(fields)} fields; expected {_FORM}."
        )
    return fields


def uses_key(expr: str) -> bool:
    """Whether the expression's meaning depends on the job key (it has an `H` item)."""
    try:
        fields = split_fields(expr)
    except ScheduleError:
        return False
    return any(is_hash_token(item) for field in fields for item in field.split(","))


@dataclass(frozen=True, slots=True)
class HashedItem:
    """One `H` item of an expression and the values the job key resolves it to."""

    field: str  # the field's name, e.g. "minute"
    item: str  # the item as written, e.g. "H(0-5)" or "H/15"
    values: tuple[int, ...]


def _resolve(fields: list[str], key: str | None) -> tuple[list[str], list[HashedItem]]:
    specs = FIELDS_6 if len(fields) == 6 else FIELDS_5
    resolved: list[str] = []
    hashed: list[HashedItem] = []
    for field, spec in zip(fields, specs, strict=True):
        items = field.split(",")
        out = []
        for index, item in enumerate(items):
            if RANDOM_TOKEN.match(item):
                raise ScheduleError(
                    "schedule",
                    f"schedule: the {spec.name} item {item!r} asks for a random value, which "
                    "would differ per evaluation; use H for a stable per-job spread.",
                )
            if not is_hash_token(item):
                out.append(item)
                continue
            if not key:
                raise ScheduleError(
                    "schedule",
                    f"schedule: the {spec.name} item {item!r} uses H, which needs the job "
                    "key (tenant/job_id) to hash.",
                )
            values = expand_hash_token(
                item,
                key=key,
                salt=f"{spec.name}#{index}",
                field_name=spec.name,
                field_low=spec.low,
                field_high=spec.high,
                hash_low=spec.hash_low,
                hash_high=spec.hash_high,
            )
            hashed.append(HashedItem(spec.name, item, tuple(values)))
            out.append(",".join(str(v) for v in values))
        resolved.append(",".join(out))
    return resolved, hashed


def resolve_fields(fields: list[str], key: str | None) -> list[str]:
    """The fields with every `H` item replaced by the concrete values it stands for."""
    return _resolve(fields, key)[0]


def hashed_items(expr: str, key: str | None) -> list[HashedItem]:
    """Each `H` item of `expr` with the values `key` resolves it to, in field order."""
    return _resolve(split_fields(expr), key)[1]


def is_interval_hour(hour_field: str) -> bool:
    """Whether an hour field as written makes a schedule interval-style (`*`, `*/n`, `H/n`)."""
    return _INTERVAL_HOUR.match(hour_field) is not None


@lru_cache(maxsize=_MATCHER_CACHE_ENTRIES)
def _compile(resolved: tuple[str, ...]) -> WallClockMatcher:
    return FieldMatcher(parse_fields(list(resolved)))


def clear_compiled() -> None:
    """Forget every compiled expression (for measuring cold parses; never needed otherwise)."""
    _compile.cache_clear()


def _compile_or_explain(expr: str, fields: list[str], resolved: list[str]) -> WallClockMatcher:
    try:
        return _compile(tuple(resolved))
    except FieldError as exc:
        specs = FIELDS_6 if len(fields) == 6 else FIELDS_5
        spec, written = specs[exc.index], fields[exc.index]
        if exc.reason is None:
            message = f"the {spec.name} field {written!r} is not valid; allowed: {spec.allowed}."
        else:
            message = f"the {spec.name} field {written!r} is not supported: {exc.reason}."
        raise ScheduleError("schedule", f"schedule {expr!r}: {message}") from None


def parse_cron(
    expr: str,
    *,
    tz: str = "UTC",
    key: str | None = None,
    dst_gap: str = "shift",
    dst_overlap: str = "first",
) -> CronSchedule:
    """Parse and validate a cron schedule; raises ScheduleError naming the bad field.

    `key` is the job identity "tenant/job_id"; it is needed only when the expression uses `H`.
    """
    fields = split_fields(expr)
    zone_timeline = _zone_timeline(tz)
    gap = parse_dst_gap(dst_gap)
    overlap = parse_dst_overlap(dst_overlap)
    if key is not None and not isinstance(key, str):
        raise ScheduleError("key", f"key must be a string 'tenant/job_id'; got {key!r}.")
    resolved = resolve_fields(fields, key)
    matcher = _compile_or_explain(expr, fields, resolved)
    if matcher.next_at_or_after(_SATISFIABLE_FROM_WALL_S) is None:
        raise ScheduleError(
            "schedule",
            f"schedule {expr!r} matches no date (for example day 30 of February).",
        )
    hour_field = fields[2] if len(fields) == 6 else fields[1]
    return CronSchedule(
        expression=expr,
        timezone=tz,
        key=key,
        dst_gap=gap,
        dst_overlap=overlap,
        resolved=" ".join(resolved),
        interval=is_interval_hour(hour_field),
        matcher=matcher,
        zone_timeline=zone_timeline,
    )


def _zone_timeline(tz: object) -> ZoneTimeline:
    if not isinstance(tz, str):
        raise ScheduleError(
            "timezone", f"timezone must be an IANA zone name such as 'Europe/Berlin'; got {tz!r}."
        )
    return timeline(tz)


class CronSchedule:
    """A parsed cron schedule in a zone with its DST policies; evaluation is pure and cheap.

    `evaluation_key` identifies what the schedule computes: jobs whose keys differ but whose
    `H` fields resolve alike, or interval-style jobs with different (inapplicable) DST
    policies, share it, which is what lets `ScheduleCache` share results between them.
    """

    __slots__ = (
        "_matcher",
        "_timeline",
        "dst_gap",
        "dst_overlap",
        "evaluation_key",
        "expression",
        "interval",
        "key",
        "resolved",
        "timezone",
    )

    def __init__(
        self,
        *,
        expression: str,
        timezone: str,
        key: str | None,
        dst_gap: DstGap,
        dst_overlap: DstOverlap,
        resolved: str,
        interval: bool,
        matcher: WallClockMatcher,
        zone_timeline: ZoneTimeline,
    ) -> None:
        self.expression = expression
        self.timezone = timezone
        self.key = key
        self.dst_gap = dst_gap
        self.dst_overlap = dst_overlap
        self.resolved = resolved
        self.interval = interval
        self._matcher = matcher
        self._timeline = zone_timeline
        policies = ("interval", "") if interval else (dst_gap.value, dst_overlap.value)
        self.evaluation_key: tuple[str, str, str, str] = (resolved, timezone, *policies)

    def __repr__(self) -> str:
        return (
            f"CronSchedule({self.expression!r}, tz={self.timezone!r}, key={self.key!r}, "
            f"resolved={self.resolved!r}, interval={self.interval}, "
            f"dst_gap={self.dst_gap.value!r}, dst_overlap={self.dst_overlap.value!r})"
        )

    @property
    def matcher(self) -> WallClockMatcher:
        """The wall-time matcher of the resolved fields (no DST: `explain.py` reads it)."""
        return self._matcher

    @property
    def zone_timeline(self) -> ZoneTimeline:
        """The zone's offset segments the DST rules walk."""
        return self._timeline

    def next_after(self, after_ms: int) -> int | None:
        """The first fire instant strictly after `after_ms` (UTC ms), or None if none is left.

        None means no fire within 50 years of local time after `after_ms`, or none before
        9000-01-01T00:00:00Z (`why_none` says which); `after_ms` itself must lie in 1900..8999.
        """
        if not MIN_AFTER_MS <= after_ms < MAX_AFTER_MS:
            raise ValueError(f"after_ms {after_ms} is outside 1900-01-01..9000-01-01 UTC")
        t = after_ms // 1000  # fires are at whole seconds: strictly after after_ms is > t
        fixed = not self.interval
        shift_gaps = fixed and self.dst_gap is DstGap.SHIFT
        drop_second_copy = fixed and self.dst_overlap is DstOverlap.FIRST
        drop_first_copy = fixed and self.dst_overlap is DstOverlap.LAST
        if broken.on(broken.DST_OVERLAP_IGNORED):
            drop_second_copy = drop_first_copy = False
        matcher = self._matcher
        segment = self._timeline.segment_at(t)
        # The last search's (from, result): a later search from inside that span has the same
        # answer. A sparse schedule crosses many segments, each with a gap check and a search,
        # before it fires; reusing the answer makes that one search instead of two per segment.
        known_from, known = 0, -1
        while True:
            offset = segment.offset_s
            start, end = segment.start_s, segment.end_s
            if shift_gaps and start > t and segment.gap_before:
                # Wall times in [start + before, start + offset) were skipped by the clock.
                gap_from = start + segment.before_s
                if known_from <= gap_from <= known:
                    gap_match: int | None = known
                else:
                    gap_match = matcher.next_at_or_after(gap_from)
                    if gap_match is not None:
                        known_from, known = gap_from, gap_match
                if gap_match is not None and gap_match < start + offset:
                    return start * 1000
            # Wall times of this segment that may fire, as [low, high).
            low = max(t + 1, start) + offset
            if drop_second_copy and segment.fold_before:
                low = max(low, start + segment.before_s)
            high = end + (segment.after_s if drop_first_copy and segment.fold_after else offset)
            if low < high:
                if known_from <= low <= known:
                    found = known
                else:
                    match = matcher.next_at_or_after(low)
                    if match is None:
                        return None
                    known_from, known = low, match
                    found = match
                if found < high:
                    # The range limit is on instants: in a zone east of UTC the last supported
                    # instants read as the first wall times of the year 9000.
                    instant = found - offset
                    return instant * 1000 if instant < MAX_INSTANT_S else None
            if end >= MAX_INSTANT_S:
                return None
            # The next match is at wall time `known`, maybe years away (a sparse schedule), and
            # no wall time in [known_from, known) matches. A segment starting more than the
            # margin after t and ending more than it before that match shows only such wall
            # times (offsets are smaller than the margin), so it can neither fire nor shift a
            # gap, nor repeat a wall time below known_from: jump over all of them instead of
            # finding each one (a year of zone data each).
            jump_to = known - _JUMP_MARGIN_S
            if end > t + _JUMP_MARGIN_S and jump_to > end:
                segment = self._timeline.segment_at(jump_to)
            else:
                segment = self._timeline.segment_at(end)

    def why_none(self, after_ms: int) -> str:
        """Why `next_after(after_ms)` found nothing, as a clause for a message."""
        year = int(format_utc(after_ms)[:4])
        if year + HORIZON_YEARS >= MAX_YEAR:
            return f"the supported range ends at {format_utc(MAX_AFTER_MS)}"
        return f"the schedule does not fire within {HORIZON_YEARS} years of {format_utc(after_ms)}"

    def iter_after(self, after_ms: int) -> Iterator[int]:
        """Fire instants strictly after `after_ms` (UTC ms), in increasing order."""
        current = self.next_after(after_ms)
        while current is not None:
            yield current
            if current >= MAX_AFTER_MS:
                return
            current = self.next_after(current)

    def next_n(self, after_ms: int, count: int) -> list[int]:
        """The next `count` fire instants strictly after `after_ms` (fewer if none are left)."""
        return list(islice(self.iter_after(after_ms), max(count, 0)))
