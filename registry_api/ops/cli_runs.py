"""`tickwheel runs ls|show`: the run ledger (`job_runs`), for operators with database access.

Tables by default, JSON with `--json`; errors are one line (tickwheel/cli_support.py).
"""

from __future__ import annotations

from typing import Any

import click

from tickwheel.cli_support import BadInput, command, emit_json, listing, table, with_db
from tickwheel.clock import now_ms
from tickwheel.domain import RunStatus, parse_run_key
from tickwheel.registry_api.ops.forms import parse_since

LIST_LIMIT_MAX = 1_000_000  # the largest --limit of a list command


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
    from tickwheel.registry_api.ops.runs import list_runs

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
    from tickwheel.registry_api.ops.runs import get_run

    parse_run_key(key)
    run = with_db(lambda conn: get_run(conn, key))
    if run is None:
        raise BadInput(f"no run {key} in job_runs")
    if as_json:
        emit_json(run)
        return
    click.echo(f"run {key}")
    print_run(run)


def print_run(run: dict[str, Any]) -> None:
    """A run's columns, then the replays that touched it (`runs show`, `dlq show`)."""
    for name, value in run.items():
        if name != "replays" and value is not None:
            click.echo(f"  {name:<13} {value}")
    replays = run["replays"]
    click.echo(f"\nreplays: {len(replays)}")
    if replays:
        rows = [(r["audit_id"], r["at"], r["operator"], r["outcome"], r["reason"]) for r in replays]
        click.echo(table(("AUDIT", "AT", "OPERATOR", "OUTCOME", "REASON"), rows))
