"""`tickwheel registry` (the HTTP API and the Kafka intake) and `tickwheel tenant …`."""

from __future__ import annotations

import sys

import click

from tickwheel.cli_support import EXIT_BAD_INPUT, cannot_connect, fail, settings
from tickwheel.config import redact_dsn


@click.command("registry")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--no-http", is_flag=True, help="Run only the Kafka registration intake.")
@click.option("--no-intake", is_flag=True, help="Run only the HTTP API.")
def registry(host: str, port: int, no_http: bool, no_intake: bool) -> None:
    """Serve the HTTP API and the Kafka registration intake until SIGINT/SIGTERM."""
    import asyncpg
    import uvloop

    from tickwheel import logs
    from tickwheel.registry_api.service import serve

    if no_http and no_intake:
        fail("--no-http and --no-intake together leave nothing to run", EXIT_BAD_INPUT)
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


@click.group()
def tenant() -> None:
    """Tenants and their API keys."""


@tenant.command("add")
@click.argument("name")
def tenant_add(name: str) -> None:
    """Create tenant NAME; its API key is printed once, as the last line."""
    import asyncio

    import asyncpg

    from tickwheel import db as dbmod
    from tickwheel.registry_api.store import RegistryStore

    async def go() -> str:
        pool = await dbmod.create_pool(settings().effective_dsn, min_size=1, max_size=1)
        try:
            return await RegistryStore(pool, settings().shards).create_tenant(name)
        finally:
            await pool.close()

    try:
        key = asyncio.run(go())
    except asyncpg.PostgresError as exc:
        err = dbmod.domain_error(exc)
        fail(str(err) if err else f"cannot create tenant {name!r}: {exc}", EXIT_BAD_INPUT)
    except OSError as exc:
        fail(cannot_connect(settings().effective_dsn, exc))
    click.echo(f"tenant {name} created; its API key (shown once):")
    click.echo(key)


@tenant.command("revoke-key")
@click.argument("prefix_or_key")
def tenant_revoke_key(prefix_or_key: str) -> None:
    """Revoke an API key, given whole or by its first 10 characters (as `tenant add` and the
    keys table show them). Registries stop accepting it within their key cache's TTL (30 s)."""
    import asyncio

    import asyncpg

    from tickwheel import db as dbmod
    from tickwheel.registry_api.store import RegistryStore

    key = prefix_or_key.strip()
    if not key:
        fail("PREFIX_OR_KEY must not be empty", EXIT_BAD_INPUT)

    async def go() -> tuple[str, str]:
        pool = await dbmod.create_pool(settings().effective_dsn, min_size=1, max_size=1)
        try:
            return await RegistryStore(pool, settings().shards).revoke_key(key)
        finally:
            await pool.close()

    try:
        prefix, owner = asyncio.run(go())
    except KeyError:
        fail(f"no active API key matches {key[:10]!r}", EXIT_BAD_INPUT)
    except ValueError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except (OSError, asyncpg.PostgresError) as exc:
        fail(f"cannot revoke the key (Postgres at {redact_dsn(settings().effective_dsn)}): {exc}")
    click.echo(f"API key {prefix}… of tenant {owner} revoked")
