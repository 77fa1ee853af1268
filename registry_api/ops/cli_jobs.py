"""`tickwheel jobs ls|show|pause|resume|rm|trigger|backfill`: jobs across tenants, for
operators with database access. JOB is `<tenant>/<job_id>`.

Reads go to Postgres; changes go through the registry's own write path (ops/jobs.py). Tables by
default, JSON with `--json`; errors are one line (tickwheel/cli_support.py).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
import orjson

from tickwheel.cli_support import (
    BadInput,
    command,
    emit_json,
    listing,
    settings,
    table,
    with_db,
    with_pool,
)
from tickwheel.domain import JobStatus
from tickwheel.registry_api.ops.cli_runs import LIST_LIMIT_MAX
from tickwheel.registry_api.ops.forms import (
    operator_name,
    parse_instant_option,
    parse_job_key,
    resolve_job,
)

T = TypeVar("T")

BACKFILL_POLL_S = 0.5  # seconds between two looks at a followed backfill's progress


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
    from tickwheel.registry_api.ops.jobs import list_jobs

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
    from tickwheel.registry_api.ops.jobs import get_job

    tenant, job_id = parse_job_key(job)
    found = with_db(lambda conn: get_job(conn, tenant, job_id))
    if found is None:
        raise BadInput(f"no job {job} (JOB is <tenant>/<job_id>)")
    if as_json:
        emit_json(found)
        return
    for name in ("job", "status", "version", "shard_id", "next_run_at", "created_at", "updated_at"):
        click.echo(f"{name:<12} {found[name]}")
    note = found["pause_note"]
    if note is not None:
        click.echo(f"{'paused by':<12} {note['by']} at {note['at']}: {note['reason']}")
    click.echo("document:")
    click.echo(orjson.dumps(found["document"], option=orjson.OPT_INDENT_2).decode())
    click.echo(f"\nlatest runs: {len(found['runs'])}")
    if found["runs"]:
        rows = [
            (r["scheduled_at"], r["run_key"], r["status"], r["attempt"], r["last_error"])
            for r in found["runs"]
        ]
        click.echo(table(("SCHEDULED AT", "RUN KEY", "STATUS", "ATTEMPT", "ERROR"), rows))


def _with_store(work: Callable[[Any], Awaitable[T]]) -> T:
    """Run `work(RegistryStore)` on a one-connection pool (the registry's own write path)."""
    from tickwheel.registry_api.service import run_limits_of
    from tickwheel.registry_api.store import RegistryStore

    s = settings()
    return with_pool(lambda pool: work(RegistryStore(pool, s.shards, runs=run_limits_of(s))), s)


def _change(command: str, job: str, as_json: bool, reason: str | None = None) -> None:
    from tickwheel.registry_api.ops.jobs import NOTE_MAX_CHARS, PauseNote, change_job

    tenant, job_id = parse_job_key(job)
    note = None
    if reason is not None:
        reason = reason.strip()
        if not 1 <= len(reason) <= NOTE_MAX_CHARS:
            raise BadInput(f"--note must be 1 to {NOTE_MAX_CHARS} characters, not {len(reason)}")
        note = PauseNote(operator_name(), reason)
    result = _with_store(lambda store: change_job(store, command, tenant, job_id, note=note))
    result.pop("audit_id", None)  # the CLI's changes are not in ops_audit (the page's are)
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
@click.option(
    "--note",
    help="Why (shown by `jobs show`, the API and the page until it is resumed; who is $USER).",
)
@_JSON_OPTION
def jobs_pause(job: str, note: str | None, as_json: bool) -> None:
    """Pause JOB through the registry (its runs stop being scheduled)."""
    _change("pause", job, as_json, note)


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
    from tickwheel.registry_api.document import JobValidationError
    from tickwheel.registry_api.on_demand import checked_idempotency_key
    from tickwheel.registry_api.ops.jobs import trigger_job

    tenant, job_id = resolve_job(job, tenant)
    try:
        checked_idempotency_key(idempotency_key, "--idempotency-key")
    except JobValidationError as exc:
        raise BadInput(str(exc)) from None
    result = _with_store(lambda store: trigger_job(store, tenant, job_id, idempotency_key))
    if as_json:
        emit_json(result)
    elif result["created"]:
        click.echo(f"{result['job']}: triggered {result['run_key']}")
    else:
        click.echo(f"{result['job']}: already triggered with this key: {result['run_key']}")


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
    from tickwheel.clock import now_ms
    from tickwheel.registry_api.on_demand import BackfillRefused, BackfillRequest, check_range
    from tickwheel.registry_api.ops.jobs import backfill_dispatched, backfill_job
    from tickwheel.registry_api.service import run_limits_of

    tenant, job_id = resolve_job(job, tenant)
    window = BackfillRequest(
        parse_instant_option(from_, "--from"), parse_instant_option(to, "--to")
    )
    try:  # what arithmetic can refuse is refused before connecting (the store checks again)
        check_range(window.from_ms, window.to_ms, now_ms(), run_limits_of(settings()))
    except BackfillRefused as refused:
        raise BadInput(f"--{refused.field}: {refused.message}") from None
    result = _with_store(lambda store: backfill_job(store, tenant, job_id, window, dry_run=dry_run))
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
