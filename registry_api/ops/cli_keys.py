"""`tickwheel operator-key add|revoke NAME`: the keys of the operators' endpoints and `/ui`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from tickwheel.cli_support import BadInput, command, with_pool
from tickwheel.registry_api.ops.forms import checked_operator_name

T = TypeVar("T")


def _with_keys(action: Callable[..., Awaitable[T]]) -> T:
    """Run `action(OperatorKeys)` on a one-connection pool (failures: cli_support's lines)."""
    from tickwheel.registry_api.ops.keys import OperatorKeys

    return with_pool(lambda pool: action(OperatorKeys(pool)))


@click.group("operator-key")
def operator_key() -> None:
    """Operator keys: they open the cross-tenant endpoints /v1/ops/… and the /ui status page."""


@command(operator_key, "add")
@click.argument("name")
def operator_key_add(name: str) -> None:
    """Create an operator key for NAME; it is printed once, as the last line."""
    checked_operator_name(name)
    key = _with_keys(lambda keys: keys.create(name))
    click.echo(f"operator key {name} created; the key (shown once, stored only hashed):")
    click.echo(key)


@command(operator_key, "revoke")
@click.argument("name")
def operator_key_revoke(name: str) -> None:
    """Revoke NAME's operator key (a running registry stops accepting it within 5 s)."""
    checked_operator_name(name)
    prefix = _with_keys(lambda keys: keys.revoke(name))
    if prefix is None:
        raise BadInput(f"there is no active operator key named {name!r}")
    click.echo(f"operator key {name} ({prefix}…) revoked")
