"""Why each fire time of a schedule is where it is: the preview of `tickwheel cron next --explain`
and `GET /v1/jobs/{id}/preview`.

Per occurrence it gives the UTC instant, the wall time and UTC offset in the job's zone, and the
rules that put it there, each named as the job document names it:

    dst.gap shift      a wall time the clock skips fires at the gap's end (02:30 → 03:00)
    dst.gap skip       a wall time the clock skips has no run that day (told on the next one)
    dst.overlap first  a wall time the clock repeats fires in its first copy; the second drops
    dst.overlap last   … in its second copy; the first was dropped
    dst.overlap both   … in both copies
    interval           an hour field `*`, `*/n` or `H/n` follows elapsed time: both copies of a
                       repeated hour fire, a skipped one does not
    H                  a field value the job's key picked (`H` → 17)

    start_at           the first occurrence of a window that has not opened yet
    end_at             the window's last occurrence: the job completes (or is deleted) after it
    jitter_ms          the offset its job's jitter delays it by, and the instant it runs at
                       (`jitter.py`, D-287)

and, for the next due occurrence, what the misfire policy would do were it claimed now
(`misfire.grace_ms`, `misfire.policy …`, as `misfire.py` plans it; a jittered occurrence is
late from the instant it runs at).

Pure: a parsed `CronSchedule` (or a one-off instant), the instants and `now` in, a `Preview`
out; nothing reads a clock. Instants are UTC integer milliseconds; wall times are the
`wallclock.py` seconds of the zone's own clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from tickwheel.clock import format_ms
from tickwheel.schedule.cron import CronSchedule, DstGap, DstOverlap, HashedItem, hashed_items
from tickwheel.schedule.instants import format_utc
from tickwheel.schedule.jitter import jitter_offset
from tickwheel.schedule.misfire import (
    DEFAULT_GRACE_MS,
    DEFAULT_MAX_CATCHUP,
    MisfirePolicy,
    plan_misfire,
)
from tickwheel.schedule.wallclock import from_wall_s
from tickwheel.schedule.window import Window, window_reasons
from tickwheel.schedule.zones import Segment, ZoneTimeline, timeline

GAP_WALL_TIMES_SHOWN = 3  # wall times of one gap named one by one; the rest are counted
_GAP_WALL_TIMES_COUNTED = 10_000  # matches counted in one gap at most (a per-second schedule)


@dataclass(frozen=True, slots=True)
class Reason:
    """One rule that put an occurrence where it is (or dropped one before it)."""

    rule: str  # as the job document names it: "dst.gap shift", "dst.overlap first", "H", …
    text: str  # one sentence for people

    def to_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "text": self.text}


@dataclass(frozen=True, slots=True)
class Occurrence:
    at_ms: int  # UTC milliseconds
    local: str  # wall time in the zone, ISO-8601 without offset: 2026-03-29T03:00:00
    offset: str  # the zone's UTC offset at the instant: +02:00
    abbreviation: str  # the zone's name for that offset: CEST
    reasons: tuple[Reason, ...] = ()
    excluded: str | None = None  # the calendar and rule excluding it: recorded skipped
    jitter_ms: int | None = None  # the offset its job's jitter delays it by (None: no jitter)

    def to_dict(self, instant: Callable[[int], str] = format_utc) -> dict[str, Any]:
        return {
            "at": instant(self.at_ms),
            "local": self.local,
            "offset": self.offset,
            "abbreviation": self.abbreviation,
            "reasons": [r.to_dict() for r in self.reasons],
            "excluded": self.excluded,
            "jitter": (
                None
                if self.jitter_ms is None
                # In milliseconds whatever `instant` writes: seconds would hide the offset.
                else {
                    "offset_ms": self.jitter_ms,
                    "runs_at": format_ms(self.at_ms + self.jitter_ms),
                }
            ),
        }


@dataclass(frozen=True, slots=True)
class MisfireSettings:
    """A job's `misfire` block."""

    policy: str = MisfirePolicy.RUN_ONCE.value
    grace_ms: int = DEFAULT_GRACE_MS
    max_catchup: int = DEFAULT_MAX_CATCHUP


@dataclass(frozen=True, slots=True)
class MisfireOutlook:
    """What a claim at `now_ms` would do with the next due occurrence and those after it."""

    rule: str  # "misfire.grace_ms" (on time, or not due yet) or "misfire.policy <policy>"
    text: str
    now_ms: int
    due_ms: int
    run: tuple[int, ...]  # instants the claim would run, oldest first
    skipped: int  # occurrences it would record skipped, one by one
    skipped_span: tuple[int, int] | None  # [from, to) it would record skipped as one entry
    next_run_at: int | None  # the job's next occurrence after the claim

    def to_dict(self, instant: Callable[[int], str] = format_utc) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "text": self.text,
            "now": instant(self.now_ms),
            "due": instant(self.due_ms),
            "run": [instant(t) for t in self.run],
            "skipped": self.skipped,
            "skipped_span": (
                None
                if self.skipped_span is None
                else {
                    "from": instant(self.skipped_span[0]),
                    "to": instant(self.skipped_span[1]),
                }
            ),
            "next_run_at": None if self.next_run_at is None else instant(self.next_run_at),
        }


@dataclass(frozen=True, slots=True)
class Preview:
    """A schedule's next occurrences, each with why it is there."""

    timezone: str
    occurrences: tuple[Occurrence, ...]
    misfire: MisfireOutlook | None
    expression: str | None = None  # None: a one-off job
    resolved: str | None = None  # the expression with its H items resolved
    interval: bool = False
    dst_gap: str | None = None
    dst_overlap: str | None = None
    key: str | None = None
    hashed: tuple[HashedItem, ...] = field(default=())
    window: Window | None = None
    jitter_ms: int | None = None  # the job's jitter_ms (None: none)

    def to_dict(self, instant: Callable[[int], str] = format_utc) -> dict[str, Any]:
        """JSON-ready; instants as `instant` writes them (the CLI's seconds by default)."""
        return {
            "schedule": self.expression,
            "resolved": self.resolved,
            "timezone": self.timezone,
            "style": None if self.expression is None else _style(self.interval),
            "dst": (
                None
                if self.expression is None
                else {"gap": self.dst_gap, "overlap": self.dst_overlap}
            ),
            "key": self.key,
            "hashed": [
                {"field": h.field, "item": h.item, "values": list(h.values)} for h in self.hashed
            ],
            "occurrences": [o.to_dict(instant) for o in self.occurrences],
            "misfire": None if self.misfire is None else self.misfire.to_dict(instant),
            "window": None if self.window is None else self.window.to_dict(instant),
            "jitter_ms": self.jitter_ms,
        }


def _style(interval: bool) -> str:
    return "interval" if interval else "fixed-hour"


# --- building a preview ---------------------------------------------------------------------


def explain_cron(
    schedule: CronSchedule,
    instants: list[int],
    *,
    after_ms: int | None,
    now_ms: int,
    misfire: MisfireSettings | None = None,
    window: Window | None = None,
    exclusions: Callable[[int], str | None] | None = None,
    jitter: tuple[str, int] | None = None,
) -> Preview:
    """Explain `instants`, consecutive fire times of `schedule` (its `next_n`, or a job's
    `next_run_at` and the fires after it) within `window`. `after_ms`, when given, is where
    the list starts (exclusive): wall times skipped before the first instant are told on it
    too. `exclusions(instant)`: the calendar and rule that exclude it (the job's calendars,
    `tickwheel.schedule.calendars`), or None. `jitter`: the job's key and its jitter_ms (the
    key the offsets hash; the schedule's own names the job only when the expression has `H`)."""
    settings = misfire or MisfireSettings()
    hashed = tuple(hashed_items(schedule.expression, schedule.key))
    next_after = schedule.next_after if window is None else window.bound(schedule.next_after)
    due: Callable[[int], int] | None = None
    if jitter is not None and jitter[1]:
        key, jitter_ms = jitter

        def due(s: int) -> int:
            return s + jitter_offset(key, s, jitter_ms, next_after(s))

    occurrences = []
    previous_s = None if after_ms is None else after_ms // 1000
    for i, instant in enumerate(instants):
        occurrence = _occurrence(schedule, hashed, instant, previous_s)
        if window is not None:
            found = window_reasons(window, instant, i == 0, after_ms or now_ms, next_after)
            if found:
                reasons = tuple(Reason(rule, text) for rule, text in found)
                occurrence = replace(occurrence, reasons=occurrence.reasons + reasons)
        why = None if exclusions is None else exclusions(instant)
        if why is None and exclusions is not None and due is not None:
            why = exclusions(due(instant))  # it would run inside an exclusion (D-286)
        if why is not None:
            excluded = Reason("calendars", f"excluded by {why}: recorded skipped, not run")
            occurrence = replace(occurrence, reasons=(*occurrence.reasons, excluded), excluded=why)
        if due is not None and jitter is not None:
            offset = due(instant) - instant
            reason = _jitter_reason(instant, offset, jitter[1])
            occurrence = replace(
                occurrence, reasons=(*occurrence.reasons, reason), jitter_ms=offset
            )
        occurrences.append(occurrence)
        previous_s = instant // 1000
    outlook = None
    if instants:
        outlook = misfire_outlook(
            settings, instants[0], now_ms, next_after, due, jitter[1] if jitter else 0
        )
    return Preview(
        timezone=schedule.timezone,
        occurrences=tuple(occurrences),
        misfire=outlook,
        expression=schedule.expression,
        resolved=schedule.resolved,
        interval=schedule.interval,
        dst_gap=schedule.dst_gap.value,
        dst_overlap=schedule.dst_overlap.value,
        key=schedule.key,
        hashed=hashed,
        window=window,
        jitter_ms=jitter[1] if jitter is not None and jitter[1] else None,
    )


def _jitter_reason(instant: int, offset: int, jitter_ms: int) -> Reason:
    """The jitter's part in an occurrence: when it runs, and why there."""
    text = (
        f"runs {offset} ms after its instant, at {format_ms(instant + offset)}: an offset in "
        f"[0, {jitter_ms}) ms that the job and this instant decide, the same on every leader; "
        "the run keeps its instant"
    )
    return Reason("jitter_ms", text)


def explain_once(
    at_ms: int | None, timezone: str, *, now_ms: int, misfire: MisfireSettings | None = None
) -> Preview:
    """A one-off job's preview: its instant (None once it has run) read in its zone."""
    if at_ms is None:
        return Preview(timezone=timezone, occurrences=(), misfire=None)
    zone = timeline(timezone)
    occurrence = _bare_occurrence(zone, at_ms)
    outlook = misfire_outlook(misfire or MisfireSettings(), at_ms, now_ms, lambda _t: None)
    return Preview(timezone=timezone, occurrences=(occurrence,), misfire=outlook)


def _bare_occurrence(
    zone: ZoneTimeline, instant_ms: int, reasons: tuple[Reason, ...] = ()
) -> Occurrence:
    t = instant_ms // 1000
    offset_s = zone.segment_at(t).offset_s
    return Occurrence(
        at_ms=instant_ms,
        local=from_wall_s(t + offset_s).isoformat(),
        offset=_offset_text(offset_s),
        abbreviation=datetime.fromtimestamp(t, zone.zone).tzname() or "",
        reasons=reasons,
    )


def _occurrence(
    schedule: CronSchedule, hashed: tuple[HashedItem, ...], instant_ms: int, previous_s: int | None
) -> Occurrence:
    zone = schedule.zone_timeline
    t = instant_ms // 1000
    segment = zone.segment_at(t)
    reasons: list[Reason] = []
    if previous_s is not None:
        reasons += _skipped_gaps(schedule, previous_s, t)
    matched_wall = t + segment.offset_s
    shifted = _gap_shift(schedule, segment, t)
    if shifted is not None:
        reason, matched_wall = shifted
        reasons.append(reason)
    else:
        reasons += _repeated(schedule, segment, t)
    reasons += _hash_reasons(hashed, matched_wall, schedule.key)
    return _bare_occurrence(zone, instant_ms, tuple(reasons))


def _gap_walls(schedule: CronSchedule, segment: Segment) -> list[int]:
    """Wall times the schedule matches inside the gap before `segment` (the clock skipped)."""
    low, high = segment.start_s + segment.before_s, segment.start_s + segment.offset_s
    found: list[int] = []
    wall = schedule.matcher.next_at_or_after(low)
    while wall is not None and wall < high and len(found) < _GAP_WALL_TIMES_COUNTED:
        found.append(wall)
        wall = schedule.matcher.next_at_or_after(wall + 1)
    return found


def _gap_sentence(segment: Segment, walls: list[int]) -> str:
    shown = [_clock(w) for w in walls[:GAP_WALL_TIMES_SHOWN]]
    names = ", ".join(shown)
    if len(walls) > GAP_WALL_TIMES_SHOWN:
        names += f" and {len(walls) - GAP_WALL_TIMES_SHOWN} more wall times"
    verb = "does" if len(walls) == 1 else "do"
    day = from_wall_s(walls[0]).date().isoformat()
    jump_from = _clock(segment.start_s + segment.before_s)
    jump_to = _clock(segment.start_s + segment.offset_s)
    return f"{names} {verb} not exist on {day} (the clock jumps from {jump_from} to {jump_to})"


def _gap_shift(schedule: CronSchedule, segment: Segment, t: int) -> tuple[Reason, int] | None:
    """(reason, the wall time that matched) when the instant is a gap's end reached by shift."""
    if schedule.interval or schedule.dst_gap is not DstGap.SHIFT:
        return None
    if segment.start_s != t or not segment.gap_before:
        return None
    walls = _gap_walls(schedule, segment)
    if not walls:
        return None
    gap_end = segment.start_s + segment.offset_s
    text = f"{_gap_sentence(segment, walls)}: shifted {_clock(walls[0])} → {_clock(gap_end)}"
    if len(walls) > 1:
        text += ", one run for all of them"
    if schedule.matcher.next_at_or_after(gap_end) == gap_end:
        text += f"; {_clock(gap_end)} itself matches too, the same instant and so the same run"
    return Reason(f"dst.gap {DstGap.SHIFT.value}", text), walls[0]


def _skipped_gaps(schedule: CronSchedule, previous_s: int, t: int) -> list[Reason]:
    """Gaps between the previous occurrence and this one whose matching wall times did not
    fire (policy skip, or an interval-style schedule)."""
    if not schedule.interval and schedule.dst_gap is DstGap.SHIFT:
        return []  # a matching gap would have been an occurrence of its own
    zone = schedule.zone_timeline
    reasons = []
    segment = zone.segment_at(previous_s)
    while True:
        if previous_s < segment.start_s <= t and segment.gap_before:
            walls = _gap_walls(schedule, segment)
            if walls:
                sentence = _gap_sentence(segment, walls)
                if schedule.interval:
                    reasons.append(
                        Reason(
                            "interval",
                            f"before this: {sentence}; an interval-style schedule follows "
                            "elapsed time and does not fire in them",
                        )
                    )
                else:
                    reasons.append(
                        Reason(
                            f"dst.gap {DstGap.SKIP.value}",
                            f"before this: {sentence}; no run that day",
                        )
                    )
        if segment.end_s > t:
            return reasons
        segment = zone.segment_at(segment.end_s)


def _repeated(schedule: CronSchedule, segment: Segment, t: int) -> list[Reason]:
    """The reason for an instant whose wall time the clock shows twice, if it is one."""
    wall = t + segment.offset_s
    if (
        segment.fold_after
        and segment.end_s + segment.after_s <= wall < segment.end_s + segment.offset_s
    ):
        copy, other_s = "first", wall - segment.after_s
        first_abbr, second_abbr = segment.offset_s, segment.after_s
    elif (
        segment.fold_before
        and segment.start_s + segment.offset_s <= wall < segment.start_s + segment.before_s
    ):
        copy, other_s = "second", wall - segment.before_s
        first_abbr, second_abbr = segment.before_s, segment.offset_s
    else:
        return []
    day = from_wall_s(wall).date().isoformat()
    happens = (
        f"{_clock(wall)} happens twice on {day} (at UTC{_offset_text(first_abbr)}, then at "
        f"UTC{_offset_text(second_abbr)})"
    )
    other = format_utc(other_s * 1000)
    if schedule.interval:
        return [
            Reason(
                "interval",
                f"{happens}; an interval-style schedule follows elapsed time and fires in both "
                f"copies: this is the {copy}, the other is at {other}",
            )
        ]
    policy = schedule.dst_overlap
    rule = f"dst.overlap {policy.value}"
    if policy is DstOverlap.BOTH:
        text = f"{happens}: this is the {copy} copy; the other, at {other}, fires too"
    elif copy == "first":
        text = f"{happens}: this is the first copy; the second, at {other}, is dropped"
    else:
        text = f"{happens}: this is the second copy; the first, at {other}, was dropped"
    return [Reason(rule, text)]


# Wall-time field values, as the field names of `fields.py` call them.
def _field_value(name: str, moment: datetime) -> int:
    return {
        "second": moment.second,
        "minute": moment.minute,
        "hour": moment.hour,
        "day-of-month": moment.day,
        "month": moment.month,
        "day-of-week": moment.isoweekday() % 7,
    }[name]


def _hash_reasons(hashed: tuple[HashedItem, ...], wall: int, key: str | None) -> list[Reason]:
    moment = from_wall_s(wall)
    reasons = []
    for item in hashed:
        value = _field_value(item.field, moment)
        if value not in item.values:
            continue  # the field matched through another of its items
        if len(item.values) == 1:
            picked = f"{item.field} {value} is {item.item!r}, picked by hashing the key {key!r}"
        else:
            values = ",".join(str(v) for v in item.values)
            picked = (
                f"{item.field} {value} is one of {values}, which {item.item!r} resolves to "
                f"by hashing the key {key!r}"
            )
        reasons.append(Reason("H", picked))
    return reasons


# --- what a claim now would do ----------------------------------------------------------------


def misfire_outlook(
    settings: MisfireSettings,
    due_ms: int,
    now_ms: int,
    next_after: Callable[[int], int | None],
    due: Callable[[int], int] | None = None,
    jitter_ms: int = 0,
) -> MisfireOutlook:
    """What a claim at `now_ms` would do with the occurrence due at `due_ms` (the job's
    `next_run_at`) and those after it up to now: `plan_misfire`, told in words. A jittered
    job passes `due` and its `jitter_ms` (`plan_misfire`): lateness counts from the instant
    each occurrence runs at."""
    grace = f"misfire.grace_ms ({settings.grace_ms} ms)"
    runs_at = due_ms if due is None else due(due_ms)
    if runs_at > now_ms:
        at = (
            "its instant"
            if due is None
            else f"the instant its jitter gives it ({format_ms(runs_at)})"
        )
        return MisfireOutlook(
            rule="misfire.grace_ms",
            text=(
                f"not due yet ({_duration(runs_at - now_ms)} from now): claimed at {at} or "
                f"within {grace} after, it runs; later than that, misfire.policy "
                f"{settings.policy} decides"
            ),
            now_ms=now_ms,
            due_ms=due_ms,
            run=(),
            skipped=0,
            skipped_span=None,
            next_run_at=due_ms,
        )
    plan = plan_misfire(
        settings.policy, settings.grace_ms, settings.max_catchup, due_ms, now_ms, next_after,
        due, jitter_ms,
    )  # fmt: skip
    late = now_ms - runs_at
    due_of: Callable[[int], int] = (lambda r: r) if due is None else due
    span = plan.skipped_span

    def outlook(rule: str, text: str) -> MisfireOutlook:
        return MisfireOutlook(
            rule=rule,
            text=text,
            now_ms=now_ms,
            due_ms=due_ms,
            run=tuple(plan.run),
            skipped=len(plan.skipped),
            skipped_span=None if span is None else (span.start_ms, span.end_ms),
            next_run_at=plan.next_run_at,
        )

    resumes = (
        "no occurrence follows"
        if plan.next_run_at is None
        else f"the schedule resumes at {format_utc(plan.next_run_at)}"
    )
    if late <= settings.grace_ms:
        more = len(plan.run) - 1
        also = f", and so do {_count(more, 'more occurrence')} due since" if more else ""
        return outlook(
            "misfire.grace_ms",
            f"due {_duration(late)} ago, within {grace}: claimed now, it runs{also}; {resumes}",
        )
    skipped = _count(len(plan.skipped), "occurrence")
    if span is not None:
        skipped += (
            f" one by one and every occurrence from {format_utc(span.start_ms)} to "
            f"{format_utc(span.end_ms)} as one entry"
        )
    head = f"due {_duration(late)} ago, later than {grace}: claimed now,"
    policy = settings.policy
    if policy == MisfirePolicy.SKIP:
        body = (
            "it and every occurrence missed after it are recorded skipped (reason misfire): "
            f"{skipped}"
        )
    elif policy == MisfirePolicy.RUN_ONCE:
        body = "it runs once"
        if plan.skipped or span:
            body += (
                ", and the occurrences missed after it are recorded skipped (reason misfire): "
                f"{skipped}"
            )
    else:
        caught_up = sum(1 for r in plan.run if due_of(r) < now_ms - settings.grace_ms)
        body = (
            f"the {_count(caught_up, 'oldest missed occurrence')} run, oldest first "
            f"(misfire.max_catchup {settings.max_catchup})"
        )
        if plan.skipped or span:
            body += f", and the rest are recorded skipped (reason max_catchup): {skipped}"
    on_time = sum(1 for r in plan.run if due_of(r) >= now_ms - settings.grace_ms)
    if on_time:
        body += f"; {_count(on_time, 'occurrence')} within the grace run as usual"
    return outlook(f"misfire.policy {policy}", f"{head} {body}; {resumes}")


# --- words ----------------------------------------------------------------------------------


def _count(n: int, noun: str) -> str:
    """`1 occurrence`, `2 occurrences`, `1,000 occurrences`."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def _clock(wall_s: int) -> str:
    """HH:MM of a wall time, with :SS when it has seconds."""
    moment = from_wall_s(wall_s)
    return moment.strftime("%H:%M:%S" if moment.second else "%H:%M")


def _offset_text(offset_s: int) -> str:
    sign = "-" if offset_s < 0 else "+"
    hours, rest = divmod(abs(offset_s), 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}"
    return f"{text}:{seconds:02d}" if seconds else text


def _duration(ms: int) -> str:
    """A short duration for people: 45 s, 12 min 5 s, 3 h 20 min, 2 d 4 h."""
    seconds = ms // 1000
    if seconds < 60:
        return f"{seconds} s" if seconds else f"{ms} ms"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def render_text(preview: Preview) -> str:
    """The preview for people: a heading, one line per occurrence and its reasons indented
    below it, then what a claim now would do with the next due one."""
    lines = []
    if preview.expression is not None:
        lines.append(
            f"schedule {preview.expression!r} in {preview.timezone}: "
            f"{_style(preview.interval)}, dst.gap {preview.dst_gap}, "
            f"dst.overlap {preview.dst_overlap}"
        )
        if preview.hashed:
            items = ", ".join(
                f"{h.field} {h.item!r} → {','.join(str(v) for v in h.values)}"
                for h in preview.hashed
            )
            lines.append(f"H from key {preview.key!r}: {items}")
    else:
        lines.append(f"one-off in {preview.timezone}")
    if preview.window is not None:
        window = preview.window.to_dict()
        lines.append(
            f"window {window['start_at'] or '(open)'} .. {window['end_at'] or '(open)'}, "
            f"after_end {window['after_end']}"
        )
    if preview.jitter_ms:
        lines.append(
            f"jitter_ms {preview.jitter_ms}: each fire time runs up to that much later, the run "
            "keeping its instant"
        )
    for occurrence in preview.occurrences:
        lines.append(
            f"{format_utc(occurrence.at_ms)}  {occurrence.local.replace('T', ' ')} "
            f"{occurrence.abbreviation} ({occurrence.offset})"
        )
        lines.extend(f"    {r.rule}: {r.text}" for r in occurrence.reasons)
    if preview.misfire is not None:
        outlook = preview.misfire
        lines.append(
            f"next due {format_utc(outlook.due_ms)}, if claimed now ({format_utc(outlook.now_ms)}):"
        )
        lines.append(f"    {outlook.rule}: {outlook.text}")
    return "\n".join(lines) + "\n"
