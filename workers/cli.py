"""`tickwheel worker`: load handler modules, then consume, claim, execute and record runs."""

from __future__ import annotations

import sys

import click


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
    help="Serve Prometheus metrics on 127.0.0.1:PORT.",
)
@click.option("--id", "worker_id", default=None, help="Worker id (default: host-pid-random).")
def worker(
    modules: str, concurrency: int | None, metrics_port: int | None, worker_id: str | None
) -> None:
    """Execute runs from the run topics until SIGTERM/SIGINT."""
    import asyncpg
    import uvloop

    from tickwheel import logs
    from tickwheel.cli_support import EXIT_BAD_INPUT, fail, settings, startup_failed
    from tickwheel.workers.handlers import HandlerLoadError, load_modules
    from tickwheel.workers.service import default_worker_id, serve

    names = [m.strip() for m in modules.split(",") if m.strip()]
    try:
        load_modules(names)
    except HandlerLoadError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    logs.setup()
    s = settings()
    try:
        code = uvloop.run(serve(s, worker_id or default_worker_id(), concurrency, metrics_port))
    except (OSError, asyncpg.PostgresError, asyncpg.ClientConfigurationError) as exc:
        startup_failed("worker", s, exc)
    sys.exit(code)
