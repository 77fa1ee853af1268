"""The `tickwheel` command line: one click group; each area's commands live beside its code.

Errors a user can fix (bad input, missing tools, unreachable services) end with one line on
stderr and a non-zero exit (2 for bad input, 1 for an unhealthy environment), never a
traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from tickwheel import __version__
from tickwheel.config import ConfigError, Settings, load_settings, redact_dsn
from tickwheel.operations.cli import dlq, gc, jobs, runs
from tickwheel.schedule.cli import cron

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"tickwheel: {message}", err=True)
    sys.exit(code)


def settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        fail(str(exc), 2)


@click.group()
@click.version_option(__version__, prog_name="tickwheel")
def main() -> None:
    """tickwheel: a distributed job scheduler."""


main.add_command(cron)
main.add_command(dlq)
main.add_command(runs)
main.add_command(jobs)
main.add_command(gc)


# --- tickwheel dev ---------------------------------------------------------------------------


@main.group()
def dev() -> None:
    """The local stack: real Postgres, Kafka (KRaft) and ZooKeeper under .devstack/."""


def _stack() -> Any:
    if os.environ.get("TICKWHEEL_STACK", "local") == "testcontainers":
        fail("TICKWHEEL_STACK=testcontainers: run `tickwheel dev containers` (needs Docker)", 2)
    from tickwheel.devstack import DevStack

    return DevStack(settings(), echo=lambda line: click.echo(line, err=True))


def _print_statuses(statuses: list[Any]) -> bool:
    for st in statuses:
        mark = "healthy  " if st.healthy else "UNHEALTHY"
        origin = "dev" if st.managed else "env"
        click.echo(f"{st.name:<10} {mark} {origin}  {st.address}  {st.detail}")
    return all(st.healthy for st in statuses)


@dev.command("up")
def dev_up() -> None:
    """Start the stack (idempotent), wait for health, create the topics."""
    from tickwheel.devstack import StackError

    try:
        healthy = _print_statuses(_stack().up())
    except StackError as exc:
        fail(str(exc))
    if not healthy:
        sys.exit(1)


@dev.command("down")
def dev_down() -> None:
    """Stop exactly the processes `dev up` started."""
    stopped = _stack().down()
    click.echo("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@dev.command("status")
@click.option("--no-round-trip", is_flag=True, help="Skip the Kafka produce/consume check.")
def dev_status(no_round_trip: bool) -> None:
    """Health of each service; exits 1 when any is unhealthy."""
    if not _print_statuses(_stack().status(round_trip=not no_round_trip)):
        sys.exit(1)


@dev.command("env")
def dev_env() -> None:
    """Print eval-able exports of the service addresses."""
    for line in _stack().env_lines():
        click.echo(line)


@dev.command("containers")
def dev_containers() -> None:
    """Run the three services in Docker with testcontainers until Ctrl-C (needs Docker)."""
    from tickwheel.containers import run_forever

    run_forever(settings(), echo=click.echo)


# --- tickwheel db ----------------------------------------------------------------------------


@main.group()
def db() -> None:
    """Schema migrations and job_runs partition upkeep."""


def _run_db(action: Callable[[Any], Any]) -> Any:
    import asyncio

    import asyncpg

    from tickwheel import db as dbmod

    async def go() -> Any:
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

    async def action(conn: Any) -> tuple[list[Any], int]:
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
    import datetime as dt

    from tickwheel import db as dbmod

    keep_from = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=keep_days)
    dropped = _run_db(lambda conn: dbmod.drop_partitions_before(conn, keep_from))
    click.echo("dropped: " + (", ".join(dropped) if dropped else "nothing"))


# --- tickwheel topics --------------------------------------------------------------------------


@main.group()
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


# --- tickwheel demo ----------------------------------------------------------------------------


@main.command("demo")
def demo() -> None:
    """End to end on the local stack: stack, schema, registry over HTTP and Kafka."""
    from tickwheel.demo import run

    ctx = click.get_current_context()
    ctx.invoke(dev_up)
    ctx.invoke(db_migrate)
    try:
        run(settings(), say=click.echo)
    except RuntimeError as exc:
        fail(str(exc))


# --- tickwheel registry / tenant -----------------------------------------------------------


@main.command("registry")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--no-http", is_flag=True, help="Run only the Kafka registration intake.")
@click.option("--no-intake", is_flag=True, help="Run only the HTTP API.")
def registry(host: str, port: int, no_http: bool, no_intake: bool) -> None:
    """Serve the HTTP API and the Kafka registration intake until SIGINT/SIGTERM."""
    import uvloop

    from tickwheel import logs
    from tickwheel.registry_api.service import serve

    if no_http and no_intake:
        fail("--no-http and --no-intake together leave nothing to run", 2)
    import asyncpg

    logs.setup()
    s = settings()
    try:
        code = uvloop.run(serve(s, host, port, http=not no_http, intake=not no_intake))
    except (OSError, asyncpg.PostgresError) as exc:
        fail(
            f"registry cannot start (Postgres at {redact_dsn(s.effective_dsn)}, Kafka at "
            f"{s.effective_kafka}): {type(exc).__name__}: {exc}"
        )
    # Non-zero when a part died (logged with its traceback): supervisors restart on it.
    sys.exit(code)


@main.group()
def tenant() -> None:
    """Tenants and their API keys."""


@tenant.command("add")
@click.argument("name")
def tenant_add(name: str) -> None:
    """Create tenant NAME; its API key is printed once, as the last line."""
    import asyncpg

    from tickwheel import db as dbmod
    from tickwheel.registry_api.store import RegistryStore

    async def go() -> str:
        pool = await dbmod.create_pool(settings().effective_dsn, min_size=1, max_size=1)
        try:
            return await RegistryStore(pool, settings().shards).create_tenant(name)
        finally:
            await pool.close()

    import asyncio

    try:
        key = asyncio.run(go())
    except asyncpg.PostgresError as exc:
        err = dbmod.domain_error(exc)
        fail(str(err) if err else f"cannot create tenant {name!r}: {exc}", 2)
    except OSError as exc:
        fail(f"cannot connect to Postgres at {redact_dsn(settings().effective_dsn)}: {exc}")
    click.echo(f"tenant {name} created; its API key (shown once):")
    click.echo(key)
