"""`tickwheel scheduler`: a shard-leader process (any number of them, on any hosts)."""

from __future__ import annotations

import re
import sys

import click

ID_FORM = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


@click.command("scheduler")
@click.option(
    "--id",
    "member_id",
    default=None,
    help="Name of this process in ZooKeeper, shard_leaders.owner and logs (default host:pid).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on this port.",
)
def scheduler(member_id: str | None, metrics_port: int | None) -> None:
    """Lead shards elected through ZooKeeper: load, tick, claim, publish, until SIGTERM."""
    import asyncpg
    import uvloop
    from confluent_kafka import KafkaException
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    from tickwheel import logs
    from tickwheel.config import ConfigError, load_settings, redact_dsn
    from tickwheel.shards.service import serve

    if member_id is not None and not ID_FORM.match(member_id):
        click.echo("tickwheel: --id must match [A-Za-z0-9._:-]{1,128}", err=True)
        sys.exit(2)
    try:
        settings = load_settings()
    except ConfigError as exc:
        click.echo(f"tickwheel: {exc}", err=True)
        sys.exit(2)
    logs.setup()
    try:
        code = uvloop.run(serve(settings, member_id, metrics_port))
    except (
        OSError,
        asyncpg.PostgresError,
        KafkaException,
        KazooException,
        KazooTimeoutError,
    ) as exc:
        click.echo(
            f"tickwheel: scheduler cannot start (Postgres at {redact_dsn(settings.effective_dsn)},"
            f" Kafka at {settings.effective_kafka}, ZooKeeper at {settings.effective_zk}): "
            f"{type(exc).__name__}: {exc}",
            err=True,
        )
        sys.exit(1)
    sys.exit(code)
