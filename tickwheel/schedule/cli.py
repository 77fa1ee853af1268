"""`tickwheel cron …` commands (issue 4)."""

from __future__ import annotations

import click


@click.group()
def cron() -> None:
    """Evaluate cron schedules."""
