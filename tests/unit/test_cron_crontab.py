"""Cron fields read as crontab(5) reads them (issue 9): tables per rule, then a differential test.

The differential test draws expressions as structured items, renders them to text (numbers or
names, either `L` spelling) and evaluates the structure with a brute-force evaluator written
here from the crontab(5) rules and the documented extensions (`L`, `W`, `#`, wrap-around
ranges): it walks every day of a window, and every hour, minute and second of a matching day.
"""

from __future__ import annotations

from calendar import monthrange
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from unittest import mock

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.registry_api.document import (
    JobValidationError,
    Limits,
    parse_document,
    validate_job,
)
from tickwheel.schedule import ScheduleError, format_utc, parse_at, parse_cron
from tickwheel.schedule import cron as cron_module
from tickwheel.schedule.cli import EXIT_FEWER, cron

pytestmark = pytest.mark.unit

NEVER_JUMP_S = 10**12  # a margin no skipped stretch can exceed: the walk visits every segment


def _fires(expr: str, after: str, count: int, tz: str = "UTC", **policies: str) -> list[str]:
    schedule = parse_cron(expr, tz=tz, **policies)
    return [format_utc(ms) for ms in schedule.next_n(parse_at(after), count)]


def _days(expr: str, after: str, count: int, tz: str = "UTC") -> list[str]:
    return [fire[:10] for fire in _fires(expr, after, count, tz)]


# --- 1. an equal range is one value --------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0 9 * * MON-MON", ["2026-01-05T09:00:00Z", "2026-01-12T09:00:00Z"]),
        ("30 2-2 * * *", ["2026-01-01T02:30:00Z", "2026-01-02T02:30:00Z"]),
        ("0 0 5-5 * *", ["2026-01-05T00:00:00Z", "2026-02-05T00:00:00Z"]),
        ("0 0 1 JUN-JUN *", ["2026-06-01T00:00:00Z", "2027-06-01T00:00:00Z"]),
        ("10-10 0 0 * * *", ["2026-01-01T00:00:10Z", "2026-01-02T00:00:10Z"]),
        ("7-7 0 * * * *", ["2026-01-01T00:00:07Z", "2026-01-01T01:00:07Z"]),
        ("0 0 * * 7-7", ["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"]),
        ("0 0 * * sun-sun", ["2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"]),
        ("0 0 * * 5-5/2", ["2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z"]),
    ],
)
def test_an_equal_range_is_one_value(expr: str, expected: list[str]) -> None:
    """`a-a` in any field is the single value a (croniter widens it to the whole field)."""
    assert _fires(expr, "2026-01-01T00:00:00Z", 2) == expected


def test_a_backward_range_wraps_around_the_field() -> None:
    """`22-2` hours is 22,23,0,1,2 and `FRI-MON` is Friday to Monday (Sunday counted once)."""
    assert parse_cron("0 22-2 * * *").next_n(parse_at("2026-01-01T03:00:00Z"), 5) == [
        parse_at(f"2026-01-01T{h}:00:00Z") for h in ("22", "23")
    ] + [parse_at(f"2026-01-02T0{h}:00:00Z") for h in ("0", "1", "2")]
    assert _days("0 0 * * FRI-MON", "2026-01-01T00:00:00Z", 5) == [
        "2026-01-02", "2026-01-03", "2026-01-04", "2026-01-05", "2026-01-09",
    ]  # fmt: skip
    assert _days("0 0 * * SAT-MON/2", "2026-01-01T00:00:00Z", 3) == [
        "2026-01-03", "2026-01-05", "2026-01-10",
    ]  # fmt: skip


# --- 2. the day-field rule -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # */2 begins with *: AND — odd-numbered days that are weekdays.
        ("0 9 */2 * 1-5", ["01-01", "01-05", "01-07", "01-09", "01-13", "01-15", "01-19"]),
        # Neither begins with *: OR — 0-6 is every day, so every day fires.
        ("0 0 1,*/15 * 0-6", ["01-02", "01-03", "01-04", "01-05", "01-06", "01-07", "01-08"]),
        # Both restricted: OR — the 13th and every Friday.
        ("0 0 13 * FRI", ["01-02", "01-09", "01-13", "01-16", "01-23", "01-30", "02-06"]),
        # 1-31 is every day but does not begin with *: OR with Mondays is every day.
        ("0 0 1-31 * MON", ["01-02", "01-03", "01-04", "01-05", "01-06", "01-07", "01-08"]),
        # The day of week begins with *: AND — odd days that are even weekdays (Sun/Tue/Thu/Sat).
        ("0 0 1-31/2 * */2", ["01-03", "01-11", "01-13", "01-15", "01-17", "01-25", "01-27"]),
        # ? counts as *: AND, which leaves the other field alone.
        ("0 0 ? * MON", ["01-05", "01-12", "01-19", "01-26", "02-02", "02-09", "02-16"]),
        ("0 0 10,20 * ?", ["01-10", "01-20", "02-10", "02-20", "03-10", "03-20", "04-10"]),
    ],
)
def test_day_fields_combine_by_the_text_of_each(expr: str, expected: list[str]) -> None:
    """Either day field beginning with `*` (or `?`) ANDs them; both restricted ORs them."""
    assert [d[5:] for d in _days(expr, "2026-01-01T08:00:00Z", 7)] == expected


# --- 3. `#`, `L` and `W` beside the other day field ----------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("0 0 1 * MON#1", ["01-05", "02-01", "02-02", "03-01", "03-02", "04-01"]),
        ("0 0 * * MON#1", ["01-05", "02-02", "03-02", "04-06", "05-04", "06-01"]),
        ("0 0 1 * 5L", ["01-30", "02-01", "02-27", "03-01", "03-27", "04-01"]),
        ("0 0 1 * L5", ["01-30", "02-01", "02-27", "03-01", "03-27", "04-01"]),
        ("0 0 1 * FRIL", ["01-30", "02-01", "02-27", "03-01", "03-27", "04-01"]),
        ("0 0 * * 7L", ["01-25", "02-22", "03-29", "04-26", "05-31", "06-28"]),
        ("0 0 15W * MON", ["01-05", "01-12", "01-15", "01-19", "01-26", "02-02"]),
        # 2026-02-15 is a Sunday: the nearest weekday is Monday the 16th; 03-15 too.
        ("0 0 15W * *", ["01-15", "02-16", "03-16", "04-15", "05-15", "06-15"]),
        # 2026-08-01 is a Saturday: W never leaves the month, so Monday the 3rd.
        ("0 0 1W 8 *", ["08-03"]),
        ("0 0 LW * *", ["01-30", "02-27", "03-31", "04-30", "05-29", "06-30"]),
        ("0 0 L 2 MON#5", ["02-28"]),
        ("0 0 31W * *", ["01-30", "03-31", "05-29", "07-31", "08-31", "10-30"]),
    ],
)
def test_hash_and_last_forms_follow_the_day_field_rule(expr: str, expected: list[str]) -> None:
    """`#`, `L` and `W` are items of their day field: beside a restricted field they OR."""
    fires = _days(expr, "2026-01-01T00:00:00Z", len(expected))
    assert [d[5:] for d in fires] == expected
    assert all(d.startswith("2026-") for d in fires)


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("0 0 * * MON-FRI#2", "day-of-week field 'MON-FRI#2' is not supported: '#' takes a single"),
        ("0 0 * * 1#6", "'#' needs one weekday and a week 1-5, as in MON#1"),
        ("0 0 * * 1#0", "'#' needs one weekday and a week 1-5"),
        ("0 0 * * L", "'L' in day-of-week needs a weekday: 5L"),
        ("0 0 * * 1-5L", "'L' takes a single weekday"),
        ("0 0 L-3 * *", "day-of-month field 'L-3' is not supported"),
        ("0 0 1-5W * *", "L, LW and nW (15W) stand alone as items"),
        ("0 0 32W * *", "'W' needs a day 1-31"),
        ("0 0 1,? * *", "day-of-month field '1,?' is not supported: '?' stands alone"),
        ("0 0 * * ?,1", "day-of-week field '?,1' is not supported: '?' stands alone"),
        ("0 0 5#2 * *", "day-of-month field '5#2'"),
        ("0 0 * 5L *", "the month field '5L' is not valid"),
    ],
)  # fmt: skip
def test_unsupported_forms_are_refused_with_the_reason(expr: str, fragment: str) -> None:
    """A form we cannot run as crontab would is a ScheduleError naming field and reason."""
    with pytest.raises(ScheduleError) as raised:
        parse_cron(expr)
    assert raised.value.field == "schedule"
    assert fragment in raised.value.message
    assert "\n" not in raised.value.message


def test_registration_refuses_an_unsupported_form() -> None:
    """The registry's validation turns the refusal into a problem on the schedule field."""
    doc = parse_document({"id": "j", "schedule": "0 0 * * MON-FRI#2", "handler": "a.b"})
    with pytest.raises(JobValidationError) as caught:
        validate_job("acme", doc, Limits(), parse_at("2026-01-01T00:00:00Z"))
    problems = {p.field: p.message for p in caught.value.problems}
    assert "'#' takes a single weekday" in problems["schedule"]


# --- 4. the end of the supported range -----------------------------------------------------------


@pytest.mark.parametrize(
    ("tz", "expected"),
    [
        ("Pacific/Apia", "8999-12-31T11:00:00Z"),  # UTC+13: local 9000-01-01 is still 8999 UTC
        ("Pacific/Kiritimati", "8999-12-31T10:00:00Z"),  # UTC+14
        ("Asia/Tokyo", "8999-12-31T15:00:00Z"),
        ("UTC", None),
        ("America/New_York", None),  # local 9000-01-01 is past the range in UTC
    ],
)
def test_the_range_ends_on_a_utc_instant(tz: str, expected: str | None) -> None:
    """The last supported instant is 8999-12-31T23:59:59Z, whatever local year it reads as."""
    schedule = parse_cron("0 0 1 1 *", tz=tz)
    found = schedule.next_after(parse_at("8999-06-01T00:00:00Z"))
    assert (format_utc(found) if found is not None else None) == expected


def test_cli_says_why_it_prints_fewer_than_asked() -> None:
    """Fewer fires than --count: the ones found on stdout, the reason on stderr, exit 3."""
    result = CliRunner().invoke(
        cron,
        ["next", "0 0 1 1 *", "--tz", "Pacific/Apia", "--after", "8999-06-01T00:00:00Z",
         "--count", "3"],
    )  # fmt: skip
    assert result.exit_code == EXIT_FEWER
    assert result.stdout == "8999-12-31T11:00:00Z\n"
    assert result.stderr == (
        "Error: 1 of 3 fire times printed: the supported range ends at 9000-01-01T00:00:00Z.\n"
    )


def test_why_none_names_the_range_end_or_the_horizon() -> None:
    """The reason for no further fire is the range end near 9000, else the 50-year horizon."""
    schedule = parse_cron("0 0 1 1 *")
    assert schedule.why_none(parse_at("8990-01-01T00:00:00Z")) == (
        "the supported range ends at 9000-01-01T00:00:00Z"
    )
    assert schedule.why_none(parse_at("2026-05-01T00:00:00Z")) == (
        "the schedule does not fire within 50 years of 2026-05-01T00:00:00Z"
    )


# --- 5. sparse schedules in DST zones ------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "tz", "after", "expected"),
    [
        ("0 0 * 2 MON#5", "Europe/Berlin", "2017-01-01T00:00:00Z", ["2044-02-28T23:00:00Z"]),
        ("0 0 * 2 MON#5", "Australia/Lord_Howe", "2017-01-01T00:00:00Z", ["2044-02-28T13:00:00Z"]),
        ("0 0 L 2 MON#5", "Europe/Berlin", "2026-03-01T00:00:00Z",
         ["2027-02-27T23:00:00Z", "2028-02-28T23:00:00Z"]),
        ("0 0 29 2 1#5", "Australia/Lord_Howe", "2026-03-01T00:00:00Z",
         ["2028-02-28T13:00:00Z", "2032-02-28T13:00:00Z"]),
        # A fifth Sunday of March is the spring-forward day: 02:30 does not exist, shift to 03:00.
        ("30 2 * 3 SUN#5", "Europe/Berlin", "2026-04-01T00:00:00Z",
         ["2030-03-31T01:00:00Z", "2031-03-30T01:00:00Z"]),
        # A fifth Sunday of October is the fall-back day: 02:00 happens twice (both fire here).
        ("0 2 * 10 SUN#5", "Europe/Berlin", "2026-01-01T00:00:00Z",
         ["2027-10-31T00:00:00Z", "2027-10-31T01:00:00Z", "2028-10-29T00:00:00Z"]),
        # Just before a fall-back with dst.overlap=both: the repeated 02:30 still fires.
        ("30 2 27 10 *", "Europe/Berlin", "2024-10-27T00:45:00Z",
         ["2024-10-27T01:30:00Z", "2025-10-27T01:30:00Z"]),
    ],
)  # fmt: skip
def test_sparse_schedules_in_dst_zones(expr: str, tz: str, after: str, expected: list[str]) -> None:
    """Schedules that fire years apart land on the right instant across many DST segments."""
    assert _fires(expr, after, len(expected), tz, dst_overlap="both") == expected


@settings(max_examples=60, deadline=None)
@given(
    expr=st.sampled_from(["0 0 * 2 MON#5", "30 2 29 2 *", "0 3 L 2 MON#5", "0 2 29 2 1#5"]),
    tz=st.sampled_from(["Europe/Berlin", "Australia/Lord_Howe", "America/Santiago"]),
    after_s=st.integers(parse_at("2000-01-01T00:00:00Z") // 1000, 4_000_000_000),
    fraction=st.floats(0, 1),
)
def test_a_sparse_fire_is_found_from_anywhere_before_it(
    expr: str, tz: str, after_s: int, fraction: float
) -> None:
    """Any start between a start and its next fire finds that same fire (no segment skipped)."""
    schedule = parse_cron(expr, tz=tz)
    fire = schedule.next_after(after_s * 1000)
    assert fire is not None
    between = after_s * 1000 + int((fire - after_s * 1000 - 1) * fraction)
    assert schedule.next_after(between) == fire


SPARSE_FIRES_COMPARED = 4  # consecutive fires compared per example
SPARSE_EXPRESSIONS = [
    "0 0 * 2 MON#5",
    "30 2 * 3 SUN#5",
    "0 2 * 10 SUN#5",
    "*/30 2 * 10 SUN#5",
    "30 1 * 11 1#1",
    "30 0 */29 2 MON",
    "0 1 LW 10 *",
    "30 23 * 4 SAT#1",  # Santiago falls back at 24:00 on a Saturday night in April
    "30 2 * 3 FRI#5",  # Gaza and Casablanca move their clocks around 02:00
]


@settings(max_examples=120, deadline=None)
@given(
    expr=st.sampled_from(SPARSE_EXPRESSIONS),
    tz=st.sampled_from(["Europe/Berlin", "America/Santiago", "Africa/Casablanca", "Asia/Gaza"]),
    gap=st.sampled_from(["shift", "skip"]),
    overlap=st.sampled_from(["first", "last", "both"]),
    year=st.integers(1975, 2150),
    second_of_year=st.integers(0, 365 * 86_400),
)
def test_jumping_over_segments_never_changes_an_answer(
    expr: str, tz: str, gap: str, overlap: str, year: int, second_of_year: int
) -> None:
    """next_after equals the segment-by-segment walk it shortcuts, for every DST policy."""
    schedule = parse_cron(expr, tz=tz, dst_gap=gap, dst_overlap=overlap)
    after_ms = parse_at(f"{year}-01-01T00:00:00Z") + second_of_year * 1000
    with mock.patch.object(cron_module, "_JUMP_MARGIN_S", NEVER_JUMP_S):
        walked = schedule.next_n(after_ms, SPARSE_FIRES_COMPARED)
    assert schedule.next_n(after_ms, SPARSE_FIRES_COMPARED) == walked


# --- the differential test -----------------------------------------------------------------------

MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
FIRES_COMPARED = 12  # fires compared per example
WINDOW_DAYS = 3 * 366  # days the brute-force walk covers


@dataclass(frozen=True)
class Item:
    """One item of a field: kind is any | range | last | last_weekday | nearest | nth | last_of."""

    kind: str
    a: int = 0
    b: int = 0
    step: int = 1


@dataclass(frozen=True)
class Field:
    """A field's text and the items it was rendered from."""

    text: str
    items: tuple[Item, ...]


def _in_items(value: int, items: tuple[Item, ...], low: int, high: int) -> bool:
    """Whether `value` is in a plain field: lists, ranges, steps; backward ranges wrap."""
    for item in items:
        if item.kind == "any":
            if (value - low) % item.step == 0:
                return True
        elif item.a <= item.b:
            if item.a <= value <= item.b and (value - item.a) % item.step == 0:
                return True
        else:
            size = high - low + 1
            offset = (value - item.a) % size
            if offset <= (item.b - item.a) % size and offset % item.step == 0:
                return True
    return False


def _weekday(day: date) -> int:
    return day.isoweekday() % 7  # Sunday = 0


def _dom_matches(day: date, items: tuple[Item, ...]) -> bool:
    length = monthrange(day.year, day.month)[1]
    specials = [i for i in items if i.kind in ("last", "last_weekday", "nearest")]
    month_days = [day.replace(day=d) for d in range(1, length + 1)] if specials else []
    weekdays = [d for d in month_days if _weekday(d) not in (0, 6)]
    for item in specials:
        if item.kind == "last" and day.day == length:
            return True
        if item.kind == "last_weekday" and day == weekdays[-1]:
            return True
        if item.kind == "nearest" and item.a <= length:
            nearest = min(weekdays, key=lambda d: abs(d.day - item.a))
            if day == nearest:
                return True
    plain = tuple(i for i in items if i.kind in ("any", "range"))
    return _in_items(day.day, plain, 1, 31)


def _dow_matches(day: date, items: tuple[Item, ...]) -> bool:
    weekday = _weekday(day)
    length = monthrange(day.year, day.month)[1]
    for item in items:
        if item.kind == "nth" and weekday == item.a % 7 and (day.day - 1) // 7 + 1 == item.b:
            return True
        if item.kind == "last_of" and weekday == item.a % 7 and day.day + 7 > length:
            return True
    plain = tuple(i for i in items if i.kind in ("any", "range"))
    # 0 and 7 are both Sunday; backward ranges wrap over 0-6.
    return _in_items(weekday, plain, 0, 6) or (weekday == 0 and _in_items(7, plain, 0, 7))


def _day_matches(day: date, fields: list[Field]) -> bool:
    """crontab(5): if either day field begins with '*' both must match, otherwise either."""
    dom, month, dow = fields[-3:]
    if not _in_items(day.month, month.items, 1, 12):
        return False
    dom_ok, dow_ok = _dom_matches(day, dom.items), _dow_matches(day, dow.items)
    if dom.text.startswith(("*", "?")) or dow.text.startswith(("*", "?")):
        return dom_ok and dow_ok
    return dom_ok or dow_ok


def _brute_force(fields: list[Field], after: datetime) -> Iterator[datetime]:
    """Every matching second after `after` within WINDOW_DAYS, walking day, hour, minute, second."""
    seconds_field = fields[0] if len(fields) == 6 else Field("0", (Item("range", 0, 0),))
    minute, hour = fields[-5], fields[-4]
    day = after.date()
    for _ in range(WINDOW_DAYS):
        first_day = day == after.date()
        if _day_matches(day, fields):
            for h in range(after.hour if first_day else 0, 24):
                if not _in_items(h, hour.items, 0, 23):
                    continue
                for m in range(after.minute if first_day and h == after.hour else 0, 60):
                    if not _in_items(m, minute.items, 0, 59):
                        continue
                    for s in range(60):
                        if _in_items(s, seconds_field.items, 0, 59):
                            moment = datetime(day.year, day.month, day.day, h, m, s)
                            if moment > after:
                                yield moment
        day += timedelta(days=1)


def _name_or_number(draw: st.DrawFn, value: int, names: list[str] | None, first: int) -> str:
    if names is not None and value - first < len(names) and draw(st.booleans()):
        name = names[value - first]
        return draw(st.sampled_from([name, name.lower(), name.title()]))
    return str(value)


@st.composite
def plain_items(
    draw: st.DrawFn, low: int, high: int, names: list[str] | None = None, wrap_high: int = -1
) -> tuple[str, Item]:
    """One crontab(5) item: *, */n, a, a-b (equal and backward too), a-b/n, a/n."""
    wrap_high = high if wrap_high < 0 else wrap_high
    kind = draw(st.sampled_from(["star", "value", "range", "range", "range_step", "start_step"]))
    step = draw(st.integers(1, max(1, (high - low) // 2 + 1)))
    a = draw(st.integers(low, high))

    def show(v: int) -> str:
        return _name_or_number(draw, v, names, low)

    if kind == "star":
        return f"*/{step}", Item("any", step=step)
    if kind == "value":
        return show(a), Item("range", a, a)
    if kind == "start_step":
        return f"{a}/{step}", Item("range", a, high, step)
    b = draw(st.one_of(st.just(a), st.integers(low, high)))  # equal ranges often
    if a > b and (a > wrap_high or b > wrap_high):
        a, b = b, a  # backward day-of-week ranges stay within 0-6
    if kind == "range":
        return f"{show(a)}-{show(b)}", Item("range", a, b)
    return f"{show(a)}-{show(b)}/{step}", Item("range", a, b, step)


@st.composite
def fields_of(draw: st.DrawFn, items: st.SearchStrategy[tuple[str, Item]]) -> Field:
    """A field: `*`, or a list of one to three items."""
    if draw(st.integers(0, 3)) == 0:
        return Field("*", (Item("any"),))
    drawn = draw(st.lists(items, min_size=1, max_size=3))
    return Field(",".join(text for text, _ in drawn), tuple(item for _, item in drawn))


@st.composite
def dom_items(draw: st.DrawFn) -> tuple[str, Item]:
    """A day-of-month item, with L, LW and nW among them."""
    special = draw(st.integers(0, 5))
    if special == 0:
        return "L", Item("last")
    if special == 1:
        return "LW", Item("last_weekday")
    if special == 2:
        n = draw(st.integers(1, 31))
        return f"{n}W", Item("nearest", n)
    return draw(plain_items(1, 31))


@st.composite
def dow_items(draw: st.DrawFn) -> tuple[str, Item]:
    """A day-of-week item, with d#k and dL / Ld among them."""
    special = draw(st.integers(0, 5))
    d = draw(st.integers(0, 7))
    shown = _name_or_number(draw, d, DAY_NAMES, 0)
    if special == 0:
        k = draw(st.integers(1, 5))
        return f"{shown}#{k}", Item("nth", d, k)
    if special == 1:
        text = draw(st.sampled_from([f"{shown}L", f"L{shown}"]))
        return text, Item("last_of", d)
    return draw(plain_items(0, 7, DAY_NAMES, wrap_high=6))


@st.composite
def expressions(draw: st.DrawFn) -> list[Field]:
    """Five fields, or six with seconds first."""
    fields = [
        draw(fields_of(plain_items(0, 59))),
        draw(fields_of(plain_items(0, 23))),
        draw(st.one_of(fields_of(dom_items()), st.just(Field("?", (Item("any"),))))),
        draw(fields_of(plain_items(1, 12, MONTH_NAMES))),
        draw(st.one_of(fields_of(dow_items()), st.just(Field("?", (Item("any"),))))),
    ]
    if draw(st.booleans()):
        fields.insert(0, draw(fields_of(plain_items(0, 59))))
    return fields


@settings(max_examples=250, deadline=None)
@given(
    fields=expressions(),
    after=st.datetimes(datetime(2000, 1, 1), datetime(2060, 1, 1)).map(
        lambda moment: moment.replace(microsecond=0)
    ),
)
def test_next_fires_equal_a_brute_force_crontab_walk(fields: list[Field], after: datetime) -> None:
    """For random 5- and 6-field expressions in UTC, the fires are the brute-force walk's."""
    expr = " ".join(field.text for field in fields)
    expected = []
    for moment in _brute_force(fields, after):
        expected.append(moment.replace(tzinfo=UTC))
        if len(expected) == FIRES_COMPARED:
            break
    window_end = datetime.combine(after.date() + timedelta(days=WINDOW_DAYS), datetime.min.time())
    after_ms = int(after.replace(tzinfo=UTC).timestamp() * 1000)
    try:
        schedule = parse_cron(expr)
    except ScheduleError as exc:
        # Only an expression naming no date at all may be refused, and then the walk finds none.
        assert "matches no date" in exc.message, exc.message
        assert expected == []
        return
    ours = []
    for instant in schedule.iter_after(after_ms):
        moment = datetime.fromtimestamp(instant / 1000, UTC)
        if moment >= window_end.replace(tzinfo=UTC) or len(ours) == FIRES_COMPARED:
            break
        ours.append(moment)
    assert ours == expected, expr
