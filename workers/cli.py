"""`tickwheel worker`: load handler modules, then consume, claim, execute and record runs."""

from __future__ import annotations

import sys

import click


def reserved_slots_problem(reserved: int, concurrency: int) -> str | None:
    """Why the high-priority reservation cannot work with this concurrency, or None: reserving
    every slot (or more) would leave normal and low runs none, so they would never run."""
    if reserved >= concurrency:
        return (
            f"TICKWHEEL_WORKER_HIGH_RESERVED_SLOTS ({reserved}) must be less than the "
            f"worker's concurrency ({concurrency}), else normal and low priority runs never "
            "get a slot"
        )
    return None


@click.command("worker")
@click.option(
    "--handlers",
    "modules",
    default="",
    help="Comma-separated modules to import; their @handler functions become available.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 10_000),
    default=None,
    help="Runs executed at once (default: TICKWHEEL_WORKER_CONCURRENCY).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on PORT (of --metrics-host).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics listener binds; 0.0.0.0 (every interface) lets a Prometheus "
    "on another host scrape it.",
)
@click.option("--id", "worker_id", default=None, help="Worker id (default: host-pid-random).")
def worker(
    modules: str,
    concurrency: int | None,
    metrics_port: int | None,
    metrics_host: str,
    worker_id: str | None,
) -> None:
    """Execute runs from the run topics until SIGTERM/SIGINT."""
    import asyncpg
    import uvloop

    from tickwheel import logs
    from tickwheel.cli_support import EXIT_BAD_INPUT, fail, settings, startup_failed
    from tickwheel.deployment import WrongDeployment
    from tickwheel.workers.handlers import HandlerLoadError, load_modules
    from tickwheel.workers.service import default_worker_id, serve

    names = [m.strip() for m in modules.split(",") if m.strip()]
    try:
        load_modules(names)
    except HandlerLoadError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    s = settings()
    problem = reserved_slots_problem(
        s.worker_high_reserved_slots, concurrency or s.worker_concurrency
    )
    if problem is not None:
        fail(problem, EXIT_BAD_INPUT)
    logs.setup()
    try:
        code = uvloop.run(
            serve(s, worker_id or default_worker_id(), concurrency, metrics_port, metrics_host)
        )
    except WrongDeployment as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except (OSError, asyncpg.PostgresError, asyncpg.ClientConfigurationError) as exc:
        startup_failed("worker", s, exc)
    sys.exit(code)
