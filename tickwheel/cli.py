"""The `tickwheel` command line: one click group, each area's commands in its own module."""

from __future__ import annotations

import click

from tickwheel import __version__
from tickwheel.schedule.cli import cron


@click.group()
@click.version_option(__version__, prog_name="tickwheel")
def main() -> None:
    """tickwheel: a distributed job scheduler."""


main.add_command(cron)
