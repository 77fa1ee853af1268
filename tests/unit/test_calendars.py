"""Exclusion calendars as pure rules (issue 50, D-286): a calendar is a predicate over instants
read in its zone; a claim records an occurrence it excludes as skipped with the calendar and
rule, and runs every other one — across DST changes; the preview and `cron next` say the same.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.domain import RunStatus
from tickwheel.registry_api.calendars import check_calendar
from tickwheel.registry_api.document import JobValidationError, Limits, parse_document, validate_job
from tickwheel.schedule import ScheduleCache, ScheduleError
from tickwheel.schedule.calendars import (
    MAX_CALENDAR_DATES,
    WEEKDAY_NAMES,
    Calendar,
    excluded_by,
    parse_calendar,
)
from tickwheel.schedule.cli import cron
from tickwheel.shards.calendars import CalendarBook
from tickwheel.shards.plan import JobEntry, due_at, plan_claims

pytestmark = pytest.mark.unit

ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "UTC"]
SPAN = (1_767_225_600_000, 1_830_297_600_000)  # 2026 and 2027: every zone above changes clocks


def _ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).timestamp() * 1000)


def test_each_rule_names_itself() -> None:
    calendar = parse_calendar(
        "h",
        {
            "timezone": "Europe/Berlin",
            "dates": ["2026-12-25"],
            "weekdays": ["sat"],
            "daily": [{"start": "22:00", "end": "06:00"}],
            "cron": ["* 12 * * *", "30 15 10 * * *"],
        },
    )
    assert calendar.exclusion(_ms("2026-12-25T10:00:00+01:00")) == (
        "calendar h: date 2026-12-25 (Europe/Berlin)"
    )
    assert calendar.exclusion(_ms("2026-12-26T10:00:00+01:00")) == (
        "calendar h: weekday sat (Europe/Berlin)"
    )
    assert calendar.exclusion(_ms("2026-12-24T05:59:59+01:00")) == (
        "calendar h: daily 22:00-06:00 (Europe/Berlin)"
    )
    assert calendar.exclusion(_ms("2026-12-24T06:00:00+01:00")) is None  # the end is exclusive
    # a 5-field expression excludes the whole minute, a 6-field one its second
    assert calendar.exclusion(_ms("2026-12-24T12:59:59+01:00")) == (
        "calendar h: cron '* 12 * * *' (Europe/Berlin)"
    )
    assert calendar.exclusion(_ms("2026-12-24T10:15:30+01:00")) == (
        "calendar h: cron '30 15 10 * * *' (Europe/Berlin)"
    )
    assert calendar.exclusion(_ms("2026-12-24T10:15:31+01:00")) is None
    assert calendar.exclusion(_ms("2026-12-24T13:00:00+01:00")) is None


def test_dates_are_read_in_the_calendars_zone() -> None:
    """Christmas in Auckland starts eleven hours before it does in UTC"""
    calendar = parse_calendar("nz", {"timezone": "Pacific/Auckland", "dates": ["2026-12-25"]})
    assert calendar.exclusion(_ms("2026-12-24T11:00:00Z")) is not None
    assert calendar.exclusion(_ms("2026-12-24T10:59:59Z")) is None


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"dates": ["2026-13-01"]}, "dates.0"),
        ({"dates": ["26-12-01"]}, "dates.0"),
        ({"dates": ["2026-01-01"] * (MAX_CALENDAR_DATES + 1)}, "dates"),
        ({"dates": "2026-01-01"}, "dates"),
        ({"weekdays": ["Sun"]}, "weekdays.0"),
        ({"daily": [{"start": "9:00", "end": "10:00"}]}, "daily.0.start"),
        ({"daily": [{"start": "24:00", "end": "10:00"}]}, "daily.0.start"),
        ({"daily": [{"start": "10:00", "end": "10:00"}]}, "daily.0.end"),
        ({"daily": ["10:00-11:00"]}, "daily.0"),
        ({"cron": ["H * * * *"]}, "cron.0"),
        ({"cron": ["61 * * * *"]}, "cron.0"),
        ({"timezone": "Europe/Springfield"}, "timezone"),
    ],
)
def test_bad_input_names_the_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_calendar("c", doc)
    assert caught.value.field == field


def test_a_whole_day_range_excludes_every_second() -> None:
    calendar = parse_calendar("all", {"daily": [{"start": "00:00", "end": "24:00"}]})
    assert calendar.exclusion(_ms("2026-03-01T23:59:59Z")) is not None
    assert calendar.exclusion(_ms("2026-03-01T00:00:00Z")) is not None


def _oracle(zone: str, rules: dict[str, Any], ms: int) -> bool:
    """Whether `rules` exclude `ms`, computed the plain way (aware datetimes)."""
    local = dt.datetime.fromtimestamp(ms / 1000, dt.UTC).astimezone(ZoneInfo(zone))
    if local.date().isoformat() in rules["dates"]:
        return True
    if WEEKDAY_NAMES[local.weekday()] in rules["weekdays"]:
        return True
    second = local.hour * 3600 + local.minute * 60 + local.second
    for start, end in rules["hours"]:
        lo, hi = start * 3600, end * 3600
        if (lo <= second < hi) if lo < hi else (second >= lo or second < hi):
            return True
    return False


@settings(max_examples=200, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    at=st.integers(*SPAN).map(lambda ms: ms - ms % 60_000),
    weekdays=st.lists(st.sampled_from(WEEKDAY_NAMES), max_size=2, unique=True),
    hours=st.lists(st.tuples(st.integers(0, 23), st.integers(0, 23)), max_size=2).map(
        lambda pairs: [(a, b) for a, b in pairs if a != b]
    ),
    near_days=st.lists(st.integers(-2, 2), max_size=2),
)
def test_a_claim_skips_exactly_the_excluded_occurrences_across_dst(
    zone: str, at: int, weekdays: list[str], hours: list[tuple[int, int]], near_days: list[int]
) -> None:
    """for any instant of an every-minute job in a zone with DST changes: a claim records it
    skipped naming the calendar if and only if the plain computation says it is excluded, and
    runs it otherwise"""
    local_day = dt.datetime.fromtimestamp(at / 1000, ZoneInfo(zone)).date()
    dates = [(local_day + dt.timedelta(days=d)).isoformat() for d in near_days]
    rules = {"dates": dates, "weekdays": weekdays, "hours": hours}
    doc = {
        "timezone": zone,
        "dates": dates,
        "weekdays": weekdays,
        "daily": [{"start": f"{a:02d}:00", "end": f"{b:02d}:00"} for a, b in hours],
    }
    book = CalendarBook()
    book.apply([{"tenant": "acme", "name": "c", "version": 1, "document": _json(doc)}])
    entry = _entry(at, ("c",), zone)
    batch = plan_claims([entry], at, ScheduleCache(), calendars=book)
    assert batch.run_ms == [at]
    excluded = _oracle(zone, rules, at)
    assert (batch.run_status[0] == RunStatus.SKIPPED) == excluded
    if excluded:
        assert (batch.run_reason[0] or "").startswith("calendar c: ")
    assert batch.next_ms[0] is not None and batch.next_ms[0] > at  # the schedule goes on


def _json(doc: dict[str, Any]) -> str:
    import orjson

    return orjson.dumps(doc).decode()


def _entry(at: int, calendars: tuple[str, ...] | None, zone: str = "UTC", **rules: Any) -> JobEntry:
    values: dict[str, Any] = {
        "tenant": "acme", "job_id": "j", "version": 1, "next_ms": at, "kind": "cron",
        "schedule": "* * * * *", "timezone": zone, "dst_gap": "shift", "dst_overlap": "first",
        "misfire_policy": "run_all", "grace_ms": 60_000, "max_catchup": 10,
        "overlap_policy": "allow", "calendars": calendars,
    }  # fmt: skip
    values.update(rules)
    return JobEntry.of(**values)


def _book(*calendars: tuple[str, str, int, dict[str, Any] | None]) -> CalendarBook:
    book = CalendarBook()
    book.apply(
        [
            {"tenant": t, "name": n, "version": v, "document": None if d is None else _json(d)}
            for t, n, v, d in calendars
        ]
    )
    return book


MIN = 60_000
T0 = _ms("2027-03-01T10:00:00Z")


def test_excluded_occurrences_neither_overlap_nor_count_toward_max_runs() -> None:
    """a catch-up of four minutes whose first and third a calendar excludes, for a job with
    overlap skip and max_runs 2: the excluded two are skipped naming the calendar, the second
    minute takes the one run the overlap policy allows (an excluded occurrence did not take
    it), the fourth is skipped as an overlap, and one run is counted"""
    book = _book(("acme", "even", 1, {"cron": ["0,2 * * * *"]}))
    entry = _entry(T0, ("even",), max_runs=2, overlap_policy="skip")
    batch = plan_claims([entry], T0 + 3 * MIN, ScheduleCache(), {("acme", "j"): (0, 0)},
                        {("acme", "j"): (0, 0)}, calendars=book)  # fmt: skip
    rows = sorted(zip(batch.run_ms, batch.run_status, batch.run_reason, strict=True))
    assert [(ms - T0) // MIN for ms, _, _ in rows] == [0, 1, 2, 3]
    assert [(s, r) for _, s, r in rows] == [
        ("skipped", "calendar even: cron '0,2 * * * *' (UTC)"),
        ("pending", None),
        ("skipped", "calendar even: cron '0,2 * * * *' (UTC)"),
        ("skipped", "overlap"),
    ]
    assert batch.counted[("acme", "j")][0] == 1
    assert batch.complete == [False]


HOUR = 3_600_000
SATURDAY = _ms("2027-03-06T00:00:00Z")
MONDAY_0930 = _ms("2027-03-08T09:30:00Z")


@pytest.mark.parametrize(
    ("policy", "max_catchup", "ran_hours"),
    [("run_once", 10, [48]), ("run_all", 3, [48, 49, 50]), ("skip", 10, [])],
)
def test_the_misfire_policy_chooses_among_the_occurrences_no_calendar_excludes(
    policy: str, max_catchup: int, ran_hours: list[int]
) -> None:
    """an hourly job whose schedulers were down from Saturday 00:00 to Monday 09:30, with a
    weekend calendar: every weekend hour is recorded skipped naming the calendar, and the
    policy picks among Monday's: run_once the oldest, run_all the first max_catchup"""
    book = _book(("acme", "weekend", 1, {"weekdays": ["sat", "sun"]}))
    entry = _entry(SATURDAY, ("weekend",), schedule="0 * * * *", misfire_policy=policy,
                   max_catchup=max_catchup)  # fmt: skip
    batch = plan_claims([entry], MONDAY_0930, ScheduleCache(), calendars=book)
    rows = {(ms - SATURDAY) // HOUR: (st, r) for ms, st, r in
            zip(batch.run_ms, batch.run_status, batch.run_reason, strict=True)}  # fmt: skip
    assert sorted(rows) == list(range(58))  # Saturday 00:00 to Monday 09:00, every hour once
    for hour in range(48):
        day = "sat" if hour < 24 else "sun"
        assert rows[hour] == ("skipped", f"calendar weekend: weekday {day} (UTC)"), hour
    assert [h for h in range(48, 58) if rows[h][0] == "pending"] == ran_hours
    assert all(
        rows[h][1] in ("misfire", "max_catchup") for h in range(48, 58) if h not in ran_hours
    )
    assert batch.next_ms == [SATURDAY + 58 * HOUR]


BERLIN_FALL_BACK = "2026-10-25"  # 03:00 CEST -> 02:00 CET: 02:00-02:59 happen twice
BERLIN_SPRING = "2026-03-29"  # 02:00 CET -> 03:00 CEST: 02:00-02:59 do not happen


@pytest.mark.parametrize(
    ("rules", "utc", "excluded"),
    [
        # both copies of the repeated hour are 02:xx local
        ({"daily": [{"start": "02:00", "end": "03:00"}]}, "2026-10-25T00:30:00Z", True),
        ({"daily": [{"start": "02:00", "end": "03:00"}]}, "2026-10-25T01:30:00Z", True),
        ({"daily": [{"start": "02:00", "end": "03:00"}]}, "2026-10-25T02:00:00Z", False),
        ({"cron": ["0 30 2 * * *"]}, "2026-10-25T00:30:00Z", True),
        ({"cron": ["0 30 2 * * *"]}, "2026-10-25T01:30:00Z", True),
        ({"cron": ["0 30 2 * * *"]}, "2026-10-25T01:30:01Z", False),
        ({"cron": ["30 2 * * *"]}, "2026-10-25T01:30:59Z", True),
        ({"cron": ["30 2 * * *"]}, "2026-10-25T01:31:00Z", False),
        # the skipped hour: the instants either side are not in it
        ({"daily": [{"start": "02:00", "end": "03:00"}]}, "2026-03-29T00:59:59Z", False),
        ({"daily": [{"start": "02:00", "end": "03:00"}]}, "2026-03-29T01:00:00Z", False),
        ({"dates": [BERLIN_SPRING]}, "2026-03-28T23:00:00Z", True),  # local midnight
        ({"dates": [BERLIN_SPRING]}, "2026-03-28T22:59:59Z", False),
        ({"dates": [BERLIN_FALL_BACK]}, "2026-10-25T22:59:59Z", True),  # a 25-hour day
        ({"dates": [BERLIN_FALL_BACK]}, "2026-10-25T23:00:00Z", False),
    ],
)
def test_rules_at_berlins_clock_changes(rules: dict[str, Any], utc: str, excluded: bool) -> None:
    calendar = parse_calendar("c", {"timezone": "Europe/Berlin", **rules})
    assert (calendar.exclusion(_ms(utc)) is not None) == excluded


MONDAYS = {"weekdays": ["mon"]}


def test_a_row_the_book_cannot_read_excludes_nothing_and_stops_nothing() -> None:
    book = CalendarBook()
    changed = book.apply(
        [
            {"tenant": "acme", "name": "bad", "version": 1, "document": "[]"},
            {
                "tenant": "acme",
                "name": "good",
                "version": 1,
                "document": _json({"weekdays": ["mon"]}),
            },
        ]
    )
    monday = _ms("2027-03-01T10:00:00Z")
    assert changed == 2
    assert book.reason("acme", ["bad"], monday) is None
    assert book.reason("acme", ["good"], monday) is not None
    assert book.knows("acme", ["bad", "good"]) and not book.knows("acme", ["new"])


def test_a_jittered_occurrence_that_would_run_inside_an_exclusion_is_excluded() -> None:
    """an occurrence at 01:59 whose jitter would start it inside 02:00-04:00 is skipped naming
    the range; the same job without jitter runs"""
    book = _book(("acme", "maint", 1, {"daily": [{"start": "02:00", "end": "04:00"}]}))
    at = _ms("2027-03-01T01:59:00Z")
    entry = _entry(at, ("maint",), schedule="59 1 * * *", jitter_ms=3_000_000)
    due = due_at(ScheduleCache(), entry, at)
    assert due >= at + 60_000, "the test needs an offset past 02:00"
    batch = plan_claims([entry], due, ScheduleCache(), calendars=book)
    assert batch.run_status == ["skipped"]
    assert batch.run_reason == ["calendar maint: daily 02:00-04:00 (UTC)"]
    plain = plan_claims([_entry(at, ("maint",), schedule="59 1 * * *")], at, ScheduleCache(),
                        calendars=book)  # fmt: skip
    assert plain.run_status == ["pending"]


def test_the_book_keeps_the_newest_version_and_forgets_deleted_calendars() -> None:
    book = _book(("acme", "c", 2, {"weekdays": ["mon"]}))
    monday = _ms("2027-03-01T10:00:00Z")
    assert book.reason("acme", ["c"], monday) == "calendar c: weekday mon (UTC)"
    assert book.reason("other", ["c"], monday) is None  # calendars are the tenant's
    book.apply([{"tenant": "acme", "name": "c", "version": 1, "document": _json({})}])
    assert book.reason("acme", ["c"], monday) is not None  # an older row changes nothing
    book.apply([{"tenant": "acme", "name": "c", "version": 3, "document": None}])
    assert book.reason("acme", ["c"], monday) is None and len(book) == 0
    # a job naming a calendar the book does not hold runs
    batch = plan_claims([_entry(monday, ("c", "gone"))], monday, ScheduleCache(), calendars=book)
    assert batch.run_status == ["pending"]


def test_jobs_without_calendars_never_ask_the_book() -> None:
    class Refusing:
        def reason(self, tenant: str, names: Any, ms: int) -> str | None:
            raise AssertionError("asked")

    batch = plan_claims([_entry(T0, None)], T0, ScheduleCache(), calendars=Refusing())
    assert batch.run_status == ["pending"]


def test_a_job_document_names_calendars_on_cron_schedules_only() -> None:
    base = {"id": "j", "handler": "h.run", "calendars": ["a", "b"]}
    spec = validate_job("acme", parse_document({**base, "schedule": "0 9 * * *"}), Limits(), T0)
    assert spec.document.calendars == ["a", "b"]
    with pytest.raises(JobValidationError) as caught:
        validate_job("acme", parse_document({**base, "at": "2031-01-01T00:00:00Z"}), Limits(), T0)
    assert {p.field for p in caught.value.problems} == {"calendars"}
    for bad in (["a", "a"], [".hidden"], [f"c{i}" for i in range(9)]):
        with pytest.raises(JobValidationError):
            parse_document({**base, "schedule": "0 9 * * *", "calendars": bad})


def test_cron_next_marks_what_a_calendar_excludes(tmp_path: Any) -> None:
    path = tmp_path / "holidays.json"
    path.write_text('{"timezone": "Europe/Berlin", "dates": ["2026-12-25"]}')
    args = ["next", "0 9 * * *", "--tz", "Europe/Berlin", "--after", "2026-12-24T00:00:00Z"]
    result = CliRunner().invoke(cron, [*args, "--count", "2", "--calendar", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "2026-12-24T08:00:00Z",
        "2026-12-25T08:00:00Z  excluded: calendar holidays: date 2026-12-25 (Europe/Berlin)",
    ]
    path.write_text('{"dates": ["2026-02-30"]}')
    bad = CliRunner().invoke(cron, [*args, "--calendar", str(path)])
    assert bad.exit_code == 2 and "--calendar" in bad.output and "dates.0" in bad.output


def test_excluded_by_tries_each_calendar_in_turn() -> None:
    first: Calendar = parse_calendar("a", {"weekdays": ["tue"]})
    second = parse_calendar("b", {"weekdays": ["mon"]})
    monday = _ms("2027-03-01T10:00:00Z")
    assert excluded_by([first, second], monday) == "calendar b: weekday mon (UTC)"
    assert excluded_by([first], monday) is None


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"description": "a\x00b"}, "description"),
        ({"description": "red \x1b[31m"}, "description"),
        ({"dates": ["\ud800"]}, "dates.0"),
        ({"cron": ["0 0 * * *\x00"]}, "cron.0"),
    ],
)
def test_what_the_store_cannot_write_or_a_terminal_show_is_refused(
    doc: dict[str, Any], field: str
) -> None:
    """a NUL or a lone surrogate anywhere, a control character in the description: a 422
    naming the field, never a database error"""
    with pytest.raises(JobValidationError) as caught:
        check_calendar("c", doc)
    assert field in {p.field for p in caught.value.problems}
