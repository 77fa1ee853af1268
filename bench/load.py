"""Registering a benchmark's one-off jobs: in bulk through the store, through Kafka, or HTTP.

Every path ends with the same rows in `jobs`: N one-off jobs of tenant `bench`, job ids
`hot-0000000`…, due at T0 + i x spread / N. `bulk` applies batches through
`RegistryStore.apply` in this process (the registry's own write path without a broker); `kafka`
produces registration messages and runs a real `tickwheel registry --no-http` on them; `http`
POSTs each job to a real `tickwheel registry --no-intake`.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from tickwheel.bench.scratch import TENANT, Scratch
from tickwheel.bench.supervisor import Supervisor, free_port
from tickwheel.clock import format_ms
from tickwheel.domain import run_key
from tickwheel.envelopes.registrations import Registration
from tickwheel.kafka.clients import producer
from tickwheel.queries import QUERIES
from tickwheel.registry_api.document import Limits, parse_document, validate_job
from tickwheel.registry_api.state import Op
from tickwheel.registry_api.store import API_KEY_PREFIX, RegistryStore, hash_key

BULK_BATCH = 5000  # jobs per store transaction
HTTP_CONNECTIONS = 16
POLL_S = 0.25  # seconds between progress polls
REGISTRATION_TIMEOUT_S = 1800.0
REGISTRATIONS = ("bulk", "kafka", "http")


@dataclass(frozen=True)
class Handler:
    """`noop` or `sleep:MS`, as the handler name and payload of the bench jobs."""

    name: str
    payload: dict[str, Any]

    @classmethod
    def parse(cls, text: str) -> Handler:
        if text == "noop":
            return cls("bench.noop", {})
        kind, _, ms = text.partition(":")
        if kind == "sleep" and ms.isdigit():
            return cls("bench.sleep", {"ms": int(ms)})
        raise ValueError("--handler must be noop or sleep:MS (MS a whole number of milliseconds)")


def due_instants(jobs: int, t0_ms: int, spread_ms: int) -> list[int]:
    """Job i is due at T0 + i x spread / jobs: evenly over [T0, T0 + spread)."""
    return [t0_ms + (i * spread_ms) // jobs for i in range(jobs)]


def job_id(i: int) -> str:
    return f"hot-{i:07d}"


def documents(dues: Sequence[int], handler: Handler) -> list[dict[str, Any]]:
    return [
        {"id": job_id(i), "at": format_ms(due), "handler": handler.name, "payload": handler.payload}
        for i, due in enumerate(dues)
    ]


def expected_run_keys(dues: Sequence[int], tenant: str = TENANT) -> list[str]:
    return [run_key(tenant, job_id(i), due) for i, due in enumerate(dues)]


Progress = Callable[[int], None]  # told the total done so far


async def _count_jobs(conn: asyncpg.Connection) -> int:
    count: int = await conn.fetchval(QUERIES["bench_jobs_count"])
    return count


async def _wait_for_jobs(
    conn: asyncpg.Connection, total: int, progress: Progress, fleet: Supervisor
) -> None:
    deadline = time.monotonic() + REGISTRATION_TIMEOUT_S
    while (done := await _count_jobs(conn)) < total:
        progress(done)
        fleet.check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {done} of {total} jobs registered")
        await asyncio.sleep(POLL_S)
    progress(total)


async def register_bulk(
    res: Scratch, docs: Sequence[dict[str, Any]], progress: Progress, tenant: str = TENANT
) -> None:
    await register_bulk_into(res.dsn, res.shards, docs, progress, tenant)


async def register_bulk_into(
    dsn: str,
    shards: int,
    docs: Sequence[dict[str, Any]],
    progress: Progress,
    tenant: str = TENANT,
) -> None:
    """`docs` written through the registry's own store, `BULK_BATCH` per transaction, into
    the database of `dsn` (no topics: what a harness without a fleet needs)."""
    limits = Limits(shards=shards)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        store = RegistryStore(pool, shards)
        done = 0
        for start in range(0, len(docs), BULK_BATCH):
            now = store.clock()
            ops = []
            for raw in docs[start : start + BULK_BATCH]:
                doc = parse_document(raw)
                spec = validate_job(tenant, doc, limits, now)
                ops.append(Op("upsert", tenant, doc.id, spec=spec))
            await store.apply(ops)
            done += len(ops)
            progress(done)
    finally:
        await pool.close()


async def register_kafka(
    res: Scratch, docs: Sequence[dict[str, Any]], fleet: Supervisor, progress: Progress
) -> float:
    """Produce every registration, then let one registry process apply them; returns the
    registry's registrations per second from its spawn to the last job stored."""
    prod = producer(res.kafka)
    for doc in docs:
        value = Registration(op="upsert", tenant=TENANT, job=doc).encode()
        while True:
            try:
                prod.produce(res.topics.registrations, key=doc["id"].encode(), value=value)
                break
            except BufferError:
                prod.poll(0.1)
        prod.poll(0)
    if prod.flush(120) != 0:
        raise RuntimeError("registrations were not all acknowledged by the broker")
    started = time.monotonic()
    fleet.start("registry", ["registry", "--no-http"])
    conn = await asyncpg.connect(res.dsn)
    try:
        await _wait_for_jobs(conn, len(docs), progress, fleet)
    finally:
        await conn.close()
    elapsed = time.monotonic() - started
    fleet.stop(["registry"])
    return len(docs) / elapsed


async def register_http(
    res: Scratch, docs: Sequence[dict[str, Any]], fleet: Supervisor, progress: Progress
) -> float:
    """POST every job to one registry process; returns requests per second."""
    try:
        import httpx
    except ImportError:
        raise RuntimeError("--registration http needs httpx (pip install httpx)") from None
    # A key of the bench tenant, stored as `tickwheel tenant add` stores one (hashed).
    api_key = API_KEY_PREFIX + secrets.token_urlsafe(32)
    conn = await asyncpg.connect(res.dsn)
    try:
        await conn.execute(QUERIES["api_key_insert"], hash_key(api_key), api_key[:10], TENANT)
    finally:
        await conn.close()
    port = free_port()
    fleet.start("registry", ["registry", "--no-intake", "--port", str(port)])
    base = f"http://127.0.0.1:{port}"
    headers = {"authorization": f"Bearer {api_key}", "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
        for _ in range(200):
            fleet.check()
            try:
                if (await client.get("/healthz")).status_code == 200:
                    break
            except httpx.TransportError:
                await asyncio.sleep(0.1)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for doc in docs:
            queue.put_nowait(doc)
        done = [0]

        async def sender() -> None:
            while not queue.empty():
                doc = queue.get_nowait()
                answer = await client.post("/v1/jobs", content=orjson.dumps(doc))
                if answer.status_code not in (200, 201):
                    raise RuntimeError(f"POST of {doc['id']} answered {answer.status_code}")
                done[0] += 1
                if done[0] % 500 == 0:
                    progress(done[0])

        started = time.monotonic()
        await asyncio.gather(*(sender() for _ in range(HTTP_CONNECTIONS)))
        elapsed = time.monotonic() - started
    progress(len(docs))
    fleet.stop(["registry"])
    return len(docs) / elapsed
