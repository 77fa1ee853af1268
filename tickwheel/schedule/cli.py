"""`tickwheel cron …`: evaluate a schedule from the shell (DESIGN §7).

Bad input exits with code 2 and one line on stderr, naming the option and the allowed form —
for click's own usage errors too, which would otherwise print the usage block first. When the
schedule has fewer fires left than --count asks for (the supported range ends at
9000-01-01T00:00:00Z, or nothing fires within 50 years), the ones found are printed and one line
on stderr says why, with exit code 3: a script that asked for N lines never gets fewer silently.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
import orjson

from tickwheel.cli_support import EXIT_BAD_INPUT, OneLineCommand
from tickwheel.clock import format_seconds, now_ms
from tickwheel.schedule.calendars import Calendar, excluded_by, parse_calendar
from tickwheel.schedule.cron import DstGap, DstOverlap, parse_cron
from tickwheel.schedule.errors import ScheduleError
from tickwheel.schedule.explain import MisfireSettings, explain_cron, render_text
from tickwheel.schedule.instants import parse_instant
from tickwheel.schedule.jitter import JITTER_MAX_MS
from tickwheel.schedule.misfire import (
    DEFAULT_GRACE_MS,
    DEFAULT_MAX_CATCHUP,
    MAX_CATCHUP_LIMIT,
    MAX_CATCHUP_MIN,
    MisfirePolicy,
)
from tickwheel.schedule.next_fire import AfterEnd
from tickwheel.schedule.window import Window

EXIT_FEWER = 3  # exit code when fewer fire times than --count exist
MAX_COUNT = 100_000  # instants one call may print (it computes them all before printing)
_OPTION_OF_FIELD = {
    "schedule": "EXPR",
    "timezone": "--tz",
    "key": "--key",
    "after": "--after",
    "now": "--now",
    "calendar": "--calendar",
}


def _calendar(path: str) -> Calendar:
    """The calendar document in the file at `path`, named by the file's stem."""
    try:
        document = orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ScheduleError("calendar", f"{path}: not a readable JSON document ({exc})") from None
    if not isinstance(document, dict):
        raise ScheduleError("calendar", f"{path}: a calendar is a JSON object")
    try:
        return parse_calendar(Path(path).stem, document)
    except ScheduleError as exc:
        raise ScheduleError("calendar", f"{path}: {exc.field}: {exc.message}") from None


def _fail(ctx: click.Context, exc: ScheduleError) -> None:
    option = _OPTION_OF_FIELD.get(exc.field, exc.field)
    click.echo(f"Error: invalid {option}: {exc.message}", err=True)
    ctx.exit(EXIT_BAD_INPUT)


@click.group()
def cron() -> None:
    """Evaluate cron schedules."""


@cron.command("next", cls=OneLineCommand)
@click.argument("expr")
@click.option("--tz", default="UTC", show_default=True, help="IANA zone the schedule is read in.")
@click.option(
    "--after",
    default=None,
    help="ISO-8601 instant with Z or an offset; results are strictly after it. [default: now]",
)
@click.option("--count", default=5, show_default=True, type=click.IntRange(1, MAX_COUNT))
@click.option("--key", default=None, help="Job identity tenant/job_id that H fields hash.")
@click.option(
    "--dst-gap",
    default=DstGap.SHIFT.value,
    show_default=True,
    type=click.Choice([g.value for g in DstGap]),
    help="Fixed-hour times the clock skips: shift to the gap's end, or skip that day.",
)
@click.option(
    "--dst-overlap",
    default=DstOverlap.FIRST.value,
    show_default=True,
    type=click.Choice([o.value for o in DstOverlap]),
    help="Fixed-hour times the clock repeats: fire at the first, the last or both.",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Per fire time: its wall time and offset in --tz, and the DST or H rule that put it "
    "there; then what the misfire policy would do with the first one if claimed --now.",
)
@click.option("--json", "as_json", is_flag=True, help="The explained form as one JSON document.")
@click.option(
    "--now",
    default=None,
    help="The instant taken as now, ISO-8601: the default of --after, and with --explain the "
    "moment a claim is imagined at. [default: the clock]",
)
@click.option(
    "--misfire-policy",
    default=MisfirePolicy.RUN_ONCE.value,
    show_default=True,
    type=click.Choice([p.value for p in MisfirePolicy]),
    help="With --explain: the job's misfire.policy.",
)
@click.option(
    "--grace-ms",
    default=DEFAULT_GRACE_MS,
    show_default=True,
    type=click.IntRange(0, None),
    help="With --explain: the job's misfire.grace_ms.",
)
@click.option(
    "--max-catchup",
    default=DEFAULT_MAX_CATCHUP,
    show_default=True,
    type=click.IntRange(MAX_CATCHUP_MIN, MAX_CATCHUP_LIMIT),
    help="With --explain: the job's misfire.max_catchup.",
)
@click.option(
    "--start-at",
    default=None,
    help="The job's start_at, ISO-8601: no fire time before it.",
)
@click.option(
    "--end-at",
    default=None,
    help="The job's end_at, ISO-8601: no fire time after it.",
)
@click.option(
    "--jitter-ms",
    default=0,
    show_default=True,
    type=click.IntRange(0, JITTER_MAX_MS),
    help="With --explain: the job's jitter_ms; each fire time says the offset it runs after "
    "(needs --key: the offset hashes the job's key).",
)
@click.option(
    "--after-end",
    default=None,
    type=click.Choice([a.value for a in AfterEnd]),
    help="With --explain: the job's after_end (what becomes of it after its last fire time).",
)
@click.option(
    "--calendar",
    "calendar_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="A calendar document (JSON, as PUT /v1/calendars/NAME takes; NAME is the file's "
    "stem): fire times it excludes are marked. Repeatable.",
)
@click.pass_context
def next_command(
    ctx: click.Context,
    expr: str,
    tz: str,
    after: str | None,
    count: int,
    key: str | None,
    dst_gap: str,
    dst_overlap: str,
    explain: bool,
    as_json: bool,
    now: str | None,
    misfire_policy: str,
    grace_ms: int,
    max_catchup: int,
    start_at: str | None,
    end_at: str | None,
    after_end: str | None,
    calendar_files: tuple[str, ...],
    jitter_ms: int,
) -> None:
    """Print the next COUNT fire instants of EXPR, in UTC, one per line.

    EXPR has 5 fields (minute hour day-of-month month day-of-week), 6 with seconds first, or is
    an alias such as @daily; quote it. --explain (or --json) says why each one is there.
    """
    try:
        schedule = parse_cron(expr, tz=tz, key=key, dst_gap=dst_gap, dst_overlap=dst_overlap)
        clock_ms = now_ms() if now is None else parse_instant(now, "now")
        after_ms = clock_ms if after is None else parse_instant(after, "after")
        start_ms = None if start_at is None else parse_instant(start_at, "start-at")
        end_ms = None if end_at is None else parse_instant(end_at, "end-at")
        calendars = [_calendar(path) for path in calendar_files]
    except ScheduleError as exc:
        _fail(ctx, exc)
        return
    if jitter_ms and key is None:
        click.echo(
            "Error: invalid --jitter-ms: needs --key tenant/job_id, the key its offsets hash.",
            err=True,
        )
        ctx.exit(EXIT_BAD_INPUT)
    window = None
    next_after: Callable[[int], int | None] = schedule.next_after
    if start_ms is not None or end_ms is not None or after_end is not None:
        window = Window(start_ms, end_ms, after_end)
        next_after = window.bound(schedule.next_after)
    instants: list[int] = []
    found = next_after(after_ms)
    while found is not None and len(instants) < count:
        instants.append(found)
        found = next_after(found) if len(instants) < count else None
    if explain or as_json:
        preview = explain_cron(
            schedule,
            instants,
            after_ms=after_ms,
            now_ms=clock_ms,
            misfire=MisfireSettings(misfire_policy, grace_ms, max_catchup),
            window=window,
            exclusions=(lambda ms: excluded_by(calendars, ms)) if calendars else None,
            jitter=(key, jitter_ms) if key is not None and jitter_ms else None,
        )
        if as_json:
            click.echo(orjson.dumps(preview.to_dict(), option=orjson.OPT_INDENT_2).decode())
        else:
            click.echo(render_text(preview), nl=False)
    else:
        for instant in instants:
            why = excluded_by(calendars, instant)
            click.echo(format_seconds(instant) + ("" if why is None else f"  excluded: {why}"))
    if len(instants) < count:
        last = instants[-1] if instants else after_ms
        why = (
            schedule.why_none(last)
            if schedule.next_after(last) is None
            else (
                f"the window ends at {format_seconds(end_ms)}"
                if end_ms is not None
                else "none left"
            )
        )
        click.echo(f"Error: {len(instants)} of {count} fire times printed: {why}.", err=True)
        ctx.exit(EXIT_FEWER)
