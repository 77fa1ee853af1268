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
    from tickwheel.cli_support import EXIT_BAD_INPUT, fail, settings, startup_failed
    from tickwheel.deployment import WrongDeployment
    from tickwheel.shards.service import serve

    if member_id is not None and not ID_FORM.match(member_id):
        fail("--id must match [A-Za-z0-9._:-]{1,128}", EXIT_BAD_INPUT)
    s = settings()
    logs.setup()
    try:
        code = uvloop.run(serve(s, member_id, metrics_port))
    except WrongDeployment as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except (
        OSError,
        asyncpg.PostgresError,
        asyncpg.ClientConfigurationError,
        KafkaException,
        KazooException,
        KazooTimeoutError,
    ) as exc:
        startup_failed("scheduler", s, exc, zk=True)
    sys.exit(code)
