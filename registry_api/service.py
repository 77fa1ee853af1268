"""The `tickwheel registry` process: the HTTP API and the registration intake on one loop.

Both are parts of one `tickwheel.runtime.Process`: SIGINT/SIGTERM stop them together (the
intake finishes its batch and commits), and a part that dies — the intake's loop raising, the
HTTP server failing to bind — is logged with its traceback and ends the process with exit
code 1 (I9). `/healthz` reads the parts' health records.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

from tickwheel import db
from tickwheel.config import Settings
from tickwheel.kafka.clients import consumer, producer
from tickwheel.kafka.producing import PRODUCER_MESSAGE_MAX_BYTES
from tickwheel.queries import QUERIES
from tickwheel.registry_api.auto_pause import AutoPause
from tickwheel.registry_api.document import Limits
from tickwheel.registry_api.intake import RegistrationIntake
from tickwheel.registry_api.metrics import Metrics
from tickwheel.registry_api.on_demand import RunLimits
from tickwheel.registry_api.store import RegistryStore
from tickwheel.runtime import PartState, Process, tune_gc
from tickwheel.topics import Topics

if TYPE_CHECKING:
    import uvicorn

log = logging.getLogger("tickwheel.registry")
IDLE_IN_TRANSACTION_MS = 30_000  # ms a registry session may sit idle inside a transaction


def limits_of(settings: Settings) -> Limits:
    return Limits(
        payload_limit_bytes=settings.payload_limit_bytes,
        target_allowlist=tuple(settings.target_allowlist),
        shards=settings.shards,
    )


def run_limits_of(settings: Settings) -> RunLimits:
    return RunLimits(
        backfill_max_runs=settings.backfill_max_runs,
        backfill_rate_per_s=settings.backfill_rate_per_s,
        retention_days=settings.retention_days,
    )


def intake_group(settings: Settings) -> str:
    """The consumer group every registry process of one deployment (topic prefix) joins."""
    return f"{settings.topic_prefix}.registry"


def make_intake(
    store: RegistryStore, settings: Settings, health: PartState | None = None
) -> RegistrationIntake:
    topics = Topics(settings.topic_prefix)
    return RegistrationIntake(
        store,
        limits_of(settings),
        consumer(
            settings.effective_kafka,
            intake_group(settings),
            **{
                "client.id": f"registry-{uuid.uuid4().hex[:8]}",
                "session.timeout.ms": settings.kafka_session_timeout_ms,
            },
        ),
        # Set explicitly: the intake sizes every rejection to fit under it.
        producer(settings.effective_kafka, **{"message.max.bytes": PRODUCER_MESSAGE_MAX_BYTES}),
        # The stall watch's probe: the same group, never subscribed, committing nothing.
        consumer(
            settings.effective_kafka,
            intake_group(settings),
            **{"client.id": "registry-probe", "enable.auto.commit": False},
        ),
        topics.registrations,
        topics.rejected,
        settings.intake_batch,
        require_signature=settings.intake_require_signature,
        signature_window_s=settings.intake_signature_window_s,
        stall_s=settings.intake_stall_s,
        message_max_bytes=PRODUCER_MESSAGE_MAX_BYTES,
        health=health,
    )


def http_server(app: object, host: str, port: int) -> uvicorn.Server:
    """uvicorn, minus its own signal handling: SIGINT/SIGTERM belong to the process runner
    (uvicorn's would end the HTTP part before the process is told to stop: a "death")."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(
        uvicorn.Config(
            app,  # type: ignore[arg-type]
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            lifespan="off",
        )
    )


async def run_http(server: uvicorn.Server, stop: asyncio.Event) -> None:
    """Serve until `stop`; a server that cannot start raises (uvicorn would exit instead)."""

    async def stop_when_asked() -> None:
        await stop.wait()
        server.should_exit = True

    watcher = asyncio.create_task(stop_when_asked())
    try:
        await server.serve()
    except SystemExit as exc:  # uvicorn's answer to a port in use or another start-up failure
        raise RuntimeError(
            f"the HTTP server could not start on {server.config.host}:{server.config.port} "
            f"(see the error logged before; exit status {exc.code})"
        ) from None
    finally:
        watcher.cancel()


async def serve(
    settings: Settings,
    host: str,
    port: int,
    *,
    http: bool = True,
    intake: bool = True,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
) -> int:
    """Run until SIGINT/SIGTERM or a part's death; return the process's exit code.

    The metrics are served at the HTTP API's `/metrics`; `metrics_port` serves them on a
    listener of their own too (`--metrics-port`), which is how a registry that runs only the
    intake (`--no-http`) exports the intake's."""
    tune_gc()
    process = Process("registry")
    # A registry frozen inside a batch's transaction (GC, SIGSTOP) would hold its jobs' rows
    # until continued; other registry processes writing those jobs would wait for it. (Shard
    # leaders do not: their claims skip held rows.)
    pool = await db.create_pool(
        settings.effective_dsn,
        min_size=2,
        max_size=10,
        server_settings={
            "idle_in_transaction_session_timeout": str(IDLE_IN_TRANSACTION_MS),
            # No statement of the registry's gains from JIT; a plan costed over its threshold
            # (a page's read on a large ledger) paid 0.1-1 s compiling (ops_views bench).
            "jit": "off",
        },
    )
    # No job of a database of another deployment is written or served (D-048).
    try:
        await db.check_deployment(pool, settings.topic_prefix, "registry")
    except BaseException:
        await pool.close()
        raise
    process.on_close(pool.close)
    store = RegistryStore(pool, settings.shards, runs=run_limits_of(settings))
    metrics = Metrics()  # the HTTP part serves them; the intake counts into them too
    if metrics_port is not None:
        from prometheus_client import start_http_server

        server, _ = start_http_server(metrics_port, addr=metrics_host, registry=metrics.registry)

        async def close_metrics() -> None:
            await asyncio.to_thread(server.shutdown)

        process.on_close(close_metrics)
    # Pause on failure: every registry process looks; the first pause of a job wins.
    auto_pause = AutoPause(store, on_pause=lambda t: metrics.paused_on_failure.labels(t).inc())
    process.spawn("auto-pause", auto_pause.run(process.stop))
    if intake:
        taker = make_intake(store, settings, health=process.state("intake"))
        taker.on_batch = metrics.intake_batch
        process.on_close(taker.close)
        process.spawn("intake", taker.run(process.stop))
    if http:
        from tickwheel.registry_api.http import create_app
        from tickwheel.registry_api.ops.routes_views import interrupt_replays

        secret = await pool.fetchval(QUERIES["csrf_secret"])  # shared by the registries
        app = create_app(
            store,
            limits_of(settings),
            parts=process.health,
            metrics=metrics,
            csrf_secret=None if secret is None else bytes(secret),
        )
        # Closed in reverse: this runs before the pool closes, so the audit gets its end.
        process.on_close(partial(interrupt_replays, app))
        process.spawn("http", run_http(http_server(app, host, port), process.stop))
    log.info(
        "registry started",
        extra={
            "host": host,
            "port": port,
            "http": http,
            "intake": intake,
            "metrics_port": metrics_port,
        },
    )
    code = await process.run()
    log.info("registry stopped", extra={"exit_code": code})
    return code
