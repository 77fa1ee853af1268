"""DST semantics of cron schedules (DESIGN §6): a table of cases, then properties and an oracle.

The oracle is deliberately naive: it lists every matching wall time with croniter on naive
datetimes, maps each to instants with zoneinfo's `fold` rules, applies the policy, and sorts.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tickwheel.schedule import CronSchedule, format_utc, parse_at, parse_cron
from tickwheel.schedule.zones import timeline

pytestmark = pytest.mark.unit

HOUR_S = 3600  # seconds
ORACLE_MARGIN_S = 3 * HOUR_S  # seconds of wall time listed beyond the window on each side
WINDOW_S = 6 * HOUR_S  # seconds each side of a transition that the oracle compares


def _fires(schedule: CronSchedule, after: str, count: int) -> list[str]:
    return [format_utc(ms) for ms in schedule.next_n(parse_at(after), count)]


# --- the table -----------------------------------------------------------------------------------
# (zone, expression, dst.gap, dst.overlap, after, expected UTC fires). Transitions, 2024:
#   Europe/Berlin        spring 03-31 01:00Z (02:00→03:00)   fall 10-27 01:00Z (03:00→02:00)
#   America/New_York     spring 03-10 07:00Z (02:00→03:00)   fall 11-03 06:00Z (02:00→01:00)
#   Australia/Sydney     fall 04-06 16:00Z (03:00→02:00)     spring 10-05 16:00Z (02:00→03:00)
#   Australia/Lord_Howe  fall 04-06 15:00Z (02:00→01:30)     spring 10-05 15:30Z (02:00→02:30)
#   America/Santiago     fall 04-07 03:00Z (00:00→23:00)     spring 09-08 04:00Z (00:00→01:00)
DST_CASES = [
    # Europe/Berlin, fixed hour: 02:30 is missing in spring and repeated in autumn.
    ("Europe/Berlin", "30 2 * * *", "shift", "first", "2024-03-30T12:00:00Z",
     ["2024-03-31T01:00:00Z", "2024-04-01T00:30:00Z"]),
    ("Europe/Berlin", "30 2 * * *", "skip", "first", "2024-03-30T12:00:00Z",
     ["2024-04-01T00:30:00Z", "2024-04-02T00:30:00Z"]),
    ("Europe/Berlin", "30 2 * * *", "shift", "first", "2024-10-26T12:00:00Z",
     ["2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"]),
    ("Europe/Berlin", "30 2 * * *", "shift", "last", "2024-10-26T12:00:00Z",
     ["2024-10-27T01:30:00Z", "2024-10-28T01:30:00Z"]),
    ("Europe/Berlin", "30 2 * * *", "shift", "both", "2024-10-26T12:00:00Z",
     ["2024-10-27T00:30:00Z", "2024-10-27T01:30:00Z", "2024-10-28T01:30:00Z"]),
    # Shifted 02:00 and 02:30 and the real 03:00 are one instant, so one run.
    ("Europe/Berlin", "0,30 2,3 * * *", "shift", "first", "2024-03-30T23:00:00Z",
     ["2024-03-31T01:00:00Z", "2024-03-31T01:30:00Z", "2024-04-01T00:00:00Z"]),
    # Europe/Berlin, interval style: elapsed time, whatever the policies say.
    ("Europe/Berlin", "*/30 * * * *", "shift", "first", "2024-03-31T00:15:00Z",
     ["2024-03-31T00:30:00Z", "2024-03-31T01:00:00Z", "2024-03-31T01:30:00Z"]),
    ("Europe/Berlin", "0 * * * *", "shift", "first", "2024-10-26T23:30:00Z",
     ["2024-10-27T00:00:00Z", "2024-10-27T01:00:00Z", "2024-10-27T02:00:00Z"]),
    ("Europe/Berlin", "0 */2 * * *", "skip", "last", "2024-10-26T21:30:00Z",
     ["2024-10-26T22:00:00Z", "2024-10-27T00:00:00Z", "2024-10-27T01:00:00Z",
      "2024-10-27T03:00:00Z"]),
    # America/New_York: 02:30 missing in March, 01:30 repeated in November.
    ("America/New_York", "30 2 * * *", "shift", "first", "2024-03-09T12:00:00Z",
     ["2024-03-10T07:00:00Z", "2024-03-11T06:30:00Z"]),
    ("America/New_York", "30 2 * * *", "skip", "first", "2024-03-09T12:00:00Z",
     ["2024-03-11T06:30:00Z", "2024-03-12T06:30:00Z"]),
    ("America/New_York", "30 1 * * *", "shift", "first", "2024-11-02T12:00:00Z",
     ["2024-11-03T05:30:00Z", "2024-11-04T06:30:00Z"]),
    ("America/New_York", "30 1 * * *", "shift", "last", "2024-11-02T12:00:00Z",
     ["2024-11-03T06:30:00Z", "2024-11-04T06:30:00Z"]),
    ("America/New_York", "30 1 * * *", "shift", "both", "2024-11-02T12:00:00Z",
     ["2024-11-03T05:30:00Z", "2024-11-03T06:30:00Z", "2024-11-04T06:30:00Z"]),
    ("America/New_York", "*/20 * * * *", "shift", "first", "2024-11-03T05:50:00Z",
     ["2024-11-03T06:00:00Z", "2024-11-03T06:20:00Z", "2024-11-03T06:40:00Z",
      "2024-11-03T07:00:00Z"]),
    ("America/New_York", "0 */1 * * *", "shift", "first", "2024-03-10T05:30:00Z",
     ["2024-03-10T06:00:00Z", "2024-03-10T07:00:00Z", "2024-03-10T08:00:00Z"]),
    # Australia/Sydney (southern hemisphere): repeated 02:30 in April, missing in October.
    ("Australia/Sydney", "30 2 * * *", "shift", "first", "2024-04-06T00:00:00Z",
     ["2024-04-06T15:30:00Z", "2024-04-07T16:30:00Z"]),
    ("Australia/Sydney", "30 2 * * *", "shift", "last", "2024-04-06T00:00:00Z",
     ["2024-04-06T16:30:00Z", "2024-04-07T16:30:00Z"]),
    ("Australia/Sydney", "30 2 * * *", "shift", "first", "2024-10-05T00:00:00Z",
     ["2024-10-05T16:00:00Z", "2024-10-06T15:30:00Z"]),
    ("Australia/Sydney", "30 2 * * *", "skip", "first", "2024-10-05T00:00:00Z",
     ["2024-10-06T15:30:00Z", "2024-10-07T15:30:00Z"]),
    # Australia/Lord_Howe: a 30-minute shift; 01:30-01:59 repeats, 02:00-02:29 is missing.
    ("Australia/Lord_Howe", "45 1 * * *", "shift", "first", "2024-04-06T00:00:00Z",
     ["2024-04-06T14:45:00Z", "2024-04-07T15:15:00Z"]),
    ("Australia/Lord_Howe", "45 1 * * *", "shift", "both", "2024-04-06T00:00:00Z",
     ["2024-04-06T14:45:00Z", "2024-04-06T15:15:00Z", "2024-04-07T15:15:00Z"]),
    ("Australia/Lord_Howe", "15 2 * * *", "shift", "first", "2024-10-05T00:00:00Z",
     ["2024-10-05T15:30:00Z", "2024-10-06T15:15:00Z"]),
    ("Australia/Lord_Howe", "15 2 * * *", "skip", "first", "2024-10-05T00:00:00Z",
     ["2024-10-06T15:15:00Z", "2024-10-07T15:15:00Z"]),
    ("Australia/Lord_Howe", "45 2 * * *", "skip", "first", "2024-10-05T00:00:00Z",
     ["2024-10-05T15:45:00Z", "2024-10-06T15:45:00Z"]),
    ("Australia/Lord_Howe", "*/15 * * * *", "shift", "first", "2024-10-05T15:10:00Z",
     ["2024-10-05T15:15:00Z", "2024-10-05T15:30:00Z", "2024-10-05T15:45:00Z"]),
    ("Australia/Lord_Howe", "*/15 * * * *", "shift", "first", "2024-04-06T14:40:00Z",
     ["2024-04-06T14:45:00Z", "2024-04-06T15:00:00Z", "2024-04-06T15:15:00Z",
      "2024-04-06T15:30:00Z"]),
    # America/Santiago: the transitions are at midnight, so the daily midnight job is hit.
    ("America/Santiago", "0 0 * * *", "shift", "first", "2024-09-07T12:00:00Z",
     ["2024-09-08T04:00:00Z", "2024-09-09T03:00:00Z"]),
    ("America/Santiago", "0 0 * * *", "skip", "first", "2024-09-07T12:00:00Z",
     ["2024-09-09T03:00:00Z", "2024-09-10T03:00:00Z"]),
    ("America/Santiago", "30 23 * * *", "shift", "last", "2024-04-06T12:00:00Z",
     ["2024-04-07T03:30:00Z", "2024-04-08T03:30:00Z"]),
    # Seconds first: a 6-field fixed-hour job in the New York gap.
    ("America/New_York", "15 30 2 * * *", "shift", "first", "2024-03-09T12:00:00Z",
     ["2024-03-10T07:00:00Z", "2024-03-11T06:30:15Z"]),
]  # fmt: skip


@pytest.mark.parametrize(("zone", "expr", "gap", "overlap", "after", "expected"), DST_CASES)
def test_dst_table(
    zone: str, expr: str, gap: str, overlap: str, after: str, expected: list[str]
) -> None:
    """Each zone, transition, schedule style and policy fires exactly at the listed instants."""
    schedule = parse_cron(expr, tz=zone, dst_gap=gap, dst_overlap=overlap)
    assert _fires(schedule, after, len(expected)) == expected


def test_fixed_hour_job_runs_once_in_a_repeated_hour_by_default() -> None:
    """The Kubernetes/Celery double run: a 01:30 job on New York's fall-back night runs once."""
    schedule = parse_cron("30 1 * * *", tz="America/New_York")
    day = [f for f in _fires(schedule, "2024-11-03T00:00:00Z", 3) if f.startswith("2024-11-03")]
    assert day == ["2024-11-03T05:30:00Z"]


def test_samoa_skipped_day_shifts_every_time_of_it_to_the_next_midnight() -> None:
    """Pacific/Apia skipped 2011-12-30: that day's 09:00 fires at the first instant after it."""
    schedule = parse_cron("0 9 * * *", tz="Pacific/Apia")
    assert _fires(schedule, "2011-12-29T12:00:00Z", 3) == [
        "2011-12-29T19:00:00Z",
        "2011-12-30T10:00:00Z",
        "2011-12-30T19:00:00Z",
    ]


def test_results_are_utc_milliseconds_of_whole_seconds() -> None:
    """next_after returns integer UTC milliseconds, strictly after a mid-second `after`."""
    schedule = parse_cron("* * * * * *")
    assert schedule.next_after(1_000) == 2_000
    assert schedule.next_after(1_999) == 2_000
    assert schedule.next_after(-1) == 0


def test_next_after_rejects_instants_outside_the_supported_years() -> None:
    """An `after` before 1900 or from 9000 on is a programming error, reported as ValueError."""
    schedule = parse_cron("0 0 * * *")
    with pytest.raises(ValueError, match="after_ms"):
        schedule.next_after(parse_at("1900-01-01T00:00:00Z") - 1)


# --- the zone timeline ---------------------------------------------------------------------------


@cache
def _hourly_offsets_changes(zone: str, year: int) -> list[int]:
    """Instants (s) where the offset differs from one hour before: a coarse independent scan."""
    tz = ZoneInfo(zone)
    start = int(datetime(year, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(year + 1, 1, 1, tzinfo=UTC).timestamp())
    changes, previous = [], datetime.fromtimestamp(start, tz).utcoffset()
    for t in range(start + HOUR_S, end + 1, HOUR_S):
        offset = datetime.fromtimestamp(t, tz).utcoffset()
        if offset != previous:
            changes.append(t)
        previous = offset
    return changes


@pytest.mark.parametrize(
    ("zone", "year"),
    [
        ("Europe/Berlin", 2024),
        ("America/New_York", 1974),
        ("Australia/Lord_Howe", 2031),
        ("Pacific/Apia", 2011),
        ("Europe/Moscow", 2014),
        ("Asia/Kolkata", 2024),
    ],
)
def test_timeline_finds_every_offset_change_to_the_second(zone: str, year: int) -> None:
    """The timeline's transitions are the hourly scan's, each at the exact first new second."""
    tz = ZoneInfo(zone)
    transitions = timeline(zone).transitions(year)
    assert [-(-tr.at_s // HOUR_S) * HOUR_S for tr in transitions] == _hourly_offsets_changes(
        zone, year
    )
    for tr in transitions:
        before = datetime.fromtimestamp(tr.at_s - 1, tz).utcoffset()
        after = datetime.fromtimestamp(tr.at_s, tz).utcoffset()
        assert before == timedelta(seconds=tr.before_s)
        assert after == timedelta(seconds=tr.after_s)


# --- properties and the oracle -------------------------------------------------------------------

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Europe/London",
    "America/Sao_Paulo",
    "Pacific/Apia",
]
MINUTES = ["0", "30", "45", "0,30", "*/20", "*/30", "H", "H/30", "10-50/20"]
HOURS = ["*", "*/2", "*/3", "H/4", "0", "1", "2", "3", "23", "1-3", "0,2", "H", "H(0-3)", "22-2"]
DAYS = ["*", "*", "*", "1-31/2", "L"]
WEEKDAYS = ["*", "*", "*", "0-6", "MON-FRI", "SUN"]


@st.composite
def dst_cases(draw: st.DrawFn) -> tuple[CronSchedule, int]:
    """A sparse schedule in a DST zone and an `after` within hours of one of its transitions."""
    zone = draw(st.sampled_from(ZONES))
    year = 2011 if zone == "Pacific/Apia" else draw(st.integers(2000, 2037))
    transitions = timeline(zone).transitions(year)
    assume(transitions)
    transition = draw(st.sampled_from(transitions))
    fields = [draw(st.sampled_from(f)) for f in (MINUTES, HOURS, DAYS, ["*"], WEEKDAYS)]
    if draw(st.integers(0, 5)) == 0:
        fields.insert(0, draw(st.sampled_from(["0", "30", "*/20"])))
    schedule = parse_cron(
        " ".join(fields),
        tz=zone,
        key=draw(st.sampled_from(["acme/nightly", "acme/report-7", "globex/sync"])),
        dst_gap=draw(st.sampled_from(["shift", "skip"])),
        dst_overlap=draw(st.sampled_from(["first", "last", "both"])),
    )
    after_s = transition.at_s + draw(st.integers(-WINDOW_S, WINDOW_S))
    return schedule, after_s * 1000 + draw(st.sampled_from([0, 1, 999]))


def _walls(schedule: CronSchedule, low: datetime, high: datetime) -> list[datetime]:
    """Every naive wall time in [low, high] the expression matches, listed by croniter."""
    it = croniter(schedule.resolved, low - timedelta(seconds=1), second_at_beginning=True)
    out = []
    while (wall := it.get_next(datetime)) <= high:
        out.append(wall)
    return out


def _exists(wall: datetime, tz: ZoneInfo, fold: int) -> int | None:
    """The UTC second `wall` reads as with `fold`, if that instant really shows `wall`."""
    instant = int(wall.replace(tzinfo=tz, fold=fold).timestamp())
    shown = datetime.fromtimestamp(instant, tz).replace(tzinfo=None)
    return instant if shown == wall else None


def _first_instant_after_gap(wall: datetime, tz: ZoneInfo) -> int:
    """The first UTC second whose wall time is later than the skipped `wall`."""
    low = int(wall.replace(tzinfo=tz, fold=1).timestamp())
    high = int(wall.replace(tzinfo=tz, fold=0).timestamp())
    low, high = min(low, high), max(low, high)
    while high - low > 1:
        mid = (low + high) // 2
        if datetime.fromtimestamp(mid, tz).replace(tzinfo=None) > wall:
            high = mid
        else:
            low = mid
    return high


def _oracle(schedule: CronSchedule, low_s: int, high_s: int) -> list[int]:
    """Fire instants (UTC s) in [low_s, high_s), by brute force over wall times."""
    tz = ZoneInfo(schedule.timezone)
    wall_low = datetime(1970, 1, 1) + timedelta(seconds=low_s - 15 * HOUR_S - ORACLE_MARGIN_S)
    wall_high = datetime(1970, 1, 1) + timedelta(seconds=high_s + 15 * HOUR_S + ORACLE_MARGIN_S)
    fixed = not schedule.interval
    instants: set[int] = set()
    for wall in _walls(schedule, wall_low, wall_high):
        first, second = _exists(wall, tz, 0), _exists(wall, tz, 1)
        if first is None and second is None:
            if fixed and schedule.dst_gap == "shift":
                instants.add(_first_instant_after_gap(wall, tz))
        elif first is not None and second is not None and first != second:
            early, late = min(first, second), max(first, second)
            if not fixed or schedule.dst_overlap == "both":
                instants.update((early, late))
            else:
                instants.add(early if schedule.dst_overlap == "first" else late)
        else:
            instants.add(first if first is not None else second)  # type: ignore[arg-type]
    return sorted(i for i in instants if low_s <= i < high_s)


@settings(max_examples=150, deadline=None)
@given(case=dst_cases())
def test_next_after_agrees_with_brute_force_oracle(case: tuple[CronSchedule, int]) -> None:
    """Around a transition, the fires are exactly the oracle's, for every style and policy."""
    schedule, after_ms = case
    low_s, high_s = after_ms // 1000 - WINDOW_S, after_ms // 1000 + WINDOW_S
    ours = []
    for instant in schedule.iter_after(low_s * 1000 - 1):
        if instant >= high_s * 1000:
            break
        ours.append(instant // 1000)
    assert ours == _oracle(schedule, low_s, high_s)


@settings(max_examples=150, deadline=None)
@given(case=dst_cases())
def test_fires_increase_and_match_in_local_time(case: tuple[CronSchedule, int]) -> None:
    """Results rise strictly from `after`; each matches in local time or is a gap's shifted end."""
    schedule, after_ms = case
    tz = ZoneInfo(schedule.timezone)
    fires = schedule.next_n(after_ms, 12)
    assert fires
    assert all(a < b for a, b in zip([after_ms, *fires], fires, strict=False))
    for instant in fires:
        assert instant % 1000 == 0
        wall = datetime.fromtimestamp(instant // 1000, tz).replace(tzinfo=None)
        if croniter.match(schedule.resolved, wall, second_at_beginning=True):
            continue
        # Not a match itself: only a shifted fire, at the very end of a gap, may be.
        assert not schedule.interval
        assert schedule.dst_gap == "shift"
        segment = timeline(schedule.timezone).segment_at(instant // 1000)
        assert segment.start_s == instant // 1000
        assert segment.gap_before
        gap_walls = _walls(
            schedule,
            datetime(1970, 1, 1) + timedelta(seconds=segment.start_s + segment.before_s),
            datetime(1970, 1, 1) + timedelta(seconds=segment.start_s + segment.offset_s - 1),
        )
        assert gap_walls


@settings(max_examples=100, deadline=None)
@given(case=dst_cases())
def test_nothing_fires_from_inside_a_gap_unless_shifted(case: tuple[CronSchedule, int]) -> None:
    """With dst.gap=skip, or any interval-style schedule, every fire is a matching wall time."""
    schedule, after_ms = case
    if not schedule.interval and schedule.dst_gap == "shift":
        schedule = parse_cron(
            schedule.expression,
            tz=schedule.timezone,
            key=schedule.key,
            dst_gap="skip",
            dst_overlap=schedule.dst_overlap,
        )
    tz = ZoneInfo(schedule.timezone)
    for instant in schedule.next_n(after_ms, 12):
        wall = datetime.fromtimestamp(instant // 1000, tz).replace(tzinfo=None)
        assert croniter.match(schedule.resolved, wall, second_at_beginning=True)
