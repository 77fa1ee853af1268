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
    """Tenants, their API keys and their caps."""


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


MAX_RUNNING_LIMIT = 1_000_000  # the range of tenants.max_running (migration 0011)


def max_running_of(text: str) -> int | None:
    """`--max-running`: a whole number from 1 to MAX_RUNNING_LIMIT, or `none` (no cap)."""
    if text.strip().lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_RUNNING_LIMIT:
        raise BadInput(
            f"--max-running: must be a whole number from 1 to {MAX_RUNNING_LIMIT}, or 'none' "
            f"to lift the cap, not {text!r}"
        )
    return value


@command(tenant, "cap")
@click.argument("name")
@click.option(
    "--max-running",
    required=True,
    help="Runs of the tenant running at once across all workers; 'none' lifts the cap.",
)
def tenant_cap(name: str, max_running: str) -> None:
    """Cap tenant NAME's runs running at once across the cluster (workers apply it within a
    few seconds); a run the cap holds back waits and runs later, spending no attempt."""
    from tickwheel.registry_api.store import RegistryStore

    cap = max_running_of(max_running)
    s = settings()

    async def set_cap(pool: Any) -> None:
        try:
            await RegistryStore(pool, s.shards).set_max_running(name, cap)
        except KeyError:
            raise BadInput(f"NAME: no tenant named {name!r}") from None

    with_pool(set_cap, s)
    shown = "no cap" if cap is None else f"at most {cap} runs running at once"
    click.echo(f"tenant {name}: {shown}")


@command(tenant, "ls")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def tenant_ls(as_json: bool) -> None:
    """The tenants, each with its cap and, when capped, its runs running now."""
    import orjson

    from tickwheel.registry_api.store import RegistryStore

    s = settings()
    rows = with_pool(lambda pool: RegistryStore(pool, s.shards).tenants(), s)
    if as_json:
        for row in rows:
            row["created_at"] = row["created_at"].isoformat()
            click.echo(orjson.dumps(row).decode())
        return
    click.echo(f"{'TENANT':<24} {'MAX_RUNNING':>11} {'RUNNING':>8}  CREATED")
    for row in rows:
        cap = "-" if row["max_running"] is None else str(row["max_running"])
        running = "-" if row["running"] is None else str(row["running"])
        created = row["created_at"].strftime("%Y-%m-%dT%H:%M:%SZ")
        click.echo(f"{row['name']:<24} {cap:>11} {running:>8}  {created}")
