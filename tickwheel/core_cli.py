"""The ground's own commands: `tickwheel db …` (schema, partitions), `tickwheel gc` (retention,
alias `tickwheel db retention`) and `tickwheel topics …`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from tickwheel.cli_support import (
    EXIT_BAD_INPUT,
    OneLineCommand,
    emit_json,
    fail,
    one_line_errors,
    settings,
    with_db,
)

T = TypeVar("T")


@click.group()
def db() -> None:
    """Schema migrations and job_runs partition upkeep."""


def _run_db(action: Callable[[Any], Awaitable[T]]) -> T:
    """`action(connection)` on the configured Postgres; failures end in one line."""
    return one_line_errors(with_db)(action)


@db.command("migrate")
def db_migrate() -> None:
    """Apply pending migrations (a second run changes nothing), prepare partitions, and record
    the database as TICKWHEEL_TOPIC_PREFIX's deployment (refused, changing nothing, when it
    belongs to another)."""
    from tickwheel import db as dbmod

    prefix = settings().topic_prefix

    async def action(conn: Any) -> tuple[list[dbmod.Migration], int]:
        applied = await dbmod.migrate(conn, deployment=prefix)
        return applied, await dbmod.ensure_partitions(conn)

    applied, parts = _run_db(action)
    for m in applied:
        click.echo(f"applied {m.version:04d}_{m.name}")
    if not applied:
        click.echo("schema is current")
    click.echo(f"job_runs partitions created: {parts}")
    click.echo(f"deployment: {prefix}")


@db.group("deployment", invoke_without_command=True)
@click.pass_context
def db_deployment(ctx: click.Context) -> None:
    """The deployment (topic prefix) this database belongs to; `rename` changes it."""
    if ctx.invoked_subcommand is not None:
        return
    from tickwheel import db as dbmod

    recorded = _run_db(dbmod.deployment_of)
    click.echo(recorded if recorded is not None else "none recorded (run `tickwheel db migrate`)")


@db_deployment.command("rename", cls=OneLineCommand)
@click.option("--from", "old", required=True, help="The deployment the database belongs to.")
@click.option("--to", "new", required=True, help="The deployment it is to belong to.")
@click.option(
    "--force",
    is_flag=True,
    help="Rename even though shard leaders have not stepped down (their processes are gone).",
)
def db_deployment_rename(old: str, new: str, force: bool) -> None:
    """Make the database belong to deployment --to instead of --from. Stop --from's schedulers,
    workers and registries first: they would go on under their old topics."""
    from tickwheel import db as dbmod
    from tickwheel.deployment import PREFIX_FORM
    from tickwheel.queries import QUERIES

    if not PREFIX_FORM.fullmatch(new):
        fail(f"--to must match {PREFIX_FORM.pattern}, not {new!r}", EXIT_BAD_INPUT)

    async def action(conn: Any) -> tuple[str | None, int, bool]:
        """(the deployment recorded, shards with a leader recorded, whether it was renamed)"""
        async with conn.transaction():
            recorded = await dbmod.deployment_of(conn)
            led = int(await conn.fetchval(QUERIES["deployment_led_shards"]))
            if recorded != old or (led and not force):
                return recorded, led, False
            await conn.execute(QUERIES["deployment_rename"], old, new)
            return recorded, led, True

    recorded, led, renamed = _run_db(action)
    if recorded is None:
        fail(
            "the database records no deployment: run `tickwheel db migrate` instead", EXIT_BAD_INPUT
        )
    if recorded != old:
        fail(
            f"the database belongs to deployment {recorded!r}, not {old!r}: nothing renamed",
            EXIT_BAD_INPUT,
        )
    if not renamed:
        fail(
            f"{led} shard(s) still have a leader of deployment {old!r} recorded: stop its "
            "schedulers first (a scheduler steps down when it stops), or pass --force if "
            "their processes are gone",
            EXIT_BAD_INPUT,
        )
    click.echo(f"deployment: {old} -> {new}")


@db.command("partitions")
@click.option("--days-ahead", default=7, show_default=True, type=click.IntRange(0, 366))
def db_partitions(days_ahead: int) -> None:
    """Create the daily job_runs partitions up to DAYS_AHEAD (run daily, e.g. from cron)."""
    from tickwheel import db as dbmod

    created = _run_db(lambda conn: dbmod.ensure_partitions(conn, days_ahead=days_ahead))
    click.echo(f"job_runs partitions created: {created}")


@click.group()
def topics() -> None:
    """Kafka topics of DESIGN §5."""


@topics.command("create")
@click.option(
    "--partitions",
    type=click.IntRange(1, 10_000),
    default=None,
    help="Partitions per topic (default: TICKWHEEL_TOPIC_PARTITIONS).",
)
@click.option(
    "--replication",
    type=click.IntRange(1, 100),
    default=None,
    help="Replication factor (default: TICKWHEEL_TOPIC_REPLICATION).",
)
def topics_create(partitions: int | None, replication: int | None) -> None:
    """Create the registration, run, DLQ and rejection topics that do not exist yet."""
    from tickwheel.kafka.admin import create_topics
    from tickwheel.topics import Topics

    s = settings()
    try:
        created = create_topics(
            s.effective_kafka,
            Topics(s.topic_prefix).all(),
            partitions or s.topic_partitions,
            replication or s.topic_replication,
        )
    except Exception as exc:
        fail(f"cannot create topics on {s.effective_kafka}: {exc}")
    click.echo("created: " + (", ".join(created) if created else "nothing (all exist)"))


@click.command("gc", cls=OneLineCommand)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--keep-days",
    type=click.IntRange(1, 36500),
    default=None,
    help="Keep this many days of run history. [default: TICKWHEEL_RETENTION_DAYS]",
)
@one_line_errors
def gc(as_json: bool, keep_days: int | None) -> None:
    """Retention: drop run history and completed one-offs older than TICKWHEEL_RETENTION_DAYS
    (or --keep-days). Also `tickwheel db retention`."""
    from tickwheel.maintenance import run_gc

    days = keep_days if keep_days is not None else settings().retention_days
    report = with_db(lambda conn: run_gc(conn, retention_days=days))
    if as_json:
        emit_json(report.to_json())
        return
    dropped = ", ".join(report.dropped_partitions) or "none"
    click.echo(f"kept from {report.keep_from.isoformat()} (retention {days} days)")
    click.echo(f"dropped partitions: {dropped}")
    click.echo(f"removed completed one-off jobs: {report.removed_jobs}")
    click.echo(f"removed replay records: {report.removed_replay_records}")
    click.echo(f"removed trigger idempotency keys: {report.removed_trigger_keys}")
    click.echo(f"removed registration message ids: {report.removed_registration_ids}")
    click.echo(f"removed idle target limit rows: {report.removed_target_rows}")
    click.echo(f"removed stale pause notes: {report.removed_pause_notes}")


# The one retention command, also under the name it had beside the partition upkeep.
db.add_command(gc, "retention")
