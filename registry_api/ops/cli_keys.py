"""`tickwheel operator-key add|revoke NAME`: the keys of the operators' endpoints and `/ui`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from tickwheel.cli_support import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, cannot_connect, fail, settings

T = TypeVar("T")


def _with_keys(action: Callable[..., Awaitable[T]], what: str) -> T:
    """Run `action(OperatorKeys)` on a one-connection pool; one line on stderr if it fails."""
    import asyncpg

    from tickwheel import db as dbmod
    from tickwheel.registry_api.ops.keys import OperatorKeys

    dsn = settings().effective_dsn

    async def go() -> T:
        pool = await dbmod.create_pool(dsn, min_size=1, max_size=1)
        try:
            return await action(OperatorKeys(pool))
        finally:
            await pool.close()

    try:
        return asyncio.run(go())
    except (asyncpg.UndefinedTableError, asyncpg.UndefinedColumnError) as exc:
        fail(
            f"cannot {what}: the database schema is not current ({exc}): run `tickwheel db migrate`"
        )
    except asyncpg.PostgresError as exc:
        err = dbmod.domain_error(exc)
        fail(
            str(err) if err else f"cannot {what}: {exc}",
            EXIT_BAD_INPUT if err else EXIT_ENVIRONMENT,
        )
    except OSError as exc:
        fail(cannot_connect(dsn, exc))


@click.group("operator-key")
def operator_key() -> None:
    """Operator keys: they open the cross-tenant endpoints /v1/ops/… and the /ui status page."""


@operator_key.command("add")
@click.argument("name")
def operator_key_add(name: str) -> None:
    """Create an operator key for NAME; it is printed once, as the last line."""
    key = _with_keys(lambda keys: keys.create(name), f"create an operator key for {name!r}")
    click.echo(f"operator key {name} created; the key (shown once, stored only hashed):")
    click.echo(key)


@operator_key.command("revoke")
@click.argument("name")
def operator_key_revoke(name: str) -> None:
    """Revoke NAME's operator key (a running registry stops accepting it within 5 s)."""
    prefix = _with_keys(lambda keys: keys.revoke(name), f"revoke the key of {name!r}")
    if prefix is None:
        fail(f"there is no active operator key named {name!r}", EXIT_BAD_INPUT)
    click.echo(f"operator key {name} ({prefix}…) revoked")
