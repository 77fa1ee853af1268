"""`tickwheel dlq|runs|jobs|gc`: the operators' commands.

Every command prints a human table by default and JSON with `--json` (one document on
stdout). Errors are one line on stderr, never a traceback: exit 2 for bad input (an option's
form, a run key or job that names nothing), exit 1 for the environment (Kafka or Postgres
unreachable or refusing, a schema not migrated). Kafka gets the `ops_kafka_timeout_s` setting,
Postgres `PG_CONNECT_TIMEOUT_S` to answer; the message says so.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import re
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import click
import orjson

from tickwheel.cli_support import (
    BadInput,
    command,
    emit_json,
    listing,
    reach_postgres,
    table,
    with_db,
)
from tickwheel.cli_support import (
    settings as load_cli_settings,
)
from tickwheel.clock import format_ms, now_ms
from tickwheel.config import Settings
from tickwheel.domain import JobStatus, RunStatus, parse_run_key
from tickwheel.schedule.errors import ScheduleError
from tickwheel.schedule.instants import parse_instant

if TYPE_CHECKING:  # imported where used: `tickwheel --help` need not load Kafka's client
    from tickwheel.operations.dlq import DlqFilter, Letter, Malformed

P = ParamSpec("P")
T = TypeVar("T")

LIST_LIMIT_MAX = 1_000_000
_DURATION = re.compile(r"^(\d+)([smhd])$")
_DURATION_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(?:/s)?$")


# --- input forms (pure) ----------------------------------------------------------------------


def parse_since(text: str, now: int) -> int:
    """Unix ms of `--since`: an ISO-8601 instant with Z or an offset, or `<n>s|m|h|d` ago."""
    match = _DURATION.match(text.strip())
    if match:
        return now - int(match[1]) * _DURATION_MS[match[2]]
    try:
        return parse_instant(text, "--since")
    except ScheduleError:
        raise BadInput(
            f"--since must be an ISO-8601 instant with Z or an offset "
            f"(2026-12-01T09:00:00Z) or a duration ago such as 90m, 6h or 7d, not {text!r}"
        ) from None


def parse_rate(text: str) -> float:
    """Replays per second of `--rate`: `N` or `N/s`, positive."""
    match = _RATE.match(text.strip())
    rate = float(match[1]) if match else 0.0
    if rate <= 0:
        raise BadInput(
            f"--rate must be a positive number of replays per second (50/s), not {text!r}"
        )
    return rate


def operator_name() -> str:
    """Who runs a replay, for the audit: $USER, else the login name."""
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _filter_options(fn: Callable[P, T]) -> Callable[P, T]:
    """The selection options `dlq ls` and `dlq replay` share."""
    options = [
        click.option(
            "--since", help="Dead at or after: an ISO-8601 instant with Z, or 90m, 6h, 7d ago."
        ),
        click.option("--job", "job_id", help="Only runs of this job id."),
        click.option("--tenant", help="Only runs of this tenant."),
        click.option("--error", help="Only runs whose error contains this (any case)."),
        click.option(
            "--limit",
            type=click.IntRange(1, LIST_LIMIT_MAX),
            help="At most this many run keys, oldest death first.",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


# --- tickwheel dlq -----------------------------------------------------------------------------


@click.group()
def dlq() -> None:
    """Inspect and replay the dead-letter topic <prefix>.runs.dlq."""


def _dlq_filter(
    since: str | None, job_id: str | None, tenant: str | None, error: str | None, limit: int | None
) -> DlqFilter:
    from tickwheel.operations.dlq import DlqFilter

    since_ms = None if since is None else parse_since(since, now_ms())
    return DlqFilter(since_ms, job_id, tenant, error, limit)


def _read_selected(settings: Settings, flt: DlqFilter) -> tuple[list[Letter], list[Malformed]]:
    """The dead letters `flt` selects, and the messages that were not dead letters."""
    from tickwheel.operations.dlq import read_dead_letters, select
    from tickwheel.topics import Topics

    topic = Topics(settings.topic_prefix).dlq
    letters, malformed = read_dead_letters(
        settings.effective_kafka,
        topic,
        timeout_s=settings.ops_kafka_timeout_s,
        since_ms=flt.since_ms,
    )
    if malformed:  # said on stderr, so that --json output stays one document
        first = malformed[0]
        click.echo(
            f"tickwheel: {len(malformed)} message(s) on {topic} are not dead letters; first at "
            f"partition {first.partition} offset {first.offset}: {first.reason}",
            err=True,
        )
    return select(letters, flt), malformed


@command(dlq, "ls")
@_filter_options
def dlq_ls(
    since: str | None,
    job_id: str | None,
    tenant: str | None,
    error: str | None,
    limit: int | None,
    as_json: bool,
) -> None:
    """List dead runs (the latest dead letter per run key), read without any consumer group."""
    flt = _dlq_filter(since, job_id, tenant, error, limit)
    chosen, malformed = _read_selected(load_cli_settings(), flt)
    if as_json:
        emit_json(
            {
                "filters": flt.to_json(),
                "items": [x.to_json() for x in chosen],
                "malformed": [m.to_json() for m in malformed],
            }
        )
        return
    listing(
        [x.to_json() for x in chosen],
        as_json,
        empty="no dead letters match",
        headers=("DEAD AT", "RUN KEY", "ATTEMPTS", "ERROR"),
        row=lambda x: (x["dead_at"], x["run_key"], x["attempts"], x["error"]),
    )


@command(dlq, "show")
@click.argument("key", metavar="RUN_KEY")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def dlq_show(key: str, as_json: bool) -> None:
    """One run's dead letters (envelope and error) and its history from Postgres."""
    from tickwheel.operations.dlq import read_dead_letters
    from tickwheel.operations.runs import get_run
    from tickwheel.topics import Topics

    tenant, job_id, _ = parse_run_key(key)
    settings = load_cli_settings()
    topic = Topics(settings.topic_prefix).dlq
    letters, _ = read_dead_letters(
        settings.effective_kafka, topic, timeout_s=settings.ops_kafka_timeout_s
    )
    mine = sorted(
        (x for x in letters if x.run_key == key), key=lambda x: (x.dead.dead_at, x.offset)
    )
    run = with_db(lambda conn: get_run(conn, key))
    if not mine and run is None:
        raise BadInput(f"run key {key} is neither on {topic} nor in job_runs")
    if as_json:
        emit_json(
            {
                "run_key": key,
                "letters": [{**x.to_json(), "envelope": x.dead.run.to_dict()} for x in mine],
                "run": run,
            }
        )
        return
    click.echo(f"run {key}  (job {tenant}/{job_id})")
    click.echo(f"\ndead letters on {topic}: {len(mine)}")
    if mine:
        rows = [
            (format_ms(x.dead.dead_at), x.dead.attempts, f"{x.partition}/{x.offset}", x.dead.error)
            for x in mine
        ]
        click.echo(table(("DEAD AT", "ATTEMPTS", "PARTITION/OFFSET", "ERROR"), rows))
        click.echo("\nenvelope (latest letter):")
        click.echo(orjson.dumps(mine[-1].dead.run.to_dict(), option=orjson.OPT_INDENT_2).decode())
        click.echo(f"\nerror (latest letter):\n{mine[-1].dead.error}")
    click.echo("\nin job_runs:")
    if run is None:
        click.echo("  no row (dropped by retention?)")
        return
    _print_run(run)


def _print_run(run: dict[str, Any]) -> None:
    for name, value in run.items():
        if name != "replays" and value is not None:
            click.echo(f"  {name:<13} {value}")
    replays = run["replays"]
    click.echo(f"\nreplays: {len(replays)}")
    if replays:
        rows = [(r["audit_id"], r["at"], r["operator"], r["outcome"], r["reason"]) for r in replays]
        click.echo(table(("AUDIT", "AT", "OPERATOR", "OUTCOME", "REASON"), rows))


@command(dlq, "replay")
@_filter_options
@click.option("--dry-run", is_flag=True, help="Say what would happen; change nothing.")
@click.option("--rate", "rate_text", help="At most this many replays per second (e.g. 50/s).")
@click.option(
    "--attempts",
    type=click.IntRange(1, 100),
    help="Fresh attempt budget per run. [default: the job's max_attempts]",
)
def dlq_replay(
    since: str | None,
    job_id: str | None,
    tenant: str | None,
    error: str | None,
    limit: int | None,
    as_json: bool,
    dry_run: bool,
    rate_text: str | None,
    attempts: int | None,
) -> None:
    """Make the selected dead runs retrying, due now, with a fresh budget (same run keys).

    Runs that are not dead any more are skipped, runs of deleted jobs refused; each is
    reported with its reason. Every replay but a dry run is recorded (`tickwheel dlq audit`).
    """
    from tickwheel.operations.replay import Outcome, replay

    settings = load_cli_settings()
    rate = None if rate_text is None else parse_rate(rate_text)
    flt = _dlq_filter(since, job_id, tenant, error, limit)
    chosen, malformed = _read_selected(settings, flt)
    show_bar = sys.stderr.isatty() and bool(chosen)

    async def work(conn: Any) -> Any:
        label = "checking" if dry_run else "replaying"
        bar: AbstractContextManager[Any] = (
            click.progressbar(length=len(chosen), label=label, file=sys.stderr)
            if show_bar
            else nullcontext(None)
        )
        with bar as progress:
            return await replay(
                conn,
                chosen,
                flt,
                operator=operator_name(),
                attempts=attempts,
                rate_per_s=rate,
                dry_run=dry_run,
                on_progress=None if progress is None else progress.update,
            )

    try:
        report = with_db(work)
    except KeyboardInterrupt:
        click.echo("tickwheel: replay interrupted; `tickwheel dlq audit` has what it did", err=True)
        sys.exit(130)
    if as_json:
        emit_json(
            {
                "filters": flt.to_json(),
                **report.to_json(),
                "malformed": [m.to_json() for m in malformed],
            }
        )
        return
    done = "would replay" if dry_run else "replayed"
    if not report.results:
        click.echo("no dead letters match")
    else:
        rows = [
            (
                r.run_key,
                done if r.outcome == Outcome.REPLAYED else r.outcome.value,
                r.budget if r.budget is not None else "",
                r.reason or "",
            )
            for r in report.results
        ]
        click.echo(table(("RUN KEY", "OUTCOME", "BUDGET", "REASON"), rows))
    summary = (
        f"{done} {report.count(Outcome.REPLAYED)}, skipped {report.count(Outcome.SKIPPED)}, "
        f"refused {report.count(Outcome.REFUSED)} of {len(report.results)} selected"
    )
    click.echo(
        summary + ("  (dry run: nothing changed)" if dry_run else f"  (audit #{report.audit_id})")
    )


@command(dlq, "audit")
@click.option("--limit", type=click.IntRange(1, LIST_LIMIT_MAX), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def dlq_audit(limit: int, as_json: bool) -> None:
    """The recorded replays, newest first: when, who, filters, counts."""
    from tickwheel.operations.replay import audit

    listing(
        with_db(lambda conn: audit(conn, limit)),
        as_json,
        empty="no replays recorded",
        headers=(
            "ID",
            "STARTED",
            "OPERATOR",
            "OUTCOME",
            "SELECTED",
            "REPLAYED",
            "SKIPPED",
            "REFUSED",
            "BUDGET",
            "FILTERS",
        ),
        row=lambda e: (
            e["id"],
            e["started_at"],
            e["operator"],
            e["outcome"],
            e["selected"],
            e["replayed"],
            e["skipped"],
            e["refused"],
            e["attempts"] or "job's",
            " ".join(f"{k}={v}" for k, v in e["filters"].items() if v is not None) or "(all)",
        ),
    )


# --- tickwheel runs ----------------------------------------------------------------------------


@click.group()
def runs() -> None:
    """The run ledger (job_runs), for operators with database access."""


@command(runs, "ls")
@click.option("--tenant", help="Only runs of this tenant.")
@click.option("--job", "job_id", help="Only runs of this job id.")
@click.option("--status", type=click.Choice([s.value for s in RunStatus]), help="Only this status.")
@click.option("--since", help="Scheduled at or after: an ISO-8601 instant, or 90m, 6h, 7d ago.")
@click.option("--limit", type=click.IntRange(1, LIST_LIMIT_MAX), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def runs_ls(
    tenant: str | None,
    job_id: str | None,
    status: str | None,
    since: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Runs, newest first."""
    from tickwheel.operations.runs import list_runs

    since_ms = None if since is None else parse_since(since, now_ms())
    found = with_db(
        lambda conn: list_runs(
            conn, tenant=tenant, job_id=job_id, status=status, since_ms=since_ms, limit=limit
        )
    )
    listing(
        found,
        as_json,
        empty="no runs match",
        headers=("SCHEDULED AT", "RUN KEY", "STATUS", "ATTEMPT", "ORIGIN", "ERROR"),
        row=lambda r: (
            r["scheduled_at"],
            r["run_key"],
            r["status"],
            f"{r['attempt']}/{r['max_attempts']}",
            r["origin"],
            r["last_error"] or r["skip_reason"],
        ),
    )


@command(runs, "show")
@click.argument("key", metavar="RUN_KEY")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def runs_show(key: str, as_json: bool) -> None:
    """One run: every column of its row, its job's status, and the replays that touched it."""
    from tickwheel.operations.runs import get_run

    parse_run_key(key)
    run = with_db(lambda conn: get_run(conn, key))
    if run is None:
        raise BadInput(f"no run {key} in job_runs")
    if as_json:
        emit_json(run)
        return
    click.echo(f"run {key}")
    _print_run(run)


# --- tickwheel jobs ----------------------------------------------------------------------------


@click.group()
def jobs() -> None:
    """Jobs across tenants, for operators with database access. JOB is <tenant>/<job_id>."""


@command(jobs, "ls")
@click.option("--tenant", help="Only jobs of this tenant.")
@click.option(
    "--status",
    type=click.Choice([s.value for s in JobStatus]),
    help="Only this status. [default: all but deleted]",
)
@click.option("--limit", type=click.IntRange(1, LIST_LIMIT_MAX), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def jobs_ls(tenant: str | None, status: str | None, limit: int, as_json: bool) -> None:
    """Jobs in (tenant, id) order."""
    from tickwheel.operations.jobs import list_jobs

    found = with_db(lambda conn: list_jobs(conn, tenant=tenant, status=status, limit=limit))
    listing(
        found,
        as_json,
        empty="no jobs match",
        headers=("JOB", "KIND", "SCHEDULE / AT", "STATUS", "PRIORITY", "NEXT RUN", "VERSION"),
        row=lambda j: (
            j["job"],
            j["kind"],
            j["schedule"] or j["at"],
            j["status"],
            j["priority"],
            j["next_run_at"],
            j["version"],
        ),
    )


@command(jobs, "show")
@click.argument("job")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def jobs_show(job: str, as_json: bool) -> None:
    """One job: its document, registry fields and latest runs."""
    from tickwheel.operations.jobs import get_job, parse_job_key

    tenant, job_id = parse_job_key(job)
    found = with_db(lambda conn: get_job(conn, tenant, job_id))
    if found is None:
        raise BadInput(f"no job {job} (JOB is <tenant>/<job_id>)")
    if as_json:
        emit_json(found)
        return
    for name in ("job", "status", "version", "shard_id", "next_run_at", "created_at", "updated_at"):
        click.echo(f"{name:<12} {found[name]}")
    click.echo("document:")
    click.echo(orjson.dumps(found["document"], option=orjson.OPT_INDENT_2).decode())
    click.echo(f"\nlatest runs: {len(found['runs'])}")
    if found["runs"]:
        rows = [
            (r["scheduled_at"], r["run_key"], r["status"], r["attempt"], r["last_error"])
            for r in found["runs"]
        ]
        click.echo(table(("SCHEDULED AT", "RUN KEY", "STATUS", "ATTEMPT", "ERROR"), rows))


def _change(command: str, job: str, as_json: bool) -> None:
    from tickwheel import db
    from tickwheel.operations.jobs import change_job, parse_job_key
    from tickwheel.registry_api.store import RegistryStore

    tenant, job_id = parse_job_key(job)
    settings = load_cli_settings()

    async def go() -> dict[str, Any]:
        pool = await reach_postgres(
            settings, lambda dsn: db.create_pool(dsn, min_size=1, max_size=1)
        )
        try:
            return await change_job(RegistryStore(pool, settings.shards), command, tenant, job_id)
        finally:
            await pool.close()

    result = asyncio.run(go())
    if as_json:
        emit_json(result)
    else:
        click.echo(
            f"{result['job']}: {result['result']} (status {result['status']}, "
            f"version {result['version']})"
        )


_JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@command(jobs, "pause")
@click.argument("job")
@_JSON_OPTION
def jobs_pause(job: str, as_json: bool) -> None:
    """Pause JOB through the registry (its runs stop being scheduled)."""
    _change("pause", job, as_json)


@command(jobs, "resume")
@click.argument("job")
@_JSON_OPTION
def jobs_resume(job: str, as_json: bool) -> None:
    """Resume JOB through the registry (from its next fire after now; no catch-up)."""
    _change("resume", job, as_json)


@command(jobs, "rm")
@click.argument("job")
@_JSON_OPTION
def jobs_rm(job: str, as_json: bool) -> None:
    """Delete JOB through the registry (a tombstone: the same id can be registered again)."""
    _change("rm", job, as_json)


BACKFILL_POLL_S = 0.5  # seconds between two looks at a followed backfill's progress


def _with_store(settings: Settings, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run `work(RegistryStore)` on a one-connection pool (the registry's own write path)."""
    from tickwheel import db
    from tickwheel.registry_api.service import run_limits_of
    from tickwheel.registry_api.store import RegistryStore

    async def go() -> T:
        pool = await reach_postgres(
            settings, lambda dsn: db.create_pool(dsn, min_size=1, max_size=1)
        )
        try:
            return await work(RegistryStore(pool, settings.shards, runs=run_limits_of(settings)))
        finally:
            await pool.close()

    return asyncio.run(go())


_TENANT_OPTION = click.option(
    "--tenant", help="The job's tenant; JOB is then the job id alone (else <tenant>/<job_id>)."
)


@command(jobs, "trigger")
@click.argument("job")
@_TENANT_OPTION
@click.option(
    "--idempotency-key",
    help="The same key for the same job within 24 h starts nothing new (answers the same run).",
)
@_JSON_OPTION
def jobs_trigger(job: str, tenant: str | None, idempotency_key: str | None, as_json: bool) -> None:
    """Run JOB once now, outside its schedule (paused jobs too), through the scheduler."""
    from tickwheel.operations.jobs import resolve_job, trigger_job

    tenant, job_id = resolve_job(job, tenant)
    result = _with_store(
        load_cli_settings(), lambda store: trigger_job(store, tenant, job_id, idempotency_key)
    )
    if as_json:
        emit_json(result)
    elif result["created"]:
        click.echo(f"{result['job']}: triggered {result['run_key']}")
    else:
        click.echo(f"{result['job']}: already triggered with this key: {result['run_key']}")


def _instant(text: str, option: str) -> int:
    try:
        return parse_instant(text, option)
    except ScheduleError as exc:
        raise BadInput(exc.message) from None


@command(jobs, "backfill")
@click.argument("job")
@_TENANT_OPTION
@click.option("--from", "from_", required=True, help="ISO-8601 instant with Z (included).")
@click.option("--to", required=True, help="ISO-8601 instant with Z (excluded; not after now).")
@click.option("--dry-run", is_flag=True, help="Say what would be created; change nothing.")
@click.option(
    "--follow/--no-follow",
    default=None,
    help="Show a progress bar until every run created went out. [default: on a terminal]",
)
@_JSON_OPTION
def jobs_backfill(
    job: str,
    tenant: str | None,
    from_: str,
    to: str,
    dry_run: bool,
    follow: bool | None,
    as_json: bool,
) -> None:
    """Run every occurrence of JOB's schedule in [--from, --to) that has no run yet.

    Each occurrence runs under its own run key, released at TICKWHEEL_BACKFILL_RATE_PER_S.
    """
    from tickwheel.operations.jobs import backfill_dispatched, backfill_job, resolve_job
    from tickwheel.registry_api.on_demand import BackfillRequest

    tenant, job_id = resolve_job(job, tenant)
    window = BackfillRequest(_instant(from_, "--from"), _instant(to, "--to"))
    settings = load_cli_settings()
    result = _with_store(
        settings,
        lambda store: backfill_job(store, tenant, job_id, window, dry_run=dry_run),
    )
    if as_json:
        emit_json({k: v for k, v in result.items() if not k.endswith("_ms")})
    else:
        verb = "would create" if dry_run else "created"
        click.echo(
            f"{result['job']}: {verb} {result['runs']} run(s) for {result['occurrences']} "
            f"occurrence(s) in the range ({result['existing']} already had a run)"
        )
        if result["runs"]:
            seconds = result["runs"] / result["rate_per_s"]
            click.echo(f"  first {result['first']}\n  last  {result['last']}")
            click.echo(f"  released at {result['rate_per_s']:g}/s: about {seconds:.0f} s")
    if follow is None:
        follow = sys.stderr.isatty() and not as_json
    if dry_run or not follow or not result["runs"]:
        return
    first_ms, last_ms = result["first_ms"], result["last_ms"]

    async def watch(conn: Any) -> None:
        # The bar counts every backfill run of the job in [first, last]: ours, and any of an
        # earlier backfill of an overlapping range (they share the job's rate).
        dispatched, total = await backfill_dispatched(conn, tenant, job_id, first_ms, last_ms)
        with click.progressbar(length=total, label="dispatching", file=sys.stderr) as progress:
            progress.update(dispatched)
            while dispatched < total:
                await asyncio.sleep(BACKFILL_POLL_S)
                now_done, total = await backfill_dispatched(conn, tenant, job_id, first_ms, last_ms)
                progress.update(now_done - dispatched)
                dispatched = now_done

    try:
        with_db(watch)
    except KeyboardInterrupt:
        click.echo("tickwheel: stopped following; the backfill goes on", err=True)
        sys.exit(130)
