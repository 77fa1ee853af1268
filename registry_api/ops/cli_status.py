"""`tickwheel status [--watch [--interval S]] [--json]`: one screen of the deployment named by
TICKWHEEL_TOPIC_PREFIX (status.py collects it, status_view.py draws it); exit 1 when a source
could not be read."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import click

from tickwheel.config import Settings
from tickwheel.registry_api.ops.status import Snapshot, collect

WATCH_INTERVAL_S = 2.0  # default refresh of --watch, seconds


def watch(
    settings: Settings,
    interval_s: float,
    show: Callable[[Snapshot], None],
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Collect and `show` every `interval_s` until `stop()` (or Ctrl-C)."""
    previous: Snapshot | None = None
    while not stop():
        started = time.monotonic()
        previous = asyncio.run(collect(settings, previous))
        show(previous)
        time.sleep(max(0.0, interval_s - (time.monotonic() - started)))


@click.command("status")
@click.option("--watch", "watching", is_flag=True, help="Refresh until Ctrl-C.")
@click.option(
    "--interval",
    type=click.FloatRange(0.5, 3600),
    default=WATCH_INTERVAL_S,
    show_default=True,
    help="Seconds between refreshes with --watch.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one document per refresh).")
def status(watching: bool, interval: float, as_json: bool) -> None:
    """Shards (holder, owner, epoch, wheel, behind), dispatch lag, backlog, DLQ, workers."""
    import sys

    from tickwheel.cli_support import EXIT_ENVIRONMENT, emit_json, fail, settings
    from tickwheel.registry_api.ops.status_view import render_rich, render_text

    s = settings()
    if not watching:
        snap = asyncio.run(collect(s))
        if as_json:
            emit_json(snap.to_json())
        else:
            click.echo(render_text(snap))
        sys.exit(EXIT_ENVIRONMENT if snap.errors else 0)
    try:
        if as_json:
            watch(s, interval, lambda snap: emit_json(snap.to_json(), indent=False))
        elif sys.stdout.isatty():
            from rich.live import Live

            with Live(auto_refresh=False) as live:
                watch(s, interval, lambda snap: live.update(render_rich(snap), refresh=True))
        else:
            watch(s, interval, lambda snap: click.echo(render_text(snap) + "\n"))
    except KeyboardInterrupt:
        return
    except OSError as exc:  # stdout closed (a pipe to `head`), or similar
        fail(str(exc))
