"""`tickwheel calendars ls|show|put|rm --tenant T`: a tenant's exclusion calendars (D-286), for
operators with database access.

Reads and writes go straight to Postgres through the registry's own calendar store
(registry_api/calendars.py), the one path HTTP and the Kafka intake take: the same checks, the
same refusals. Tables by default, JSON with `--json`; errors are one line
(tickwheel/cli_support.py): exit 2 for input the command refuses (a calendar at fault names its
field, a calendar still named names the jobs), 1 for an environment that is not as needed.
"""

from __future__ import annotations

import sys
from typing import IO, Any

import click
import orjson

from tickwheel.cli_support import BadInput, command, emit_json, listing, settings, with_pool
from tickwheel.registry_api.ops.forms import checked_tenant


def _tenant_option(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        return checked_tenant(value)
    except BadInput as exc:
        raise click.BadParameter(str(exc)) from None


_TENANT = click.option(
    "--tenant", required=True, callback=_tenant_option, help="The calendars' tenant."
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group()
def calendars() -> None:
    """A tenant's exclusion calendars, for operators with database access."""


def _checked_name(name: str) -> None:
    from tickwheel.registry_api.calendars import check_name
    from tickwheel.registry_api.document import JobValidationError

    try:
        check_name(name)
    except JobValidationError as exc:
        raise BadInput(str(exc)) from None


async def _require_tenant(pool: Any, tenant: str) -> None:
    from tickwheel.registry_api.store import RegistryStore

    if not await RegistryStore(pool, settings().shards).existing_tenants([tenant]):
        raise BadInput(f"no tenant {tenant!r} (tickwheel tenant ls lists them)")


@command(calendars, "ls")
@_TENANT
@_JSON
def calendars_ls(tenant: str, as_json: bool) -> None:
    """The tenant's calendars, by name."""
    from tickwheel.registry_api.calendars import list_all

    found = with_pool(lambda pool: list_all(pool, tenant))
    listing(
        [c.body() for c in found],
        as_json,
        empty=f"tenant {tenant!r} has no calendars",
        headers=("NAME", "TIMEZONE", "DATES", "WEEKDAYS", "DAILY", "CRON", "VERSION", "UPDATED"),
        row=lambda c: (
            c["name"],
            c["timezone"],
            len(c["dates"]),
            ",".join(c["weekdays"]),
            len(c["daily"]),
            len(c["cron"]),
            c["version"],
            c["updated_at"],
        ),
    )


@command(calendars, "show")
@click.argument("name")
@_TENANT
@_JSON
def calendars_show(name: str, tenant: str, as_json: bool) -> None:
    """One calendar: its version and its document."""
    from tickwheel.registry_api.calendars import get

    _checked_name(name)
    found = with_pool(lambda pool: get(pool, tenant, name))
    if found is None:
        raise BadInput(f"tenant {tenant!r} has no calendar named {name!r}")
    if as_json:
        emit_json(found.body())
        return
    click.echo(f"{'calendar':<10} {tenant}/{name}")
    click.echo(f"{'version':<10} {found.version}")
    click.echo(f"{'updated':<10} {found.updated_at}")
    click.echo("document:")
    click.echo(orjson.dumps(found.document, option=orjson.OPT_INDENT_2).decode())


def _read_document(source: IO[bytes]) -> Any:
    where = "stdin" if source is sys.stdin.buffer else "--file"
    try:
        return orjson.loads(source.read())
    except orjson.JSONDecodeError as exc:
        raise BadInput(f"{where} is not JSON: {exc}") from None


@command(calendars, "put")
@click.argument("name")
@_TENANT
@click.option(
    "--file",
    "source",
    type=click.File("rb"),
    default="-",
    help="The calendar document (JSON, as PUT /v1/calendars/{name} takes). [default: stdin]",
)
@_JSON
def calendars_put(name: str, tenant: str, source: IO[bytes], as_json: bool) -> None:
    """Create or replace calendar NAME of the tenant (the same document again changes nothing)."""
    from tickwheel.registry_api.calendars import CalendarOutcome, check_calendar, put
    from tickwheel.registry_api.document import JobValidationError

    _checked_name(name)
    try:
        document = check_calendar(name, _read_document(source))
    except JobValidationError as exc:
        raise BadInput(str(exc)) from None

    async def write(pool: Any) -> Any:
        await _require_tenant(pool, tenant)
        return await put(pool, tenant, name, document)

    result = with_pool(write)
    if result.outcome is CalendarOutcome.OVER_LIMIT:
        raise BadInput(f"{tenant}/{name}: {result.detail}")
    assert result.calendar is not None
    if as_json:
        emit_json({"result": result.outcome.value, **result.calendar.body()})
    else:
        click.echo(f"{tenant}/{name}: {result.outcome.value} (version {result.calendar.version})")


@command(calendars, "rm")
@click.argument("name")
@_TENANT
@click.option(
    "--force",
    is_flag=True,
    help="Delete even while jobs name it: they then run as if it excluded nothing.",
)
@_JSON
def calendars_rm(name: str, tenant: str, force: bool, as_json: bool) -> None:
    """Delete calendar NAME of the tenant; refused while jobs name it, unless --force."""
    from tickwheel.registry_api.calendars import CalendarOutcome, delete

    _checked_name(name)
    result = with_pool(lambda pool: delete(pool, tenant, name, force=force))
    if result.outcome is CalendarOutcome.NOT_FOUND:
        raise BadInput(f"tenant {tenant!r} has no calendar named {name!r}")
    if result.outcome is CalendarOutcome.IN_USE:
        raise BadInput(f"{tenant}/{name}: {result.detail.replace('with force', 'with --force')}")
    if as_json:
        emit_json({"calendar": f"{tenant}/{name}", "result": result.outcome.value})
    else:
        click.echo(f"{tenant}/{name}: {result.outcome.value}")
