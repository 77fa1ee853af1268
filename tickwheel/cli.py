"""The `tickwheel` command line: the composition root, one click group that registers each
area's commands (the one module of the ground that imports the areas).

Each area keeps its commands beside its code: `cron` (tickwheel/schedule/cli.py), `dev`
(tickwheel/stack/cli.py), `db`, `gc` and `topics` (tickwheel/core_cli.py), `registry` and
`tenant` (registry_api/cli.py), the operators' `dlq`, `runs`, `jobs`, `calendars`, `status`
and `operator-key` (registry_api/ops/cli_*.py), `scheduler` (shards/cli.py), `worker`
(workers/cli.py). What they share — exit codes, one-line failures, settings, output — is
tickwheel/cli_support.py.

The harnesses' commands, `bench` (bench/cli.py) and `demo` (bench/demo/cli.py), are named here
but imported only when one of them runs: no other command loads harness code, so a worker's
handler registry holds only what its `--handlers` loaded.
"""

from __future__ import annotations

import importlib

import click

from tickwheel import __version__
from tickwheel.core_cli import db, gc, topics
from tickwheel.registry_api.cli import registry, tenant
from tickwheel.registry_api.ops.cli_calendars import calendars
from tickwheel.registry_api.ops.cli_dlq import dlq
from tickwheel.registry_api.ops.cli_jobs import jobs
from tickwheel.registry_api.ops.cli_keys import operator_key
from tickwheel.registry_api.ops.cli_runs import runs
from tickwheel.registry_api.ops.cli_status import status
from tickwheel.schedule.cli import cron
from tickwheel.shards.cli import scheduler
from tickwheel.stack.cli import dev
from tickwheel.workers.cli import worker

# name → (module, attribute, the line `tickwheel --help` shows without importing the module;
# tests/unit/test_cli_registration.py keeps it equal to the command's own)
HARNESS_COMMANDS = {
    "bench": (
        "tickwheel.bench.cli",
        "bench",
        "Benchmarks of the whole system on the local stack (see docs/BENCHMARKS.md).",
    ),
    "demo": (
        "tickwheel.bench.demo.cli",
        "demo",
        "The whole system on the local stack: registry, schedulers, workers, failover, replay.",
    ),
}


def harness_command(name: str) -> click.Command:
    """Import and return the harness command `name`."""
    module, attribute, _ = HARNESS_COMMANDS[name]
    command: click.Command = getattr(importlib.import_module(module), attribute)
    return command


class Main(click.Group):
    """The root group: the areas' commands registered, the harnesses' resolved when run."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *HARNESS_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in HARNESS_COMMANDS:
            return harness_command(cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of `--help`, the harnesses' lines from HARNESS_COMMANDS."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in HARNESS_COMMANDS:
                rows.append((name, click.Command(name, help=HARNESS_COMMANDS[name][2])))
            elif (command := super().get_command(ctx, name)) is not None and not command.hidden:
                rows.append((name, command))
        with formatter.section("Commands"):
            formatter.write_dl([(name, c.get_short_help_str(limit)) for name, c in rows])


@click.group(cls=Main)
@click.version_option(__version__, prog_name="tickwheel")
def main() -> None:
    """tickwheel: a distributed job scheduler."""


for command in (
    cron,
    dev,
    db,
    topics,
    registry,
    tenant,
    operator_key,
    worker,
    scheduler,
    dlq,
    runs,
    jobs,
    calendars,
    gc,
    status,
):
    main.add_command(command)
