"""`tickwheel demo [--duration S] [--hot N] [--keep]`: what `make demo` runs (tour.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import click

from tickwheel.cli_support import fail, settings


@contextlib.contextmanager
def _interrupt_as_error() -> Iterator[None]:
    try:
        yield
    except KeyboardInterrupt:
        raise RuntimeError("demo: interrupted; stopped what it had started") from None


@click.command("demo")
@click.option(
    "--duration",
    type=click.FloatRange(10, 3600),
    default=60.0,
    show_default=True,
    help="Seconds of live view before the failover.",
)
@click.option(
    "--hot",
    type=click.IntRange(0, 1_000_000),
    default=10_000,
    show_default=True,
    help="One-off jobs registered for the same second.",
)
@click.option("--keep", is_flag=True, help="Leave the processes running at the end.")
def demo(duration: float, hot: int, keep: bool) -> None:
    """The whole system on the local stack: registry, schedulers, workers, failover, replay."""
    from tickwheel.core_cli import db_migrate
    from tickwheel.stack.cli import dev_up

    ctx = click.get_current_context()
    ctx.invoke(dev_up)
    ctx.invoke(db_migrate)
    from tickwheel.bench.demo.tour import Demo, DemoOptions

    runner = Demo(settings(), click.echo, DemoOptions(duration, hot, keep))
    try:
        with _interrupt_as_error(), contextlib.ExitStack() as stack:
            ok = runner.run(stack)
    except RuntimeError as exc:
        fail(str(exc))
    if not ok:
        fail("demo: the ledger check failed (see lost/duplicates above)")
