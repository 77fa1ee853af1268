"""`tickwheel registry` (the HTTP API and the Kafka intake) and `tickwheel tenant …`."""

from __future__ import annotations

import sys
from typing import Any

import click

from tickwheel.cli_support import (
    EXIT_BAD_INPUT,
    BadInput,
    command,
    emit_json,
    fail,
    settings,
    startup_failed,
    table,
    with_pool,
)
from tickwheel.domain import TENANT_FORM, TENANT_PATTERN


@click.command("registry")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--no-http", is_flag=True, help="Run only the Kafka registration intake.")
@click.option("--no-intake", is_flag=True, help="Run only the HTTP API.")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on a listener of their own (with --no-http, the only way "
    "to get the intake's); with HTTP they are at /metrics too.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the --metrics-port listener binds (0.0.0.0: every interface).",
)
def registry(
    host: str,
    port: int,
    no_http: bool,
    no_intake: bool,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Serve the HTTP API and the Kafka registration intake until SIGINT/SIGTERM."""
    import asyncpg
    import uvloop

    from tickwheel import logs
    from tickwheel.deployment import WrongDeployment
    from tickwheel.registry_api.service import serve

    if no_http and no_intake:
        fail("--no-http and --no-intake together leave nothing to run", EXIT_BAD_INPUT)
    logs.setup()
    s = settings()
    try:
        code = uvloop.run(
            serve(
                s,
                host,
                port,
                http=not no_http,
                intake=not no_intake,
                metrics_port=metrics_port,
                metrics_host=metrics_host,
            )
        )
    except WrongDeployment as exc:
        fail(str(exc), EXIT_BAD_INPUT)
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


NONE_WORDS = ("none", "off")  # an option given so lifts its quota
MAX_COUNT = 1_000_000_000  # the largest job count or burst a quota takes (an integer column)


def _bound(value: float) -> str:
    """A quota's bound as written in a sentence: 1000000, not 1e+06; 0.001 as is."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _quota_value(name: str, value: str, parse: Any, low: float, high: float) -> Any:
    """An option's quota: None (lifted) or a number in [`low`, `high`]."""
    if value.strip().lower() in NONE_WORDS:
        return None
    try:
        number = parse(value)
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        kind = "an integer" if parse is int else "a number"
        raise BadInput(
            f"{name}: must be {kind} from {_bound(low)} to {_bound(high)}, or 'none'; not {value!r}"
        )
    return number


@command(tenant, "quota")
@click.argument("name")
@click.option("--max-jobs", help="Jobs the tenant may have registered at once; 'none' lifts it.")
@click.option(
    "--max-registrations-per-s",
    help="Registrations (any operation, HTTP or Kafka) per second; 'none' lifts it.",
)
@click.option(
    "--registrations-burst",
    help="Registrations that may come at once; 'none': one second's worth of the rate.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the tenant as JSON.")
def tenant_quota(
    name: str,
    max_jobs: str | None,
    max_registrations_per_s: str | None,
    registrations_burst: str | None,
    as_json: bool,
) -> None:
    """Show or set tenant NAME's quotas; options not given stay as they are. Every registry
    process enforces a change from its next batch on."""
    from tickwheel.registry_api.store import RegistryStore

    # Each bound as migration 0012's constraints and the integer columns allow.
    given = {
        "max_jobs": ("--max-jobs", max_jobs, int, 0, MAX_COUNT),
        "max_registrations_per_s": (
            "--max-registrations-per-s",
            max_registrations_per_s,
            float,
            0.001,
            1_000_000,
        ),
        "registrations_burst": ("--registrations-burst", registrations_burst, int, 1, MAX_COUNT),
    }
    changes = {
        column: _quota_value(option, value, parse, low, high)
        for column, (option, value, parse, low, high) in given.items()
        if value is not None
    }
    s = settings()

    async def change(pool: Any) -> dict[str, Any]:
        store = RegistryStore(pool, s.shards)
        try:
            if changes:
                return await store.set_quotas(name, changes)
            [view] = await store.tenants(name)
        except (KeyError, ValueError):  # no row: set_quotas's KeyError, or nothing to unpack
            raise BadInput(f"no tenant {name!r} (tickwheel tenant ls lists them)") from None
        return view

    view = with_pool(change, s)
    if as_json:
        emit_json(view)
        return
    click.echo(_tenants_table([view]))


def _limit(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _tenants_table(items: list[dict[str, Any]]) -> str:
    return table(
        (
            "TENANT",
            "JOBS",
            "MAX_JOBS",
            "MAX_REG/S",
            "BURST",
            "MAX_RUNNING",
            "RUNNING",
            "KEYS",
            "CREATED",
        ),
        [
            (
                t["tenant"],
                t["jobs"],
                _limit(t["max_jobs"]),
                _limit(t["max_registrations_per_s"]),
                _limit(t["registrations_burst"]),
                _limit(t["max_running"]),
                _limit(t["running"]),
                t["active_keys"],
                t["created_at"],
            )
            for t in items
        ],
    )


@command(tenant, "ls")
@click.option("--json", "as_json", is_flag=True, help='Print {"items": [...]} as JSON.')
def tenant_ls(as_json: bool) -> None:
    """List tenants with their registered jobs, quotas and cap ('-': none), their runs running
    now when capped, and their active keys."""
    from tickwheel.registry_api.store import RegistryStore

    s = settings()
    items = with_pool(lambda pool: RegistryStore(pool, s.shards).tenants(), s)
    if as_json:
        emit_json({"items": items})
    elif not items:
        click.echo("no tenants (tickwheel tenant add NAME creates one)")
    else:
        click.echo(_tenants_table(items))


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
