"""The `tickwheel registry` process: the HTTP API and the registration intake on one loop."""

from __future__ import annotations

import asyncio
import logging
import signal
import uuid

from tickwheel import db
from tickwheel.config import Settings
from tickwheel.kafka import consumer, producer
from tickwheel.registry_api.document import Limits
from tickwheel.registry_api.intake import RegistrationIntake
from tickwheel.registry_api.store import RegistryStore
from tickwheel.runtime import tune_gc
from tickwheel.topics import Topics

log = logging.getLogger("tickwheel.registry")


def limits_of(settings: Settings) -> Limits:
    return Limits(
        payload_limit_bytes=settings.payload_limit_bytes,
        target_allowlist=tuple(settings.target_allowlist),
        shards=settings.shards,
    )


def intake_group(settings: Settings) -> str:
    """The consumer group every registry process of one deployment (topic prefix) joins."""
    return f"{settings.topic_prefix}.registry"


def make_intake(store: RegistryStore, settings: Settings) -> RegistrationIntake:
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
        producer(settings.effective_kafka),
        topics.registrations,
        topics.rejected,
        settings.intake_batch,
    )


async def serve(
    settings: Settings, host: str, port: int, *, http: bool = True, intake: bool = True
) -> None:
    """Run until SIGINT/SIGTERM; the intake finishes its batch and commits before exiting."""
    import uvicorn

    tune_gc()
    pool = await db.create_pool(settings.effective_dsn, min_size=2, max_size=10)
    store = RegistryStore(pool, settings.shards)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks: list[asyncio.Task[None]] = []
    server = None
    taker = None
    if intake:
        taker = make_intake(store, settings)
        tasks.append(asyncio.create_task(taker.run(stop), name="intake"))
    if http:
        from tickwheel.registry_api.http import create_app

        app = create_app(store, limits_of(settings))
        server = uvicorn.Server(
            uvicorn.Config(
                app, host=host, port=port, log_config=None, access_log=False, lifespan="off"
            )
        )
        tasks.append(asyncio.create_task(server.serve(), name="http"))
    log.info("registry started", extra={"host": host, "port": port, "http": http, "intake": intake})
    try:
        await stop.wait()
    finally:
        if server is not None:
            server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)
        if taker is not None:
            await taker.close()
        await pool.close()
        log.info("registry stopped")
