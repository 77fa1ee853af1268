"""`tickwheel registry` (the HTTP API and the Kafka intake) and `tickwheel tenant …`."""

from __future__ import annotations

import sys
from typing import Any

import click

from tickwheel.cli_support import (
    EXIT_BAD_INPUT,
    BadInput,
    command,
    fail,
    settings,
    startup_failed,
    with_pool,
)
from tickwheel.domain import TENANT_FORM, TENANT_PATTERN


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
    except (OSError, asyncpg.PostgresError, asyncpg.ClientConfigurationError) as exc:
        startup_failed("registry", s, exc)
    # Non-zero when a part died (logged with its traceback): supervisors restart on it.
    sys.exit(code)


@click.group()
def tenant() -> None:
    """Tenants and their API keys."""


@command(tenant, "add")
@click.argument("name")
def tenant_add(name: str) -> None:
    """Create tenant NAME; its API key is printed once, as the last line."""
    from tickwheel.registry_api.store import RegistryStore

    if not TENANT_FORM.fullmatch(name):
        raise BadInput(f"name: must match {TENANT_PATTERN[1:-1]}, not {name!r}")
    s = settings()
    key = with_pool(lambda pool: RegistryStore(pool, s.shards).create_tenant(name), s)
    click.echo(f"tenant {name} created; its API key (shown once):")
    click.echo(key)


@command(tenant, "revoke-key")
@click.argument("prefix_or_key")
def tenant_revoke_key(prefix_or_key: str) -> None:
    """Revoke an API key, given whole or by its first 10 characters (as `tenant add` and the
    keys table show them). Registries stop accepting it within their key cache's TTL (30 s)."""
    from tickwheel.registry_api.store import RegistryStore

    key = prefix_or_key.strip()
    if not key:
        raise BadInput("PREFIX_OR_KEY must not be empty")
    s = settings()

    async def revoke(pool: Any) -> tuple[str, str]:
        try:
            return await RegistryStore(pool, s.shards).revoke_key(key)
        except KeyError:
            raise BadInput(f"no active API key matches {key[:10]!r}") from None
        except ValueError as exc:
            raise BadInput(str(exc)) from None

    prefix, owner = with_pool(revoke, s)
    click.echo(f"API key {prefix}… of tenant {owner} revoked")
