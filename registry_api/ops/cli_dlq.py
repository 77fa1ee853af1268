"""`tickwheel dlq ls|show|replay|audit`: the dead-letter topic, for operators.

Every command prints a human table by default and JSON with `--json` (one document on
stdout). Errors are one line on stderr, never a traceback (tickwheel/cli_support.py): exit 2
for bad input (an option's form, a run key that names nothing), exit 1 for the environment
(Kafka or Postgres unreachable or refusing, a schema not migrated). Kafka gets the
`ops_kafka_timeout_s` setting to answer, Postgres `PG_CONNECT_TIMEOUT_S`; the message says so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import click
import orjson

from tickwheel.cli_support import BadInput, command, emit_json, listing, settings, table, with_db
from tickwheel.clock import format_ms, now_ms
from tickwheel.config import Settings
from tickwheel.domain import parse_run_key
from tickwheel.registry_api.ops.cli_runs import LIST_LIMIT_MAX, print_run
from tickwheel.registry_api.ops.forms import operator_name, parse_rate, parse_since

if TYPE_CHECKING:  # imported where used: `tickwheel --help` need not load Kafka's client
    from tickwheel.registry_api.ops.dlq import DlqFilter, Letter, Malformed

P = ParamSpec("P")
T = TypeVar("T")


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


@click.group()
def dlq() -> None:
    """Inspect and replay the dead-letter topic <prefix>.runs.dlq."""


def _dlq_filter(
    since: str | None, job_id: str | None, tenant: str | None, error: str | None, limit: int | None
) -> DlqFilter:
    from tickwheel.registry_api.ops.dlq import DlqFilter

    since_ms = None if since is None else parse_since(since, now_ms())
    return DlqFilter(since_ms, job_id, tenant, error, limit)


def _read_selected(settings: Settings, flt: DlqFilter) -> tuple[list[Letter], list[Malformed]]:
    """The dead letters `flt` selects, and the messages that were not dead letters."""
    from tickwheel.registry_api.ops.dlq import read_dead_letters, select
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
    chosen, malformed = _read_selected(settings(), flt)
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
    from tickwheel.registry_api.ops.dlq import read_dead_letters
    from tickwheel.registry_api.ops.runs import get_run
    from tickwheel.topics import Topics

    tenant, job_id, _ = parse_run_key(key)
    s = settings()
    topic = Topics(s.topic_prefix).dlq
    letters, _ = read_dead_letters(s.effective_kafka, topic, timeout_s=s.ops_kafka_timeout_s)
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
    print_run(run)


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
    from tickwheel.db import check_deployment
    from tickwheel.registry_api.replay import Outcome, replay

    s = settings()
    rate = None if rate_text is None else parse_rate(rate_text)
    flt = _dlq_filter(since, job_id, tenant, error, limit)
    # The letters are this prefix's: replaying them into another deployment's database is the
    # mistake D-048 refuses, before any letter is read (and again in the replay's session).
    with_db(lambda conn: check_deployment(conn, s.topic_prefix, "dlq replay"), s)
    chosen, malformed = _read_selected(s, flt)
    show_bar = sys.stderr.isatty() and bool(chosen)

    async def work(conn: Any) -> Any:
        await check_deployment(conn, s.topic_prefix, "dlq replay")
        label = "checking" if dry_run else "replaying"
        bar: AbstractContextManager[Any] = (
            click.progressbar(length=len(chosen), label=label, file=sys.stderr)
            if show_bar
            else nullcontext(None)
        )
        with bar as progress:
            return await replay(
                conn,
                [letter.run_key for letter in chosen],
                flt.to_json(),
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
    from tickwheel.registry_api.ops.runs import replay_audit

    listing(
        with_db(lambda conn: replay_audit(conn, limit)),
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
