"""The core's own commands: `tickwheel db …` (schema, partitions) and `tickwheel topics …`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from tickwheel.cli_support import fail, settings
from tickwheel.config import redact_dsn

T = TypeVar("T")


@click.group()
def db() -> None:
    """Schema migrations and job_runs partition upkeep."""


def _run_db(action: Callable[[Any], Awaitable[T]]) -> T:
    import asyncio

    import asyncpg

    from tickwheel import db as dbmod

    async def go() -> T:
        try:
            conn = await dbmod.connect(settings().effective_dsn)
        except Exception as exc:  # unreachable or refused: one line, not a trace
            fail(f"cannot connect to Postgres at {redact_dsn(settings().effective_dsn)}: {exc}")
        try:
            return await action(conn)
        except asyncpg.PostgresError as exc:  # e.g. no privilege, a migration that fails
            fail(f"Postgres refused: {type(exc).__name__}: {exc}")
        finally:
            await conn.close()

    return asyncio.run(go())


@db.command("migrate")
def db_migrate() -> None:
    """Apply pending migrations (a second run changes nothing) and prepare partitions."""
    from tickwheel import db as dbmod

    async def action(conn: Any) -> tuple[list[dbmod.Migration], int]:
        applied = await dbmod.migrate(conn)
        return applied, await dbmod.ensure_partitions(conn)

    applied, parts = _run_db(action)
    for m in applied:
        click.echo(f"applied {m.version:04d}_{m.name}")
    if not applied:
        click.echo("schema is current")
    click.echo(f"job_runs partitions created: {parts}")


@db.command("partitions")
@click.option("--days-ahead", default=7, show_default=True, type=click.IntRange(0, 366))
def db_partitions(days_ahead: int) -> None:
    """Create the daily job_runs partitions up to DAYS_AHEAD (run daily, e.g. from cron)."""
    from tickwheel import db as dbmod

    created = _run_db(lambda conn: dbmod.ensure_partitions(conn, days_ahead=days_ahead))
    click.echo(f"job_runs partitions created: {created}")


@db.command("retention")
@click.option(
    "--keep-days",
    required=True,
    type=click.IntRange(1, 36500),
    help="Keep run history of this many days; older partitions are dropped.",
)
def db_retention(keep_days: int) -> None:
    """Drop job_runs partitions older than KEEP_DAYS (retention is a partition drop)."""
    from tickwheel import db as dbmod

    keep_from = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=keep_days)
    dropped = _run_db(lambda conn: dbmod.drop_partitions_before(conn, keep_from))
    click.echo("dropped: " + (", ".join(dropped) if dropped else "nothing"))


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
    from tickwheel.kafka import create_topics
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
