"""Reading the fields of a cron expression, as crontab(5) and Vixie cron / cronie read them.

The input is the expression's fields after `H` resolution (`cron.py`): plain crontab syntax plus
the Quartz extensions `?`, `L`, `W` and `#`. The output is a `CronFields`: sorted value sets for
the second, minute, hour and month, and a `DayRule` that lists the matching days of any month.

Each field is a comma-separated list of items:

    *            every value of the field
    a            one value (numbers, or JAN-DEC / SUN-SAT names in any case)
    a-b          every value from a to b; a range of one value (`MON-MON`, `2-2`) is that value,
                 and a range written backwards wraps around the field (`22-2` is 22,23,0,1,2)
    */n  a-b/n   every n-th value of the field / of the range, starting at its first value
    a/n          every n-th value from a to the end of the field

Day of week counts 0-7 with both 0 and 7 for Sunday. The day fields add:

    day of month   L (last day), LW (last weekday), nW (the weekday nearest day n, never
                   leaving the month; no fire in a month shorter than n days), ? (= *)
    day of week    d#k (the k-th weekday d of the month, k = 1..5), dL or Ld (the last weekday d
                   of the month), ? (= *)

**The day-field rule** (Vixie cron, cronie, and crontab(5)'s note on it): the two day fields are
decided from each field's own text. If either field begins with `*` (or is `?`), a day must
match both — so `0 9 */2 * 1-5` fires at 09:00 on odd-numbered days that are weekdays. Otherwise
both are restricted and a day matching either fires — so `0 0 1,*/15 * 0-6` fires every day,
since neither field begins with `*` and `0-6` matches every day. `#`, `L` and `W` items are
ordinary items of their field under this rule: `0 0 1 * MON#1` fires on the 1st and on the first
Monday of every month, `0 0 * * MON#1` only on first Mondays.

Anything else is refused with `FieldError`, naming the field by position; `cron.py` turns that
into one sentence naming the field as the user wrote it.
"""

from __future__ import annotations

import re
from calendar import monthrange
from dataclasses import dataclass

STEPS = "lists a,b, ranges a-b, steps */n or a-b/n, or H forms"

_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1
    )
}
_WEEKDAY_NAMES = {
    name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
}
_NUMBER = re.compile(r"^[0-9]+$", re.ASCII)
_ITEM = re.compile(r"^(?P<base>[^/]+)(?:/(?P<step>[^/]*))?$")
_NEAREST = re.compile(r"^(?:([0-9]+)[wW]|[wW]([0-9]+))$", re.ASCII)
_NTH = re.compile(r"^(?P<day>[^#]+)#(?P<nth>[^#]*)$")
_LAST_WEEKDAY = re.compile(r"^(?:(?P<before>[^lL]+)[lL]|[lL](?P<after>[^lL]+))$")
_ALL_DAYS = frozenset(range(1, 32))
_ALL_WEEKDAYS = frozenset(range(7))
WEEKS_IN_MONTH_MAX = 5  # a weekday occurs 4 or 5 times in a month


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One cron field: its name in messages, its bounds, and the range `H` draws from."""

    name: str
    low: int
    high: int
    hash_low: int
    hash_high: int
    allowed: str


SECOND = FieldSpec("second", 0, 59, 0, 59, f"0-59, *, {STEPS}")
MINUTE = FieldSpec("minute", 0, 59, 0, 59, f"0-59, *, {STEPS}")
HOUR = FieldSpec("hour", 0, 23, 0, 23, f"0-23, *, {STEPS}")
# H in day-of-month stays within 1-28 so that the job fires in every month (as in Jenkins).
DAY_OF_MONTH = FieldSpec("day-of-month", 1, 31, 1, 28, f"1-31, L, LW, nW, ?, *, {STEPS}")
MONTH = FieldSpec("month", 1, 12, 1, 12, f"1-12 or JAN-DEC, *, {STEPS}")
# 0 and 7 are both Sunday; H draws from 0-6 so that every weekday is equally likely.
DAY_OF_WEEK = FieldSpec(
    "day-of-week", 0, 7, 0, 6, f"0-7 or SUN-SAT, d#k (MON#1), dL (5L), ?, *, {STEPS}"
)

FIELDS_5 = (MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK)
FIELDS_6 = (SECOND, MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK)


class FieldError(Exception):
    """A field that is not valid: `index` is its position, `reason` a sentence or None.

    With no reason the caller names the field and its allowed forms; a reason explains a form
    that looks meaningful but is not supported (`MON-FRI#2`).
    """

    def __init__(self, index: int, reason: str | None = None) -> None:
        super().__init__(index, reason)
        self.index = index
        self.reason = reason


class _Invalid(Exception):
    """An item is not valid; carries an optional reason up to the field."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class DayRule:
    """Which days of a month fire: the two day fields and how they combine.

    Weekdays are numbered as cron does, Sunday = 0 … Saturday = 6.
    """

    dom_star: bool  # day-of-month's text begins with `*` or is `?`: the fields are ANDed
    dom_all: bool  # day-of-month matches every day (`*`, `?`, `1-31`, …)
    dom: frozenset[int]  # plain days 1-31
    dom_last: bool  # L
    dom_last_weekday: bool  # LW
    dom_nearest: tuple[int, ...]  # nW: the weekday nearest day n
    dow_star: bool  # day-of-week's text begins with `*` or is `?`: the fields are ANDed
    dow_all: bool  # day-of-week matches every day (`*`, `?`, `0-6`, …)
    dow: frozenset[int]  # plain weekdays
    dow_nth: frozenset[tuple[int, int]]  # (weekday, k): the k-th such weekday of the month
    dow_last: frozenset[int]  # weekdays whose last occurrence in the month fires

    def days_of(self, year: int, month: int) -> tuple[int, ...]:
        """The days of `month` in `year` that fire, ascending."""
        monday_first, length = monthrange(year, month)
        both = self.dom_star or self.dow_star  # the day-field rule: `*` first means AND
        if (self.dom_all and self.dow_all) or (not both and (self.dom_all or self.dow_all)):
            return tuple(range(1, length + 1))
        # cron numbers weekdays from Sunday = 0; calendar from Monday = 0.
        first_weekday = (monday_first + 1) % 7
        if self.dow_all:  # ANDed with every day: the day-of-month days alone
            return tuple(sorted(self._dom_days(length, first_weekday)))
        if self.dom_all:
            if not self.dow_nth and not self.dow_last:
                weekdays = self.dow
                return tuple(
                    d for d in range(1, length + 1) if (first_weekday + d - 1) % 7 in weekdays
                )
            return tuple(
                d for d in range(1, length + 1) if self._dow_matches(d, length, first_weekday)
            )
        dom_days = self._dom_days(length, first_weekday)
        found = []
        for day in range(1, length + 1):
            dom_ok = day in dom_days
            dow_ok = self._dow_matches(day, length, first_weekday)
            if (dom_ok and dow_ok) if both else (dom_ok or dow_ok):
                found.append(day)
        return tuple(found)

    def _dom_days(self, length: int, first_weekday: int) -> set[int]:
        days = {d for d in self.dom if d <= length}
        if self.dom_last:
            days.add(length)
        if self.dom_last_weekday:
            days.add(_nearest_weekday(length, length, first_weekday))
        for target in self.dom_nearest:
            if target <= length:
                days.add(_nearest_weekday(target, length, first_weekday))
        return days

    def _dow_matches(self, day: int, length: int, first_weekday: int) -> bool:
        weekday = (first_weekday + day - 1) % 7
        if weekday in self.dow:
            return True
        if (weekday, (day - 1) // 7 + 1) in self.dow_nth:
            return True
        return weekday in self.dow_last and day + 7 > length


def _nearest_weekday(target: int, length: int, first_weekday: int) -> int:
    """The Monday-to-Friday day nearest `target` within the month (Quartz's `W`)."""
    weekday = (first_weekday + target - 1) % 7
    if weekday == 6:  # Saturday: the Friday before, or the Monday after on the 1st
        return target - 1 if target > 1 else target + 2
    if weekday == 0:  # Sunday: the Monday after, or the Friday before on the last day
        return target + 1 if target < length else target - 2
    return target


@dataclass(frozen=True, slots=True)
class CronFields:
    """An expression's fields as value sets (5-field expressions fire at second 0)."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    days: DayRule


def parse_fields(fields: list[str]) -> CronFields:
    """The meaning of 5 or 6 (seconds first) resolved fields; raises FieldError."""
    offset = len(fields) - 5  # 1 when a seconds field comes first
    specs = FIELDS_6 if offset else FIELDS_5
    seconds: tuple[int, ...] = (0,)
    if offset:
        seconds = _plain_field(fields[0], SECOND, 0)
    minutes = _plain_field(fields[offset], specs[offset], offset)
    hours = _plain_field(fields[offset + 1], specs[offset + 1], offset + 1)
    dom_text, month_text, dow_text = fields[offset + 2 : offset + 5]
    dom = _day_of_month(dom_text, offset + 2)
    months = _plain_field(month_text, MONTH, offset + 3)
    dow = _day_of_week(dow_text, offset + 4)
    return CronFields(
        seconds=seconds,
        minutes=minutes,
        hours=hours,
        months=months,
        days=DayRule(
            dom_star=_is_star(dom_text),
            dom_all=dom.values >= _ALL_DAYS,
            dom=frozenset(dom.values),
            dom_last=dom.last,
            dom_last_weekday=dom.last_weekday,
            dom_nearest=tuple(sorted(dom.nearest)),
            dow_star=_is_star(dow_text),
            dow_all={v % 7 for v in dow.values} >= _ALL_WEEKDAYS,
            dow=frozenset(v % 7 for v in dow.values),
            dow_nth=frozenset(dow.nth),
            dow_last=frozenset(dow.last),
        ),
    )


def _is_star(text: str) -> bool:
    """Whether a day field counts as unrestricted for the day-field rule."""
    return text.startswith("*") or text == "?"


def _plain_field(text: str, spec: FieldSpec, index: int) -> tuple[int, ...]:
    try:
        values: set[int] = set()
        for item in text.split(","):
            values.update(_item_values(item, spec))
    except _Invalid as exc:
        raise FieldError(index, exc.reason) from None
    return tuple(sorted(values))


@dataclass(slots=True)
class _DomParts:
    values: set[int]
    last: bool
    last_weekday: bool
    nearest: set[int]


@dataclass(slots=True)
class _DowParts:
    values: set[int]
    nth: set[tuple[int, int]]
    last: set[int]


def _day_of_month(text: str, index: int) -> _DomParts:
    parts = _DomParts(set(), False, False, set())
    if text == "?":
        return _DomParts(set(range(1, 32)), False, False, set())
    try:
        for item in text.split(","):
            upper = item.upper()
            if upper == "L":
                parts.last = True
            elif upper == "LW":
                parts.last_weekday = True
            elif (nearest := _NEAREST.match(item)) is not None:
                day = int(nearest.group(1) or nearest.group(2))
                if not DAY_OF_MONTH.low <= day <= DAY_OF_MONTH.high:
                    raise _Invalid(f"'W' needs a day 1-31, as in 15W; got {item!r}")
                parts.nearest.add(day)
            elif "?" in item:
                raise _Invalid("'?' stands alone, as the whole field")
            elif "L" in upper or "W" in upper:
                raise _Invalid(
                    f"{item!r} mixes L or W into another form; L, LW and nW (15W) stand alone "
                    "as items"
                )
            else:
                parts.values.update(_item_values(item, DAY_OF_MONTH))
    except _Invalid as exc:
        raise FieldError(index, exc.reason) from None
    return parts


def _day_of_week(text: str, index: int) -> _DowParts:
    parts = _DowParts(set(), set(), set())
    if text == "?":
        return _DowParts(set(range(7)), set(), set())
    try:
        for item in text.split(","):
            if (nth := _NTH.match(item)) is not None:
                weekday = _one_weekday(nth.group("day"), item, "'#'")
                count = nth.group("nth")
                if not _NUMBER.match(count) or not 1 <= int(count) <= WEEKS_IN_MONTH_MAX:
                    raise _Invalid(
                        f"'#' needs one weekday and a week 1-5, as in MON#1; got {item!r}"
                    )
                parts.nth.add((weekday, int(count)))
            elif (last := _LAST_WEEKDAY.match(item)) is not None:
                # No weekday name contains an L, so an L here is always this form.
                weekday = _one_weekday(last.group("before") or last.group("after"), item, "'L'")
                parts.last.add(weekday)
            elif item.upper() == "L":
                raise _Invalid(
                    "'L' in day-of-week needs a weekday: 5L (or FRIL) is the last Friday "
                    "of the month"
                )
            elif "?" in item:
                raise _Invalid("'?' stands alone, as the whole field")
            elif "#" in item:
                raise _Invalid(None)
            else:
                parts.values.update(_item_values(item, DAY_OF_WEEK))
    except _Invalid as exc:
        raise FieldError(index, exc.reason) from None
    return parts


def _one_weekday(text: str, item: str, form: str) -> int:
    """The weekday (0-6) `text` names, for a `#` or `L` item that allows only one."""
    try:
        value = _value(text, DAY_OF_WEEK)
    except _Invalid:
        raise _Invalid(
            f"{form} takes a single weekday (0-7 or SUN-SAT), not a list, range or step; "
            f"got {item!r}"
        ) from None
    return value % 7


def _value(text: str, spec: FieldSpec) -> int:
    if _NUMBER.match(text):
        value = int(text)
    elif spec is MONTH and text.lower() in _MONTH_NAMES:
        value = _MONTH_NAMES[text.lower()]
    elif spec is DAY_OF_WEEK and text.lower() in _WEEKDAY_NAMES:
        value = _WEEKDAY_NAMES[text.lower()]
    else:
        raise _Invalid(None)
    if not spec.low <= value <= spec.high:
        raise _Invalid(None)
    return value


def _item_values(item: str, spec: FieldSpec) -> list[int]:
    """The values one item of a plain field stands for."""
    match = _ITEM.match(item)
    if match is None:
        raise _Invalid(None)
    base, step_text = match.group("base"), match.group("step")
    step = 1
    if step_text is not None:
        if not _NUMBER.match(step_text) or int(step_text) < 1:
            raise _Invalid(None)
        step = int(step_text)
    low, high = spec.low, spec.high
    if base == "*":
        first, last = low, high
    elif "-" in base:
        first_text, _, last_text = base.partition("-")
        first, last = _value(first_text, spec), _value(last_text, spec)
    else:
        first = _value(base, spec)
        last = high if step_text is not None else first
    if first <= last:
        return list(range(first, last + 1, step))
    # A range written backwards wraps around the field: 22-2 is 22,23,0,1,2. Day-of-week wraps
    # over 0-6, so that Sunday (0 or 7) is counted once when stepping through it.
    if spec is DAY_OF_WEEK:
        high, first, last = 6, first % 7, last % 7
        if first <= last:
            return list(range(first, last + 1, step))
    cycle = [*range(first, high + 1), *range(low, last + 1)]
    return cycle[::step]
