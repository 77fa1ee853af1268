"""IANA zones: name validation, and the timeline of UTC-offset changes the DST rules walk.

`zoneinfo` answers "what is the offset at instant t" but has no public way to list a zone's
transitions, which the DST policies need (where is the gap, where does the hour repeat). The
timeline finds them by probing the offset once a day and bisecting to the second wherever it
changed, one calendar year at a time, and keeps the result for the life of the process (a few
transitions per zone and year).

A daily probe cannot miss a change: it would have to change and change back within one day, and
the closest pair of offset changes in tzdata since 1900 is about seven days apart (Asia/Gaza,
America/Noronha, 601,200 s). Transitions are at whole seconds in the TZif format, so the bisection
ends at the exact instant.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

from tickwheel.schedule.errors import ScheduleError

PROBE_STEP_S = 86_400  # seconds between offset probes while scanning a year
SECONDS_PER_DAY = 86_400  # seconds
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()  # proleptic Gregorian day number of 1970-01-01
MIN_YEAR = 1900  # earliest UTC year an instant may fall in
MAX_YEAR = 8999  # latest UTC year an instant may fall in

# Names in the zone directories that are not zones of their own but depend on the machine.
_MACHINE_LOCAL_NAMES = frozenset({"localtime", "posixrules"})


def year_start_s(year: int) -> int:
    """UTC seconds of January 1st, 00:00:00Z, of `year`."""
    return (date(year, 1, 1).toordinal() - EPOCH_ORDINAL) * SECONDS_PER_DAY


MIN_INSTANT_S = year_start_s(MIN_YEAR)  # seconds, 1900-01-01T00:00:00Z
MAX_INSTANT_S = year_start_s(MAX_YEAR + 1)  # seconds, 9000-01-01T00:00:00Z (exclusive)


@cache
def known_zone_names() -> frozenset[str]:
    """Every IANA zone name this process can load (tzdata package and system zoneinfo)."""
    return frozenset(available_timezones()) - _MACHINE_LOCAL_NAMES


def load_zone(name: object, field: str = "timezone") -> ZoneInfo:
    """The zone called `name`, or ScheduleError(field) when it is not an IANA zone name."""
    if not isinstance(name, str) or name not in known_zone_names():
        raise ScheduleError(
            field,
            f"{field} {name!r} is not an IANA zone name; use a name such as "
            "'Europe/Berlin', 'America/New_York' or 'UTC'.",
        )
    return ZoneInfo(name)


@dataclass(frozen=True, slots=True)
class Transition:
    """One change of a zone's UTC offset."""

    at_s: int  # UTC seconds of the first instant with the new offset
    before_s: int  # UTC offset before the change, seconds
    after_s: int  # UTC offset from `at_s` on, seconds


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch `[start_s, end_s)` of UTC seconds over which a zone's offset is constant.

    `before_s` / `after_s` are the offsets in force just before `start_s` and from `end_s` on. A
    segment boundary is not always a real transition: the timeline looks only a year or two
    around the instant asked about, and closes a segment there with the offset unchanged
    (`before_s == offset_s` or `after_s == offset_s`), which the DST rules treat as no change.
    """

    start_s: int
    end_s: int
    offset_s: int
    before_s: int
    after_s: int

    @property
    def gap_before(self) -> bool:
        """The wall clock jumped forward at `start_s` (local times were skipped)."""
        return self.before_s < self.offset_s

    @property
    def fold_before(self) -> bool:
        """The wall clock jumped back at `start_s` (this segment repeats local times)."""
        return self.before_s > self.offset_s

    @property
    def fold_after(self) -> bool:
        """The wall clock jumps back at `end_s` (the next segment repeats local times)."""
        return self.after_s < self.offset_s


class ZoneTimeline:
    """UTC-offset segments of one zone, found by probing and kept per UTC year."""

    __slots__ = ("_last", "_years", "zone")

    def __init__(self, zone: ZoneInfo) -> None:
        self.zone = zone
        self._years: dict[int, tuple[tuple[int, ...], tuple[Transition, ...]]] = {}
        # Consecutive calls mostly ask about the same stretch of time.
        self._last: Segment | None = None

    def offset_at(self, t_s: int) -> int:
        """The zone's UTC offset at UTC second `t_s`, in seconds."""
        offset = datetime.fromtimestamp(t_s, self.zone).utcoffset()
        assert offset is not None  # a ZoneInfo always knows its offset
        return int(offset.total_seconds())

    def segment_at(self, t_s: int) -> Segment:
        """The segment containing UTC second `t_s`."""
        last = self._last
        if last is not None and last.start_s <= t_s < last.end_s:
            return last
        year = datetime.fromtimestamp(t_s, UTC).year
        previous: Transition | None = None
        for y in (year, year - 1):
            ats, transitions = self._year(y)
            i = bisect_right(ats, t_s)
            if i:
                previous = transitions[i - 1]
                break
        following: Transition | None = None
        for y in (year, year + 1):
            ats, transitions = self._year(y)
            i = bisect_right(ats, t_s)
            if i < len(ats):
                following = transitions[i]
                break
        if previous is not None:
            offset = previous.after_s
        elif following is not None:
            offset = following.before_s
        else:
            offset = self.offset_at(t_s)
        segment = Segment(
            start_s=previous.at_s if previous else year_start_s(year - 1),
            end_s=following.at_s if following else year_start_s(year + 2),
            offset_s=offset,
            before_s=previous.before_s if previous else offset,
            after_s=following.after_s if following else offset,
        )
        self._last = segment
        return segment

    def transitions(self, year: int) -> tuple[Transition, ...]:
        """The offset changes in `(Jan 1st of year, Jan 1st of year + 1]`, UTC."""
        return self._year(year)[1]

    def _year(self, year: int) -> tuple[tuple[int, ...], tuple[Transition, ...]]:
        table = self._years.get(year)
        if table is None:
            found = self._scan(year_start_s(year), year_start_s(year + 1))
            table = (tuple(tr.at_s for tr in found), tuple(found))
            self._years[year] = table
        return table

    def _scan(self, low_s: int, high_s: int) -> list[Transition]:
        found: list[Transition] = []
        t, offset = low_s, self.offset_at(low_s)
        while t < high_s:
            probe = min(t + PROBE_STEP_S, high_s)
            probed = self.offset_at(probe)
            if probed == offset:
                t = probe
                continue
            # offset(a) is the old offset, offset(b) is not: narrow down to the first new second.
            a, b = t, probe
            while b - a > 1:
                mid = (a + b) // 2
                if self.offset_at(mid) == offset:
                    a = mid
                else:
                    b = mid
            after = self.offset_at(b)
            found.append(Transition(at_s=b, before_s=offset, after_s=after))
            t, offset = b, after
        return found


@cache
def timeline(name: str) -> ZoneTimeline:
    """The shared timeline of zone `name` (one per zone and process; there are ~600 zones)."""
    return ZoneTimeline(load_zone(name))
