"""`tickwheel cron next --explain` and `schedule/explain.py`: per occurrence the UTC instant, the
wall time and offset in the zone, and the DST, H and misfire rules that put it there, named."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.schedule.cli import cron
from tickwheel.schedule.cron import parse_cron
from tickwheel.schedule.explain import (
    MisfireSettings,
    explain_cron,
    explain_once,
    misfire_outlook,
)
from tickwheel.schedule.instants import parse_instant

pytestmark = pytest.mark.unit


def _cli(*args: str) -> str:
    result = CliRunner().invoke(cron, ["next", *args])
    assert (result.exit_code, result.stderr) == (0, "")
    return result.stdout


def test_a_gap_is_explained_as_shifted() -> None:
    """02:30 on Berlin's spring-forward night: the occurrence at 03:00 CEST names dst.gap shift
    and the wall time it came from; the day before and after are plain."""
    out = _cli("30 2 * * *", "--tz", "Europe/Berlin", "--after", "2026-03-27T12:00:00Z",
               "--count", "3", "--now", "2026-03-27T12:00:00Z", "--explain")  # fmt: skip
    assert out == (
        "schedule '30 2 * * *' in Europe/Berlin: fixed-hour, dst.gap shift, dst.overlap first\n"
        "2026-03-28T01:30:00Z  2026-03-28 02:30:00 CET (+01:00)\n"
        "2026-03-29T01:00:00Z  2026-03-29 03:00:00 CEST (+02:00)\n"
        "    dst.gap shift: 02:30 does not exist on 2026-03-29 (the clock jumps from 02:00 to "
        "03:00): shifted 02:30 → 03:00\n"
        "2026-03-30T00:30:00Z  2026-03-30 02:30:00 CEST (+02:00)\n"
        "next due 2026-03-28T01:30:00Z, if claimed now (2026-03-27T12:00:00Z):\n"
        "    misfire.grace_ms: not due yet (13 h 30 min from now): claimed at its instant or "
        "within misfire.grace_ms (60000 ms) after, it runs; later than that, misfire.policy "
        "run_once decides\n"
    )


def test_an_overlap_is_explained_with_the_dropped_copy() -> None:
    """01:30 on New York's fall-back night happens twice: policy first fires in EDT and names
    the EST copy it drops."""
    out = _cli("30 1 * * *", "--tz", "America/New_York", "--after", "2026-11-01T00:00:00Z",
               "--count", "2", "--now", "2026-11-01T00:00:00Z", "--explain")  # fmt: skip
    assert out == (
        "schedule '30 1 * * *' in America/New_York: fixed-hour, dst.gap shift, dst.overlap first\n"
        "2026-11-01T05:30:00Z  2026-11-01 01:30:00 EDT (-04:00)\n"
        "    dst.overlap first: 01:30 happens twice on 2026-11-01 (at UTC-04:00, then at "
        "UTC-05:00): this is the first copy; the second, at 2026-11-01T06:30:00Z, is dropped\n"
        "2026-11-02T06:30:00Z  2026-11-02 01:30:00 EST (-05:00)\n"
        "next due 2026-11-01T05:30:00Z, if claimed now (2026-11-01T00:00:00Z):\n"
        "    misfire.grace_ms: not due yet (5 h 30 min from now): claimed at its instant or "
        "within misfire.grace_ms (60000 ms) after, it runs; later than that, misfire.policy "
        "run_once decides\n"
    )


def test_an_h_schedule_names_the_values_the_key_picked() -> None:
    """`H H(0-5)` with a key: the heading resolves each H item, every occurrence says which of
    its fields came from H, and the overdue first one is told run_once's plan."""
    out = _cli("H H(0-5) * * *", "--key", "acme/nightly", "--tz", "Europe/Berlin",
               "--after", "2026-03-27T12:00:00Z", "--count", "2",
               "--now", "2026-03-28T12:00:00Z", "--explain")  # fmt: skip
    assert out == (
        "schedule 'H H(0-5) * * *' in Europe/Berlin: fixed-hour, dst.gap shift, "
        "dst.overlap first\n"
        "H from key 'acme/nightly': minute 'H' → 15, hour 'H(0-5)' → 0\n"
        "2026-03-27T23:15:00Z  2026-03-28 00:15:00 CET (+01:00)\n"
        "    H: minute 15 is 'H', picked by hashing the key 'acme/nightly'\n"
        "    H: hour 0 is 'H(0-5)', picked by hashing the key 'acme/nightly'\n"
        "2026-03-28T23:15:00Z  2026-03-29 00:15:00 CET (+01:00)\n"
        "    H: minute 15 is 'H', picked by hashing the key 'acme/nightly'\n"
        "    H: hour 0 is 'H(0-5)', picked by hashing the key 'acme/nightly'\n"
        "next due 2026-03-27T23:15:00Z, if claimed now (2026-03-28T12:00:00Z):\n"
        "    misfire.policy run_once: due 12 h 45 min ago, later than misfire.grace_ms "
        "(60000 ms): claimed now, it runs once; the schedule resumes at 2026-03-28T23:15:00Z\n"
    )


def test_json_carries_the_same_explanation_for_tools() -> None:
    """--json: one document with the schedule, each occurrence (instant, wall time, offset,
    abbreviation, reasons with their rule) and the misfire outlook."""
    out = _cli("30 2 * * *", "--tz", "Europe/Berlin", "--after", "2026-03-28T12:00:00Z",
               "--count", "1", "--now", "2026-03-29T05:00:00Z", "--json")  # fmt: skip
    assert orjson.loads(out) == {
        "schedule": "30 2 * * *",
        "resolved": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "style": "fixed-hour",
        "dst": {"gap": "shift", "overlap": "first"},
        "key": None,
        "hashed": [],
        "occurrences": [
            {
                "at": "2026-03-29T01:00:00Z",
                "local": "2026-03-29T03:00:00",
                "offset": "+02:00",
                "abbreviation": "CEST",
                "reasons": [
                    {
                        "rule": "dst.gap shift",
                        "text": "02:30 does not exist on 2026-03-29 (the clock jumps from 02:00 "
                        "to 03:00): shifted 02:30 → 03:00",
                    }
                ],
                "excluded": None,
                "jitter": None,
            }
        ],
        "misfire": {
            "rule": "misfire.policy run_once",
            "text": "due 4 h ago, later than misfire.grace_ms (60000 ms): claimed now, it runs "
            "once; the schedule resumes at 2026-03-30T00:30:00Z",
            "now": "2026-03-29T05:00:00Z",
            "due": "2026-03-29T01:00:00Z",
            "run": ["2026-03-29T01:00:00Z"],
            "skipped": 0,
            "skipped_span": None,
            "next_run_at": "2026-03-30T00:30:00Z",
        },
        "window": None,
        "jitter_ms": None,
    }


def test_the_bare_form_is_unchanged() -> None:
    """Without --explain or --json the output is the UTC instants alone, one per line."""
    out = _cli("30 2 * * *", "--tz", "Europe/Berlin", "--after", "2026-03-27T12:00:00Z",
               "--count", "3")  # fmt: skip
    assert out == "2026-03-28T01:30:00Z\n2026-03-29T01:00:00Z\n2026-03-30T00:30:00Z\n"


def _explain(expr: str, tz: str, after: str, count: int, **policies: str) -> list[list[str]]:
    schedule = parse_cron(expr, tz=tz, **policies)
    after_ms = parse_instant(after, "after")
    preview = explain_cron(
        schedule, schedule.next_n(after_ms, count), after_ms=after_ms, now_ms=after_ms
    )
    return [[f"{r.rule}: {r.text}" for r in o.reasons] for o in preview.occurrences]


def test_a_skipped_gap_is_told_on_the_next_occurrence() -> None:
    """dst.gap skip: the night without a run is named on the occurrence after it."""
    assert _explain("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 1, dst_gap="skip") == [
        [
            "dst.gap skip: before this: 02:30 does not exist on 2026-03-29 (the clock jumps "
            "from 02:00 to 03:00); no run that day"
        ]
    ]


def test_last_and_both_name_their_copies() -> None:
    """dst.overlap last fires the second copy and names the first as dropped; both marks each
    copy and where the other fires."""
    assert _explain(
        "30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 1, dst_overlap="last"
    ) == [
        [
            "dst.overlap last: 02:30 happens twice on 2026-10-25 (at UTC+02:00, then at "
            "UTC+01:00): this is the second copy; the first, at 2026-10-25T00:30:00Z, was dropped"
        ]
    ]
    both = _explain("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 2, dst_overlap="both")
    assert [r[0].split(": this is the ")[1] for r in both] == [
        "first copy; the other, at 2026-10-25T01:30:00Z, fires too",
        "second copy; the other, at 2026-10-25T00:30:00Z, fires too",
    ]


def test_an_interval_schedule_says_it_follows_elapsed_time() -> None:
    """An hour field `*/n` is interval-style: the missing wall times of a gap are named as not
    firing, the DST policies not at all."""
    explained = _explain("*/30 * * * *", "Europe/Berlin", "2026-03-29T00:40:00Z", 1)
    assert explained == [
        [
            "interval: before this: 02:00, 02:30 do not exist on 2026-03-29 (the clock jumps "
            "from 02:00 to 03:00); an interval-style schedule follows elapsed time and does not "
            "fire in them"
        ]
    ]


def test_several_wall_times_of_one_gap_become_one_run() -> None:
    """Every matching wall time of a gap shifts to its end: counted past three, one run."""
    [reasons] = _explain("*/10 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 1)
    assert reasons == [
        "dst.gap shift: 02:00, 02:10, 02:20 and 3 more wall times do not exist on 2026-03-29 "
        "(the clock jumps from 02:00 to 03:00): shifted 02:00 → 03:00, one run for all of them"
    ]


def _outlook(policy: str, due: str, now: str, expr: str = "*/20 * * * *", catchup: int = 10) -> str:
    schedule = parse_cron(expr)
    outlook = misfire_outlook(
        MisfireSettings(policy, 60_000, catchup),
        parse_instant(due, "due"),
        parse_instant(now, "now"),
        schedule.next_after,
    )
    return f"{outlook.rule}: {outlook.text}"


def test_each_misfire_policy_is_told_what_a_claim_now_does() -> None:
    """Within the grace it runs; later, skip skips all, run_once runs one and skips the rest,
    run_all runs max_catchup and skips the rest, each with the count and where it resumes."""
    due, now = "2026-03-28T22:00:00Z", "2026-03-29T00:00:30Z"
    assert _outlook("run_once", "2026-03-29T00:00:00Z", now) == (
        "misfire.grace_ms: due 30 s ago, within misfire.grace_ms (60000 ms): claimed now, it "
        "runs; the schedule resumes at 2026-03-29T00:20:00Z"
    )
    assert _outlook("skip", due, now) == (
        "misfire.policy skip: due 2 h ago, later than misfire.grace_ms (60000 ms): "
        "claimed now, it and every occurrence missed after it are recorded skipped (reason "
        "misfire): 6 occurrences; 1 occurrence within the grace run as usual; the schedule "
        "resumes at 2026-03-29T00:20:00Z"
    )
    assert _outlook("run_once", due, now) == (
        "misfire.policy run_once: due 2 h ago, later than misfire.grace_ms (60000 ms): claimed "
        "now, it runs once, and the occurrences missed after it are recorded skipped (reason "
        "misfire): 5 occurrences; 1 occurrence within the grace run as usual; the schedule "
        "resumes at 2026-03-29T00:20:00Z"
    )
    assert _outlook("run_all", due, now, catchup=2) == (
        "misfire.policy run_all: due 2 h ago, later than misfire.grace_ms (60000 ms): claimed "
        "now, the 2 oldest missed occurrences run, oldest first (misfire.max_catchup 2), and "
        "the rest are recorded skipped (reason max_catchup): 4 occurrences; 1 occurrence "
        "within the grace run as usual; the schedule resumes at 2026-03-29T00:20:00Z"
    )


def test_a_one_off_previews_its_instant_in_its_zone() -> None:
    """A one-off: its instant with the zone's wall time, and the misfire plan of a late claim;
    once run (no instant) nothing."""
    at = parse_instant("2026-07-01T07:00:00Z", "at")
    preview = explain_once(at, "Europe/Berlin", now_ms=at + 3_600_000)
    [occurrence] = preview.occurrences
    assert (occurrence.local, occurrence.offset, occurrence.abbreviation) == (
        "2026-07-01T09:00:00",
        "+02:00",
        "CEST",
    )
    assert preview.misfire is not None
    assert preview.misfire.text.endswith("it runs once; no occurrence follows")
    assert explain_once(None, "UTC", now_ms=at).occurrences == ()


ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "UTC"]
EXPRESSIONS = ["30 2 * * *", "0 1-3 * * *", "*/45 * * * *", "15 0,2 * * SUN", "0 0 * * *"]


@settings(max_examples=60, deadline=None)
@given(
    expr=st.sampled_from(EXPRESSIONS),
    tz=st.sampled_from(ZONES),
    gap=st.sampled_from(["shift", "skip"]),
    overlap=st.sampled_from(["first", "last", "both"]),
    day=st.integers(0, 3 * 365),
)
def test_wall_times_are_the_zone_s_and_every_unmatched_one_is_a_shift(
    expr: str, tz: str, gap: str, overlap: str, day: int
) -> None:
    """For any schedule and start: each occurrence's wall time and offset are the zone's at its
    instant, and one whose wall time the expression does not match is named a dst.gap shift."""
    schedule = parse_cron(expr, tz=tz, dst_gap=gap, dst_overlap=overlap)
    after_ms = parse_instant("2025-01-01T00:00:00Z", "after") + day * 86_400_000
    preview = explain_cron(
        schedule, schedule.next_n(after_ms, 8), after_ms=after_ms, now_ms=after_ms
    )
    for occurrence in preview.occurrences:
        moment = datetime.fromtimestamp(occurrence.at_ms // 1000, UTC).astimezone(ZoneInfo(tz))
        assert occurrence.local == moment.replace(tzinfo=None).isoformat()
        assert occurrence.offset == moment.isoformat()[19:]
        wall = int(moment.replace(tzinfo=UTC).timestamp())
        matched = schedule.matcher.next_at_or_after(wall) == wall
        shifted = any(r.rule == "dst.gap shift" for r in occurrence.reasons)
        assert matched or shifted
