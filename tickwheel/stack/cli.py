"""`tickwheel dev …`: the local stack (up, down, status, env) and its Docker twin (containers)."""

from __future__ import annotations

import os
import sys

import click

from tickwheel.cli_support import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, fail, settings
from tickwheel.stack.stack import DevStack, ServiceStatus


@click.group()
def dev() -> None:
    """The local stack: real Postgres, Kafka (KRaft) and ZooKeeper under .devstack/."""


def _stack() -> DevStack:
    if os.environ.get("TICKWHEEL_STACK", "local") == "testcontainers":
        fail(
            "TICKWHEEL_STACK=testcontainers: run `tickwheel dev containers` (needs Docker)",
            EXIT_BAD_INPUT,
        )
    return DevStack(settings(), echo=lambda line: click.echo(line, err=True))


def _print_statuses(statuses: list[ServiceStatus]) -> bool:
    for st in statuses:
        mark = "healthy  " if st.healthy else "UNHEALTHY"
        origin = "dev" if st.managed else "env"
        click.echo(f"{st.name:<10} {mark} {origin}  {st.address}  {st.detail}")
    return all(st.healthy for st in statuses)


@dev.command("up")
def dev_up() -> None:
    """Start the stack (idempotent), wait for health, create the topics."""
    from tickwheel.stack.errors import StackError

    try:
        healthy = _print_statuses(_stack().up())
    except StackError as exc:
        fail(str(exc))
    if not healthy:
        sys.exit(EXIT_ENVIRONMENT)


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
        sys.exit(EXIT_ENVIRONMENT)


@dev.command("env")
def dev_env() -> None:
    """Print eval-able exports of the service addresses."""
    for line in _stack().env_lines():
        click.echo(line)


@dev.command("containers")
def dev_containers() -> None:
    """Run the three services in Docker with testcontainers until Ctrl-C (needs Docker)."""
    from tickwheel.stack.containers import run_forever

    run_forever(settings(), echo=click.echo)
