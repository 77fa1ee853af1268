"""Parsing cron schedules: the accepted forms, their meaning, and one clear error per bad input."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.schedule import ScheduleError, format_utc, parse_at, parse_cron, uses_key
from tickwheel.schedule.cron import MAX_EXPRESSION_CHARS, is_interval_hour

pytestmark = pytest.mark.unit


def _fires(expr: str, after: str, count: int, tz: str = "UTC") -> list[str]:
    return [format_utc(ms) for ms in parse_cron(expr, tz=tz).next_n(parse_at(after), count)]


# --- forms and meaning ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alias", "resolved"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_aliases_mean_their_vixie_expressions(alias: str, resolved: str) -> None:
    """Each @alias (any case) stands for its Vixie cron expression, unhashed even with a key."""
    assert parse_cron(alias, key="acme/job").resolved == resolved


def test_six_fields_put_seconds_first() -> None:
    """With six fields the first is seconds (Quartz/Spring/Temporal order)."""
    assert _fires("30 0 12 * * *", "2026-01-01T00:00:00Z", 2) == [
        "2026-01-01T12:00:30Z",
        "2026-01-02T12:00:30Z",
    ]


def test_month_and_weekday_names() -> None:
    """Month and weekday names, in any case, work in lists and ranges."""
    assert _fires("0 9 * jan,JUL Mon-Wed", "2026-06-30T12:00:00Z", 3) == [
        "2026-07-01T09:00:00Z",
        "2026-07-06T09:00:00Z",
        "2026-07-07T09:00:00Z",
    ]


def test_last_day_of_month() -> None:
    """L in day-of-month is the month's last day, leap years included."""
    assert _fires("0 0 L * *", "2028-01-31T12:00:00Z", 3) == [
        "2028-02-29T00:00:00Z",
        "2028-03-31T00:00:00Z",
        "2028-04-30T00:00:00Z",
    ]


def test_both_day_fields_restricted_match_either() -> None:
    """Vixie OR: '13 * FRI' fires on the 13th and on every Friday."""
    assert _fires("0 0 13 * FRI", "2026-02-01T00:00:00Z", 4) == [
        "2026-02-06T00:00:00Z",
        "2026-02-13T00:00:00Z",
        "2026-02-20T00:00:00Z",
        "2026-02-27T00:00:00Z",
    ]


def test_one_day_field_unrestricted_leaves_the_other_alone() -> None:
    """With day-of-month '*', only the weekday restricts: 'MON' is every Monday."""
    assert _fires("0 0 * * MON", "2026-02-01T00:00:00Z", 2) == [
        "2026-02-02T00:00:00Z",
        "2026-02-09T00:00:00Z",
    ]


def test_day_of_week_seven_is_sunday() -> None:
    """Both 0 and 7 name Sunday."""
    assert _fires("0 0 * * 7", "2026-02-01T00:00:01Z", 1) == ["2026-02-08T00:00:00Z"]


def test_expression_is_read_in_the_zone_and_returned_in_utc() -> None:
    """09:00 in Tokyo (UTC+9, no DST) is 00:00Z."""
    assert _fires("0 9 * * *", "2026-03-01T00:00:00Z", 1, tz="Asia/Tokyo") == [
        "2026-03-02T00:00:00Z"
    ]


@pytest.mark.parametrize(
    ("hour", "interval"),
    [
        ("*", True),
        ("*/2", True),
        ("*/5", True),
        ("H/6", True),
        ("3", False),
        ("1-5", False),
        ("0-23", False),
        ("0,12", False),
        ("H", False),
        ("H(0-5)", False),
        ("1/2", False),
    ],
)
def test_interval_style_is_decided_by_how_the_hour_is_written(hour: str, interval: bool) -> None:
    """Only `*`, `*/n` and `H/n` in the hour field make a schedule interval-style."""
    assert is_interval_hour(hour) is interval
    assert parse_cron(f"0 {hour} * * *", key="acme/j").interval is interval


def test_hourly_alias_and_seconds_schedules_are_interval_style() -> None:
    """@hourly (hour `*`) and a seconds schedule with hour `*` follow elapsed time."""
    assert parse_cron("@hourly").interval
    assert parse_cron("*/10 * * * * *").interval
    assert not parse_cron("@daily").interval


def test_surrounding_blanks_and_tabs_are_ignored() -> None:
    """Leading/trailing blanks and tab separators are accepted."""
    assert parse_cron("  0\t9 * * *  ").resolved == "0 9 * * *"


def test_evaluation_key_ignores_policies_of_interval_schedules() -> None:
    """Interval-style schedules with different DST policies compute the same and share a key."""
    a = parse_cron("*/5 * * * *", tz="Europe/Berlin", dst_gap="skip", dst_overlap="both")
    b = parse_cron("*/5 * * * *", tz="Europe/Berlin")
    c = parse_cron("5 2 * * *", tz="Europe/Berlin", dst_gap="skip")
    d = parse_cron("5 2 * * *", tz="Europe/Berlin")
    assert a.evaluation_key == b.evaluation_key
    assert c.evaluation_key != d.evaluation_key


def test_uses_key_only_for_hash_items() -> None:
    """uses_key is true exactly when some field item is an H form (not THU, not @hourly)."""
    assert uses_key("H 9 * * *")
    assert uses_key("0 h(0-5) * * *")
    assert not uses_key("0 9 * * THU")
    assert not uses_key("@hourly")
    assert not uses_key("not a schedule")


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("0 25 * * *", "the hour field '25' is not valid; allowed: 0-23"),
        ("61 * * * *", "the minute field '61' is not valid; allowed: 0-59"),
        ("0 0 32 * *", "the day-of-month field '32' is not valid; allowed: 1-31, L"),
        ("0 0 * 13 *", "the month field '13' is not valid; allowed: 1-12 or JAN-DEC"),
        ("0 0 * * 8", "the day-of-week field '8' is not valid; allowed: 0-7 or SUN-SAT"),
        ("0 0 * FOO *", "the month field 'FOO' is not valid"),
        ("*/0 * * * *", "the minute field '*/0' is not valid"),
        ("60 0 0 * * *", "the second field '60' is not valid; allowed: 0-59"),
        ("0 0 ? ? ?", "the month field '?' is not valid"),
    ],
)
def test_bad_field_is_named_with_its_allowed_form(expr: str, fragment: str) -> None:
    """A bad field gives ScheduleError('schedule') naming the field and what it allows."""
    with pytest.raises(ScheduleError, match=r"^schedule ") as raised:
        parse_cron(expr)
    assert raised.value.field == "schedule"
    assert fragment in raised.value.message


@pytest.mark.parametrize("expr", ["", "   ", "* * * *", "0 0 0 1 1 * 2026", "1 2 3 4 5 6 7 8"])
def test_wrong_field_count_names_the_expected_form(expr: str) -> None:
    """Anything but 5 or 6 fields (the 7-field year form too) is rejected with the form."""
    with pytest.raises(ScheduleError, match=r"expected 5 fields .* 6 with seconds first"):
        parse_cron(expr)


def test_unknown_alias_lists_the_aliases() -> None:
    """An unknown @alias is rejected with the list of known ones."""
    with pytest.raises(ScheduleError, match=r"@fortnightly.*@yearly.*@hourly"):
        parse_cron("@fortnightly")


def test_random_items_are_rejected() -> None:
    """croniter's R (random) would change per evaluation, so it is refused in favour of H."""
    with pytest.raises(ScheduleError, match=r"random.*use H"):
        parse_cron("R * * * *")


def test_never_matching_expression_is_rejected() -> None:
    """An expression that names no real date (30 February) is rejected at parse time."""
    with pytest.raises(ScheduleError, match=r"matches no date"):
        parse_cron("0 0 30 2 *")


@pytest.mark.parametrize("expr", [None, 42, ["0", "0", "*", "*", "*"]])
def test_non_string_expression_is_rejected(expr: object) -> None:
    """A schedule that is not a string is a ScheduleError, not a TypeError."""
    with pytest.raises(ScheduleError, match=r"schedule must be a string"):
        parse_cron(expr)  # type: ignore[arg-type]


def test_overlong_expression_is_rejected() -> None:
    """Expressions longer than MAX_EXPRESSION_CHARS are refused before parsing."""
    with pytest.raises(ScheduleError, match=r"longer than"):
        parse_cron("0," * MAX_EXPRESSION_CHARS + "0 * * * *")


@pytest.mark.parametrize(
    "tz", ["Mars/Base", "localtime", "../../etc/passwd", "", "europe/berlin", None, 1]
)
def test_bad_zone_names_the_timezone_field(tz: object) -> None:
    """Anything but an IANA zone name is ScheduleError('timezone') with an example."""
    with pytest.raises(ScheduleError, match=r"timezone .*Europe/Berlin") as raised:
        parse_cron("0 0 * * *", tz=tz)  # type: ignore[arg-type]
    assert raised.value.field == "timezone"


@pytest.mark.parametrize(
    ("kwargs", "field", "allowed"),
    [
        ({"dst_gap": "forward"}, "dst.gap", "shift, skip"),
        ({"dst_overlap": "twice"}, "dst.overlap", "first, last, both"),
        ({"dst_gap": None}, "dst.gap", "shift, skip"),
    ],
)
def test_bad_dst_policy_names_field_and_allowed_values(
    kwargs: dict[str, str], field: str, allowed: str
) -> None:
    """An unknown DST policy is ScheduleError naming dst.gap/dst.overlap and the choices."""
    with pytest.raises(ScheduleError, match=rf"^{field} must be one of {allowed}") as raised:
        parse_cron("0 2 * * *", **kwargs)
    assert raised.value.field == field


def test_schedule_error_is_a_value_error_that_pickles_with_its_field() -> None:
    """ScheduleError is a ValueError and survives pickling with field and message."""
    error = ScheduleError("timezone", "timezone 'X' is not an IANA zone name.")
    assert isinstance(error, ValueError)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.field, copy.message, str(copy)) == (error.field, error.message, str(error))


CRONISH = st.text(alphabet="0123456789*/,-?LW#HR@ \tabcdefjmnorstuwy()", max_size=40)


@settings(max_examples=400, deadline=None)
@given(expr=st.one_of(CRONISH, st.text(max_size=30)))
def test_any_text_parses_or_raises_schedule_error(expr: str) -> None:
    """Arbitrary text never escapes as another exception type: every refusal is ScheduleError."""
    try:
        schedule = parse_cron(expr, key="acme/fuzz")
    except ScheduleError as exc:
        assert exc.field == "schedule"
        assert "\n" not in exc.message
    else:
        assert schedule.next_after(parse_at("2026-01-01T00:00:00Z")) is not None
