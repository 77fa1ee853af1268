"""What every area's commands share: the settings, and failing with one line.

Errors a user can fix (bad input, missing tools, unreachable services) end with one line on
stderr and a non-zero exit (2 for bad input, 1 for an unhealthy environment), never a
traceback.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from tickwheel.config import ConfigError, Settings, load_settings

EXIT_UNHEALTHY = 1  # the environment is not as needed (a service down, a tool missing)
EXIT_BAD_INPUT = 2  # the user's input or settings are wrong


def fail(message: str, code: int = EXIT_UNHEALTHY) -> NoReturn:
    """Print `tickwheel: <message>` on stderr and exit with `code`."""
    click.echo(f"tickwheel: {message}", err=True)
    sys.exit(code)


def settings() -> Settings:
    """The settings, or exit 2 naming the bad setting."""
    try:
        return load_settings()
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
