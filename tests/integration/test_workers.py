"""Workers on the real stack: claims are exclusive, results are fenced and recorded before
offsets move, a crash at any step executes nothing twice and loses no dead letter, retries
follow full-jitter bounds, priorities share the slots by weight, HTTP targets are checked.

The scheduler is not needed: each test creates the job and job_runs rows the way the run
lifecycle contract (tickwheel/domain.py) says the leader does, publishes the envelopes itself,
and plays the sweeper's part (attempt + 1, re-publish) where a test needs a re-dispatch.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg
import httpx
import orjson
import pytest
from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition

from tickwheel import PermanentError, db, handler
from tickwheel.clock import format_ms, now_ms
from tickwheel.config import Settings, load_settings
from tickwheel.crash_points import FAULT_EXIT_CODE
from tickwheel.deployment import worker_group
from tickwheel.domain import PRIORITIES, run_key
from tickwheel.envelopes.dead_letters import DeadLetter, UnreadableRun
from tickwheel.envelopes.run import AGAIN_HEADER, RunEnvelope
from tickwheel.kafka.clients import admin_client, producer
from tickwheel.registry_api.document import Limits
from tickwheel.registry_api.http import create_app
from tickwheel.registry_api.store import RegistryStore
from tickwheel.run_seal import SEAL_HEADER, RunSeal
from tickwheel.runtime import Process
from tickwheel.stack import Addresses
from tickwheel.testing import drain, own_database, produce, unique_topics
from tickwheel.topics import Topics
from tickwheel.workers.handlers import Context
from tickwheel.workers.host_limits import HORIZON_S
from tickwheel.workers.service import Worker, make_worker

from .conftest import SchedEnv

pytestmark = pytest.mark.integration

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")
HERE = str(Path(__file__).resolve().parent)
BASE_MS = 1_900_000_000_000  # an instant to schedule test runs at (2030)


# --- rows and envelopes, as the scheduler would make them --------------------------------------


@dataclass
class RunSpec:
    job_id: str
    scheduled_ms: int = BASE_MS
    priority: str = "normal"
    handler: str | None = "test.record"
    target: dict[str, Any] | None = None
    payload: Any = field(default_factory=dict)
    attempt: int = 1
    max_attempts: int = 3
    base_ms: int = 1000
    cap_ms: int = 5000
    timeout_ms: int = 10_000

    def envelope(self, tenant: str) -> RunEnvelope:
        return RunEnvelope(
            run_key=run_key(tenant, self.job_id, self.scheduled_ms),
            tenant=tenant,
            job_id=self.job_id,
            scheduled_at=self.scheduled_ms,
            attempt=self.attempt,
            epoch=1,
            priority=self.priority,
            payload=self.payload,
            timeout_ms=self.timeout_ms,
            handler=self.handler,
            target=self.target,
        )


async def create_runs(dsn: str, tenant: str, specs: list[RunSpec]) -> None:
    """The tenant, one job per spec and its run row `published` at the spec's attempt."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("INSERT INTO tenants (name) VALUES ($1) ON CONFLICT DO NOTHING", tenant)
        await conn.executemany(
            "INSERT INTO jobs (tenant, job_id, shard_id, kind, run_at, handler, target,"
            " priority, max_attempts, backoff_base_ms, backoff_cap_ms, timeout_ms, payload,"
            " document)"
            " VALUES ($1, $2, 0, 'once', 'epoch'::timestamptz + $3 * interval '1 ms', $4,"
            " $5::jsonb, $6, $7, $8, $9, $10, $11::jsonb, '{}') ON CONFLICT DO NOTHING",
            [
                (
                    tenant,
                    s.job_id,
                    s.scheduled_ms,
                    s.handler,
                    None if s.target is None else orjson.dumps(s.target).decode(),
                    s.priority,
                    s.max_attempts,
                    s.base_ms,
                    s.cap_ms,
                    s.timeout_ms,
                    orjson.dumps(s.payload).decode(),
                )
                for s in specs
            ],
        )
        await conn.executemany(
            "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status,"
            " attempt, epoch, max_attempts, lease_until, published_at)"
            " VALUES ($1, $2, 'epoch'::timestamptz + $3 * interval '1 ms', 0, $4, 'published',"
            " $5, 1, $6, now() + interval '60 s', now())",
            [
                (tenant, s.job_id, s.scheduled_ms, s.priority, s.attempt, s.max_attempts)
                for s in specs
            ],
        )
    finally:
        await conn.close()


async def redispatch(dsn: str, tenant: str, spec: RunSpec) -> RunSpec:
    """What the scheduler does to a retrying run (or the sweeper to a lapsed one): attempt + 1,
    pending with a publish lease; returns the spec of the new dispatch."""
    conn = await asyncpg.connect(dsn)
    try:
        status = await conn.execute(
            "UPDATE job_runs SET status = 'pending', attempt = attempt + 1, retry_at = NULL,"
            " lease_until = now() + interval '60 s'"
            " WHERE tenant = $1 AND job_id = $2 AND attempt = $3",
            tenant,
            spec.job_id,
            spec.attempt,
        )
        assert status == "UPDATE 1"
    finally:
        await conn.close()
    return replace(spec, attempt=spec.attempt + 1)


def publish(
    kafka: str,
    topics: Topics,
    tenant: str,
    specs: list[RunSpec],
    seal_key: bytes | None = None,
    again: bool = False,
) -> None:
    """The specs' envelopes on their run topics; sealed under `seal_key` as a leader seals them
    (tickwheel/run_seal.py), else unsealed, as anyone else's; `again`: with the header of a
    leader's re-publish (I4)."""
    prod = producer(kafka)
    for spec in specs:
        env = spec.envelope(tenant)
        value = env.encode()
        headers = list(env.headers())
        if seal_key is not None:
            headers.append((SEAL_HEADER, RunSeal(seal_key).seal(value)))
        if again:
            headers.append((AGAIN_HEADER, b"1"))
        topic = topics.runs(env.priority)
        prod.produce(topic, key=env.job_id.encode(), value=value, headers=headers)
    assert prod.flush(30) == 0


def drain_values(kafka: str, topic: str, expect: int) -> list[bytes]:
    return [m.value() or b"" for m in drain(kafka, topic, expect=expect)]


async def runs_of(dsn: str, tenant: str) -> dict[str, asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT job_id, status, attempt, worker, started_at, finished_at, retry_at,"
            " lease_until, last_error, now() AS db_now FROM job_runs WHERE tenant = $1",
            tenant,
        )
    finally:
        await conn.close()
    return {r["job_id"]: r for r in rows}


async def wait_for(
    check: Callable[[], Awaitable[bool]], timeout_s: float = 30, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def statuses_are(dsn: str, tenant: str, status: str, count: int) -> bool:
    rows = await runs_of(dsn, tenant)
    return sum(1 for r in rows.values() if r["status"] == status) == count


async def skipped_as(worker: Worker, reason: str, count: int) -> bool:
    return bool(worker.metrics.skipped.labels(reason)._value.get() == count)


def committed_total(kafka: str, group: str, topics: list[str], partitions: int = 2) -> int:
    cons = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        tps = cons.committed(
            [TopicPartition(t, p) for t in topics for p in range(partitions)], timeout=10
        )
        return sum(max(tp.offset, 0) for tp in tps)
    finally:
        cons.close()


# --- workers: in this process, or as `tickwheel worker` subprocesses ---------------------------


def worker_settings(stack: Addresses, dsn: str, topics: Topics, **extra: Any) -> Settings:
    return load_settings(
        dsn=dsn,
        kafka=stack.kafka,
        zk=stack.zk,
        topic_prefix=topics.prefix,
        kafka_session_timeout_ms=6000,
        **extra,
    )


@asynccontextmanager
async def running_worker(settings: Settings, concurrency: int = 8) -> AsyncIterator[Worker]:
    pool = await asyncpg.create_pool(settings.effective_dsn, min_size=1, max_size=8)
    process = Process("test-worker")
    worker = make_worker(
        settings,
        pool,
        f"w-{uuid.uuid4().hex[:6]}",
        concurrency,
        run_seal=await db.run_seal(pool),
    )
    process.on_close(pool.close)
    worker.start(process)
    task = asyncio.create_task(process.run(signals=False, grace_s=15))
    try:
        yield worker
    finally:
        process.request_stop()
        assert await task == 0


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def seal_key(db_dsn: str) -> bytes:
    """The deployment's run-seal key, as a leader reads it (migration 0013)."""
    conn = await asyncpg.connect(db_dsn)
    try:
        key = await conn.fetchval("SELECT secret FROM cluster_secrets WHERE name = 'run_seal'")
    finally:
        await conn.close()
    assert key is not None and len(key) == 32
    return bytes(key)


@pytest.fixture
def exec_log(tmp_path: Path) -> Path:
    path = tmp_path / "executions.log"
    path.touch()
    return path


def executions(path: Path) -> Counter[str]:
    """`<run_key> <attempt>` → how many times a handler ran it."""
    return Counter(line for line in path.read_text().splitlines() if line)


class Subprocesses:
    def __init__(self, stack: Addresses, dsn: str, topics: Topics, log: Path, tmp: Path) -> None:
        self.env = {
            **os.environ,
            "TICKWHEEL_DSN": dsn,
            "TICKWHEEL_KAFKA": stack.kafka,
            "TICKWHEEL_ZK": stack.zk,
            "TICKWHEEL_TOPIC_PREFIX": topics.prefix,
            "TICKWHEEL_KAFKA_SESSION_TIMEOUT_MS": "6000",
            "TW_TEST_LOG": str(log),
            "PYTHONPATH": HERE,
        }
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        with (self.tmp / f"{name}.log").open("wb") as stderr:  # the child keeps its own fd
            proc = subprocess.Popen(
                [TICKWHEEL, "worker", "--handlers", "worker_handlers", "--id", name, *args],
                env={**self.env, **env},
                stderr=stderr,
            )
        self.procs.append(proc)
        return proc

    def log_of(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text()

    def __enter__(self) -> Subprocesses:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop_all()

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def workers(
    stack: Addresses, db_dsn: str, topics: Topics, exec_log: Path, tmp_path: Path
) -> Iterator[Subprocesses]:
    with Subprocesses(stack, db_dsn, topics, exec_log, tmp_path) as procs:
        yield procs


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body: bytes = response.read()
        return body.decode()


# --- tests: processes --------------------------------------------------------------------------


async def test_two_workers_succeed_each_run_exactly_once(
    stack: Addresses,
    db_dsn: str,
    topics: Topics,
    tenant: str,
    workers: Subprocesses,
    exec_log: Path,
    seal_key: bytes,
) -> None:
    """across two worker processes every run — sealed as a leader sends it, with unsealed
    copies of some — executes once and ends succeeded, visible with started_at/finished_at in
    GET /v1/jobs/{id}/runs"""
    specs = [
        RunSpec(f"job-{i}", priority=("high", "normal", "low")[i % 3], handler=h)
        for i, h in enumerate(["test.record", "test.sync_record"] * 60)
    ]
    await create_runs(db_dsn, tenant, specs)
    workers.start("w1", "--concurrency", "4")
    workers.start("w2", "--concurrency", "4")
    publish(stack.kafka, topics, tenant, specs, seal_key)
    # Duplicates, as a leader's re-publish sends them (header `again`), and unsealed copies:
    # each is claimed first, and the claim decides.
    publish(stack.kafka, topics, tenant, specs[:20], seal_key, again=True)
    publish(stack.kafka, topics, tenant, specs[20:30])
    await wait_for(
        lambda: statuses_are(db_dsn, tenant, "succeeded", len(specs)), 60, "all succeeded"
    )
    counts = executions(exec_log)
    assert len(counts) == len(specs) and set(counts.values()) == {1}
    rows = await runs_of(db_dsn, tenant)
    assert {r["worker"] for r in rows.values()} <= {"w1", "w2"}
    assert all(r["finished_at"] >= r["started_at"] for r in rows.values())

    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=2)
    try:
        store = RegistryStore(pool, shards=64)
        api_tenant = f"a{uuid.uuid4().hex[:8]}"
        key = await store.create_tenant(api_tenant)
        await create_runs(db_dsn, api_tenant, [RunSpec("api-job")])
        publish(stack.kafka, topics, api_tenant, [RunSpec("api-job")])
        await wait_for(lambda: statuses_are(db_dsn, api_tenant, "succeeded", 1), 30, "api run")
        app = create_app(store, Limits())
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://test",
            headers={"Authorization": f"Bearer {key}"},
        ) as client:
            response = await client.get("/v1/jobs/api-job/runs")
        assert response.status_code == 200, response.text
        (item,) = response.json()["items"]
        assert item["status"] == "succeeded" and item["attempt"] == 1
        assert item["started_at"] is not None and item["finished_at"] is not None
    finally:
        await pool.close()


async def test_kill9_mid_handler_run_redispatched_after_lease_succeeds_once(
    stack: Addresses,
    db_dsn: str,
    topics: Topics,
    tenant: str,
    workers: Subprocesses,
    exec_log: Path,
) -> None:
    """a worker killed mid-handler leaves its run running until the lease lapses; the
    re-dispatched attempt succeeds once and the stale redelivery is skipped"""
    spec = RunSpec("slow", payload={"sleep_first_s": 60})
    await create_runs(db_dsn, tenant, [spec])
    victim = workers.start("victim", TICKWHEEL_LEASE_S="2")
    publish(stack.kafka, topics, tenant, [spec])
    key = spec.envelope(tenant).run_key
    await wait_for(
        lambda: asyncio.sleep(0, f"{key} 1" in executions(exec_log)), 30, "handler started"
    )
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    row = (await runs_of(db_dsn, tenant))["slow"]
    assert (row["status"], row["attempt"], row["worker"]) == ("running", 1, "victim")

    async def lease_lapsed() -> bool:
        r = (await runs_of(db_dsn, tenant))["slow"]
        return bool(r["lease_until"] < r["db_now"])

    await wait_for(lease_lapsed, 10, "lease to lapse")
    second = await redispatch(db_dsn, tenant, spec)  # the sweeper's move
    publish(stack.kafka, topics, tenant, [second])
    workers.start("survivor", "--metrics-port", str(port := free_port()))
    await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 1), 45, "re-dispatch")
    row = (await runs_of(db_dsn, tenant))["slow"]
    assert (row["attempt"], row["worker"]) == (2, "survivor")
    assert executions(exec_log) == Counter({f"{key} 1": 1, f"{key} 2": 1})

    async def stale_skipped() -> bool:
        return 'tickwheel_worker_duplicates_skipped_total{reason="stale"} 1.0' in scrape(port)

    await wait_for(stale_skipped, 20, "the attempt-1 redelivery to be skipped as stale")


async def test_crash_after_result_write_redelivery_is_skipped(
    stack: Addresses,
    db_dsn: str,
    topics: Topics,
    tenant: str,
    workers: Subprocesses,
    exec_log: Path,
) -> None:
    """a crash between the result write and the offset commit: the redelivered message is
    skipped as a duplicate, never executed again; SIGTERM then stops the worker with exit 0"""
    spec = RunSpec("once")
    await create_runs(db_dsn, tenant, [spec])
    crashing = workers.start("crashing", TICKWHEEL_FAULT="worker_after_results")
    publish(stack.kafka, topics, tenant, [spec])
    assert await asyncio.to_thread(crashing.wait, 60) == FAULT_EXIT_CODE
    assert (await runs_of(db_dsn, tenant))["once"]["status"] == "succeeded"
    group = worker_group(topics.prefix)
    run_topics = [topics.runs(p) for p in ("high", "normal", "low")]
    assert committed_total(stack.kafka, group, run_topics) == 0

    port = free_port()
    calm = workers.start("calm", "--metrics-port", str(port))
    await wait_for(
        lambda: asyncio.sleep(0, committed_total(stack.kafka, group, run_topics) == 1),
        45,
        "the redelivery to be committed",
    )
    metrics = scrape(port)
    assert 'tickwheel_worker_duplicates_skipped_total{reason="duplicate"} 1.0' in metrics
    assert 'tickwheel_worker_executions_total{outcome="succeeded"} 0.0' in metrics
    for part in ("fetch", "dispatch", "record", "heartbeat"):
        assert f'tickwheel_worker_part_up{{part="{part}"}} 1.0' in metrics
    assert sum(executions(exec_log).values()) == 1
    calm.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(calm.wait, 30) == 0
    assert '"worker stopped"' in workers.log_of("calm")


async def test_crash_after_dlq_publish_leaves_run_to_its_lease(
    stack: Addresses,
    db_dsn: str,
    topics: Topics,
    tenant: str,
    workers: Subprocesses,
) -> None:
    """a crash after the DLQ publish and before the dead write: the dead letter is already on
    the DLQ topic and the row is still running, for the sweeper to settle (nothing lost)"""
    spec = RunSpec("doomed", payload={"fail": "permanent"})
    await create_runs(db_dsn, tenant, [spec])
    crashing = workers.start("crashing", TICKWHEEL_FAULT="worker_after_dlq")
    publish(stack.kafka, topics, tenant, [spec])
    assert await asyncio.to_thread(crashing.wait, 60) == FAULT_EXIT_CODE
    (raw,) = drain_values(stack.kafka, topics.dlq, expect=1)
    letter = DeadLetter.decode(raw)
    assert letter.run == spec.envelope(tenant) and letter.error == "refused by the test"
    assert (letter.attempts, letter.worker) == (1, "crashing")
    assert (await runs_of(db_dsn, tenant))["doomed"]["status"] == "running"


# --- tests: retries and dead letters (worker in this process) -------------------------------

FLAKY_CALLS: list[int] = []


@handler("it.flaky")
async def flaky(ctx: Context, _payload: Any) -> None:
    FLAKY_CALLS.append(ctx.attempt)
    raise ConnectionError(f"downstream down on attempt {ctx.attempt}")


@handler("it.permanent")
def permanent(_ctx: Context, _payload: Any) -> None:
    raise PermanentError("invoice has no customer")


@handler("it.ok")
async def ok(_ctx: Context, _payload: Any) -> None:
    return None


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "unsealed"])
async def test_retries_follow_full_jitter_then_exhausted_run_is_dead_lettered(
    stack: Addresses, db_dsn: str, topics: Topics, tenant: str, seal_key: bytes, sealed: bool
) -> None:
    """each retryable failure sets retry_at within [now, now + min(cap, base·2^attempt)] of the
    job's backoff — read by the claim, or, for a sealed envelope whose claim reads no job row,
    with the result; the last attempt goes dead and its envelope, error, attempts and worker
    land on the DLQ"""
    spec = RunSpec("flaky", handler="it.flaky", max_attempts=3, base_ms=1000, cap_ms=3000)
    await create_runs(db_dsn, tenant, [spec])
    settings = worker_settings(stack, db_dsn, topics)
    key = seal_key if sealed else None
    async with running_worker(settings) as worker:
        for attempt, ceiling_ms in ((1, 2000), (2, 3000)):
            publish(stack.kafka, topics, tenant, [spec], key)
            await wait_for(lambda: statuses_are(db_dsn, tenant, "retrying", 1), 30, "retrying")
            row = (await runs_of(db_dsn, tenant))["flaky"]
            assert row["attempt"] == attempt
            assert row["last_error"] == f"ConnectionError: downstream down on attempt {attempt}"
            delay = row["retry_at"] - row["db_now"]
            assert (
                dt.timedelta(milliseconds=-1000) <= delay <= dt.timedelta(milliseconds=ceiling_ms)
            )
            spec = await redispatch(db_dsn, tenant, spec)
        publish(stack.kafka, topics, tenant, [spec], key)
        await wait_for(lambda: statuses_are(db_dsn, tenant, "dead", 1), 30, "dead")
        worker_id = worker.worker_id
    row = (await runs_of(db_dsn, tenant))["flaky"]
    assert row["attempt"] == 3 and row["finished_at"] is not None
    assert row["last_error"] == "ConnectionError: downstream down on attempt 3 (attempt 3 of 3)"
    (raw,) = drain_values(stack.kafka, topics.dlq, expect=1)
    letter = DeadLetter.decode(raw)
    assert letter.run == spec.envelope(tenant)
    assert (letter.error, letter.attempts, letter.worker) == (row["last_error"], 3, worker_id)


@pytest.mark.foreign_messages("runs.normal")  # the junk it produces
async def test_permanent_error_unknown_handler_and_bad_messages(
    stack: Addresses, db_dsn: str, topics: Topics, tenant: str
) -> None:
    """PermanentError and an unloaded handler dead-letter at attempt 1 of 3; an unreadable or
    forged message lands on the DLQ with its bytes, and so does a valid envelope naming a run
    that has no row (never executed); the worker goes on, every offset is committed and the
    lag gauges fall to 0"""
    specs = [
        RunSpec("refused", handler="it.permanent"),
        RunSpec("unloaded", handler="nobody.loaded_this"),
        RunSpec("fine", handler="it.ok", priority="low"),
    ]
    ghost = RunSpec("ghost", handler="it.flaky")  # valid envelope, no run row
    await create_runs(db_dsn, tenant, specs)
    forged = orjson.loads(specs[2].envelope(tenant).encode())
    forged["run_key"] = f"{tenant}/someone-else@{BASE_MS}"
    junk = [b"\xff not json", orjson.dumps({"v": 1, "run_key": "x"}), orjson.dumps(forged)]
    produce(stack.kafka, topics.runs("normal"), [(None, v) for v in junk])
    publish(stack.kafka, topics, tenant, [*specs, ghost])
    settings = worker_settings(stack, db_dsn, topics)
    calls_before = len(FLAKY_CALLS)
    async with running_worker(settings) as worker:
        await wait_for(lambda: statuses_are(db_dsn, tenant, "dead", 2), 30, "dead runs")
        await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 1), 30, "fine run")
        group = worker_group(settings.topic_prefix)
        run_topics = [topics.runs(p) for p in ("high", "normal", "low")]
        await wait_for(
            lambda: asyncio.sleep(0, committed_total(stack.kafka, group, run_topics) == 7),
            30,
            "all offsets committed",
        )
        skipped = worker.metrics.skipped.labels("unknown_run")._value.get()

        async def lag_is_zero() -> bool:
            (family,) = [
                m
                for m in worker.metrics.registry.collect()
                if m.name == "tickwheel_worker_partition_lag"
            ]
            return bool(family.samples) and all(s.value == 0 for s in family.samples)

        await wait_for(lag_is_zero, 10, "per-partition lag reported as 0")
    assert skipped == 1 and len(FLAKY_CALLS) == calls_before
    rows = await runs_of(db_dsn, tenant)
    assert rows["refused"]["last_error"] == "invoice has no customer"
    assert rows["unloaded"]["last_error"] == (
        "no handler named 'nobody.loaded_this' is loaded in this worker (--handlers)"
    )
    assert all(rows[j]["attempt"] == 1 for j in ("refused", "unloaded"))
    values = drain_values(stack.kafka, topics.dlq, expect=6)
    letters = [DeadLetter.decode(v) for v in values if b'"kind"' not in v]
    unreadable = [UnreadableRun.decode(v) for v in values if b'"kind"' in v]
    assert {(d.run.job_id, d.attempts) for d in letters} == {("refused", 1), ("unloaded", 1)}
    assert sorted(u.original for u in unreadable) == sorted(
        [*junk, ghost.envelope(tenant).encode()]
    )
    assert any("run_key" in u.error and "does not match" in u.error for u in unreadable)
    (no_row,) = [u for u in unreadable if u.original == ghost.envelope(tenant).encode()]
    assert no_row.error.startswith("names no run")
    assert all(u.topic == topics.runs("normal") for u in unreadable)
    assert base64.b64encode(junk[0]).decode() in b"".join(values).decode(errors="replace")


# --- tests: weighted priorities ------------------------------------------------------------------

LEVEL_ORDER: list[str] = []


@handler("it.level")
async def level(_ctx: Context, payload: Any) -> None:
    LEVEL_ORDER.append(payload["level"])
    await asyncio.sleep(0.002)


PAYLOADS: list[tuple[str, Any]] = []


@handler("it.payload")
async def payload_seen(ctx: Context, payload: Any) -> None:
    PAYLOADS.append((ctx.run_key, payload))


async def test_an_envelope_unlike_its_job_runs_the_jobs_content_once(
    stack: Addresses, db_dsn: str, topics: Topics, tenant: str
) -> None:
    """a message naming a real run and attempt but carrying another handler, payload and
    timeout (a forgery, or a job changed after the dispatch) claims the run as its own
    envelope would, and what runs is the job's handler with the job's payload, once; the
    difference is counted; the run's own envelope after it is a duplicate"""
    spec = RunSpec("real", handler="it.payload", payload={"from": "job", "n": [1, 2.5]})
    forged = replace(spec, handler="it.flaky", payload={"from": "forger"}, timeout_ms=1)
    await create_runs(db_dsn, tenant, [spec])
    publish(stack.kafka, topics, tenant, [forged])
    publish(stack.kafka, topics, tenant, [spec])
    flaky_before = len(FLAKY_CALLS)
    PAYLOADS.clear()
    async with running_worker(worker_settings(stack, db_dsn, topics)) as worker:
        await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 1), 30, "the run")
        await wait_for(
            lambda: skipped_as(worker, "duplicate", 1), 30, "the run's own envelope skipped"
        )
        mismatches = worker.metrics.envelope_mismatch._value.get()
    ran = [(spec.envelope(tenant).run_key, {"from": "job", "n": [1, 2.5]})]
    assert ran == PAYLOADS
    assert len(FLAKY_CALLS) == flaky_before
    assert mismatches == 1
    rows = await runs_of(db_dsn, tenant)
    assert (rows["real"]["status"], rows["real"]["attempt"]) == ("succeeded", 1)


async def test_a_sealed_envelope_runs_its_own_content_and_a_false_seal_the_jobs(
    stack: Addresses, db_dsn: str, topics: Topics, tenant: str, seal_key: bytes
) -> None:
    """an envelope sealed under the deployment's key runs the content it carries (what the
    leader's claim read; its claim reads no job row), nothing counted as a mismatch; one sealed
    under another key, or with its sealed value altered, is claimed like an unsealed one: the
    job's own content runs and the difference is counted; each run succeeds once"""
    job_payload = {"from": "job"}
    leader = RunSpec("leader", handler="it.payload", payload=job_payload)
    other_key = RunSpec("other-key", handler="it.payload", payload=job_payload)
    altered = RunSpec("altered", handler="it.payload", payload=job_payload)
    await create_runs(db_dsn, tenant, [leader, other_key, altered])
    publish(stack.kafka, topics, tenant, [replace(leader, payload={"from": "leader"})], seal_key)
    publish(
        stack.kafka,
        topics,
        tenant,
        [replace(other_key, payload={"from": "forger"})],
        bytes(32),  # a key that is not the deployment's
    )
    # a value changed after it was sealed: the seal of the original is kept
    sealed_for = replace(altered, payload={"from": "sealed"}).envelope(tenant).encode()
    forged = replace(altered, payload={"from": "forger"}).envelope(tenant)
    prod = producer(stack.kafka)
    prod.produce(
        topics.runs("normal"),
        key=forged.job_id.encode(),
        value=forged.encode(),
        headers=[*forged.headers(), (SEAL_HEADER, RunSeal(seal_key).seal(sealed_for))],
    )
    assert prod.flush(30) == 0
    PAYLOADS.clear()
    async with running_worker(worker_settings(stack, db_dsn, topics)) as worker:
        await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 3), 30, "the runs")
        mismatches = worker.metrics.envelope_mismatch._value.get()
        claimed = {c: worker.metrics.claimed.labels(c)._value.get() for c in ("sealed", "job_row")}
    assert claimed == {"sealed": 1, "job_row": 2}
    ran = {key.split("/", 1)[1].split("@")[0]: payload for key, payload in PAYLOADS}
    assert ran == {"leader": {"from": "leader"}, "other-key": job_payload, "altered": job_payload}
    assert len(PAYLOADS) == 3
    assert mismatches == 2
    rows = await runs_of(db_dsn, tenant)
    assert {(r["status"], r["attempt"]) for r in rows.values()} == {("succeeded", 1)}


async def test_an_envelope_naming_a_run_held_back_by_buffer_one_claims_nothing(
    stack: Addresses, db_dsn: str, topics: Topics, tenant: str
) -> None:
    """a run that overlap buffer_one holds (pending without a lease: no scheduler has sent it)
    is not started by a message naming it; the message is skipped as `held`, the run stays
    held for its release"""
    held = RunSpec("held", handler="it.payload", payload={"which": "held"})
    fine = RunSpec("fine", handler="it.payload", payload={"which": "fine"})
    await create_runs(db_dsn, tenant, [held, fine])
    conn = await asyncpg.connect(db_dsn)
    try:
        await conn.execute(
            "UPDATE job_runs SET status = 'pending', lease_until = NULL, published_at = NULL"
            " WHERE tenant = $1 AND job_id = 'held'",
            tenant,
        )
    finally:
        await conn.close()
    PAYLOADS.clear()
    publish(stack.kafka, topics, tenant, [held, fine])
    async with running_worker(worker_settings(stack, db_dsn, topics)) as worker:
        await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 1), 30, "fine run")
        await wait_for(lambda: skipped_as(worker, "held", 1), 30, "the held run's message skipped")
    assert [p for _, p in PAYLOADS] == [{"which": "fine"}]
    rows = await runs_of(db_dsn, tenant)
    assert (rows["held"]["status"], rows["held"]["lease_until"]) == ("pending", None)


async def test_weighted_shares_under_saturation_and_low_never_starves(
    stack: Addresses, db_dsn: str, topics: Topics, tenant: str
) -> None:
    """with all three levels backlogged, executions follow 6:3:1 within ±10 %; low runs keep
    executing while high still has a backlog"""
    per_level = 400
    specs = [
        RunSpec(f"{lvl}-{i}", priority=lvl, handler="it.level", payload={"level": lvl})
        for lvl in ("high", "normal", "low")
        for i in range(per_level)
    ]
    await create_runs(db_dsn, tenant, specs)
    publish(stack.kafka, topics, tenant, specs)
    LEVEL_ORDER.clear()
    settings = worker_settings(stack, db_dsn, topics, worker_queue_per_priority=100)
    # (executions so far, whether every level had a backlog) every 20 ms. Only the executions
    # between two samples that both saw every level backlogged count: a level whose queue ran
    # dry while its paused partitions were resumed and fetched again (the queue cap is 100)
    # leaves its share to the others, which says nothing of the weights.
    marks: list[tuple[int, bool]] = []
    async with running_worker(settings, concurrency=4) as worker:
        while LEVEL_ORDER.count("high") < 300:
            backlogged = all(len(queue) >= 20 for queue in worker.queues.by_level.values())
            marks.append((len(LEVEL_ORDER), backlogged))
            await asyncio.sleep(0.02)
    assert any(backlogged for _, backlogged in marks), "the levels were never all backlogged"
    window = [
        level
        for (start, full), (end, still_full) in itertools.pairwise(marks)
        if full and still_full
        for level in LEVEL_ORDER[start:end]
    ]
    shares = {lvl: window.count(lvl) / len(window) for lvl in ("high", "normal", "low")}
    print(f"window of {len(window)} saturated executions: shares {shares}")
    assert len(window) >= 200
    for lvl, expected in (("high", 0.6), ("normal", 0.3), ("low", 0.1)):
        assert abs(shares[lvl] - expected) <= 0.1 * expected, shares
    assert all("low" in window[i : i + 20] for i in range(len(window) - 20))


# --- tests: HTTP targets ----------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    # The default listen backlog (5) drops connects under a burst; a retransmitted SYN
    # arrives a second later, which would distort the timing the rate-limit test measures.
    request_queue_size = 512
    daemon_threads = True


class TargetServer:
    """A local HTTP server: /ok 200, /flaky 503 then 200, /missing 404, /hop redirects, /down
    503 and /busy 429 to everything; each request's arrival (monotonic), path and run key."""

    def __init__(self, redirect_to: str) -> None:
        self.requests: list[tuple[float, str, str | None]] = []
        self.flaky_seen: set[str] = set()
        self.redirect_to = redirect_to
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: no connect per request

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                key = self.headers.get("Idempotency-Key")
                with server.lock:
                    server.requests.append((time.monotonic(), self.path, key))
                    status = 200
                    if self.path == "/flaky" and key not in server.flaky_seen:
                        server.flaky_seen.add(key or "")
                        status = 503
                    elif self.path == "/missing":
                        status = 404
                    elif self.path == "/down":
                        status = 503
                    elif self.path == "/busy":
                        status = 429
                    elif self.path == "/hop":
                        status = 307
                self.send_response(status)
                if status == 307:
                    self.send_header("Location", server.redirect_to)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def target_server() -> Iterator[TargetServer]:
    server = TargetServer(redirect_to=f"http://127.0.0.1:{free_port()}/elsewhere")
    yield server
    server.close()


def target(server: TargetServer, path: str) -> dict[str, Any]:
    return {"url": f"http://127.0.0.1:{server.port}{path}", "method": "POST", "headers": {}}


async def test_http_target_outcomes_and_redirect_refusal(
    stack: Addresses, db_dsn: str, topics: Topics, tenant: str, target_server: TargetServer
) -> None:
    """200 succeeds with the run key as Idempotency-Key, 503 is retried and then succeeds,
    404 is dead at once, a redirect to a non-allowlisted address is refused (dead)"""
    specs = [
        RunSpec(name, handler=None, target=target(target_server, path))
        for name, path in (("ok", "/ok"), ("flaky", "/flaky"), ("missing", "/missing"))
    ] + [RunSpec("hop", handler=None, target=target(target_server, "/hop"))]
    await create_runs(db_dsn, tenant, specs)
    settings = worker_settings(
        stack, db_dsn, topics, target_allowlist=[f"http://127.0.0.1:{target_server.port}/"]
    )
    publish(stack.kafka, topics, tenant, specs)
    async with running_worker(settings):
        await wait_for(lambda: statuses_are(db_dsn, tenant, "dead", 2), 30, "dead runs")
        await wait_for(lambda: statuses_are(db_dsn, tenant, "retrying", 1), 30, "retrying")
        flaky = await redispatch(db_dsn, tenant, specs[1])
        publish(stack.kafka, topics, tenant, [flaky])
        await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 2), 30, "succeeded")
    rows = await runs_of(db_dsn, tenant)
    assert rows["flaky"]["attempt"] == 2 and "HTTP 503" in rows["flaky"]["last_error"]
    assert "HTTP 404" in rows["missing"]["last_error"]
    assert "not in the operator's allowlist" in rows["hop"]["last_error"]
    keys = {(path, key) for _, path, key in target_server.requests}
    assert ("/ok", specs[0].envelope(tenant).run_key) in keys
    assert sum(1 for _, path, _ in target_server.requests if path == "/flaky") == 2
    assert "/elsewhere" not in {path for _, path, _ in target_server.requests}


async def test_http_target_sends_the_key_its_jobs_template_makes(
    stack: Addresses, db_dsn: str, topics: Topics, tenant: str, target_server: TargetServer
) -> None:
    """a job's idempotency_key_template (the rule the registry puts in the run's target, with
    the job's zone) is the Idempotency-Key the target receives, on every attempt"""
    rule = {"template": "{tenant}-{job}-{scheduled:%G-W%V}", "timezone": "Europe/Berlin"}
    spec = RunSpec("weekly", handler=None, target={**target(target_server, "/flaky"),
                                                   "idempotency_key": rule})  # fmt: skip
    await create_runs(db_dsn, tenant, [spec])
    settings = worker_settings(
        stack, db_dsn, topics, target_allowlist=[f"http://127.0.0.1:{target_server.port}/"]
    )
    publish(stack.kafka, topics, tenant, [spec])
    async with running_worker(settings):
        await wait_for(lambda: statuses_are(db_dsn, tenant, "retrying", 1), 30, "retrying")
        again = await redispatch(db_dsn, tenant, spec)
        publish(stack.kafka, topics, tenant, [again])
        await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 1), 30, "succeeded")
    week = dt.datetime.fromtimestamp(BASE_MS / 1000, ZoneInfo("Europe/Berlin")).strftime("%G-W%V")
    keys = [key for _, path, key in target_server.requests if path == "/flaky"]
    assert keys == [f"{tenant}-weekly-{week}"] * 2


async def test_http_target_rate_limit_holds_under_a_burst(
    stack: Addresses, db_dsn: str, topics: Topics, tenant: str, target_server: TargetServer
) -> None:
    """a burst of 300 runs against one host is paced at the host's rate: never much more than
    rate + burst requests in any second, and all succeed"""
    rate, burst, runs = 100, 10, 300
    specs = [
        RunSpec(f"burst-{i}", handler=None, target=target(target_server, "/ok"))
        for i in range(runs)
    ]
    await create_runs(db_dsn, tenant, specs)
    publish(stack.kafka, topics, tenant, specs)
    settings = worker_settings(
        stack,
        db_dsn,
        topics,
        target_allowlist=[f"http://127.0.0.1:{target_server.port}/"],
        target_rate_per_s=rate,
        target_burst=burst,
    )
    async with running_worker(settings, concurrency=64):
        await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", runs), 60, "burst")
    times = sorted(t for t, _, _ in target_server.requests)
    assert len(times) == runs
    busiest = max(sum(1 for t in times[i:] if t < start + 1.0) for i, start in enumerate(times))
    span_s = times[-1] - times[0]
    print(f"busiest second: {busiest} requests; span {span_s:.2f}s")
    # Timestamps are taken on arrival by a server sharing this process (and its GIL) with
    # the worker on a busy machine: a stall of a few hundred ms bunches arrivals, hence 25 %
    # on top of rate + burst. Without the limiter all 300 arrive within a second. The send
    # times themselves are exact (109 in the busiest second when measured at the bucket;
    # tests/unit/test_worker_limits.py proves the bound), and the span bounds the mean rate.
    assert busiest <= (rate + burst) * 1.25
    assert span_s >= (runs - burst) / rate * 0.95


# --- tests: leases, timeouts, tenant caps, graceful stop -----------------------------------------

TENANT_LOAD: Counter[str] = Counter()
TENANT_PEAK: Counter[str] = Counter()


@handler("it.sleep")
async def sleep(ctx: Context, payload: Any) -> None:
    TENANT_LOAD[ctx.tenant] += 1
    TENANT_PEAK[ctx.tenant] = max(TENANT_PEAK[ctx.tenant], TENANT_LOAD[ctx.tenant])
    try:
        await asyncio.sleep(payload["sleep_s"])
    finally:
        TENANT_LOAD[ctx.tenant] -= 1


async def test_heartbeat_keeps_long_runs_and_timeout_fails_the_attempt(
    stack: Addresses, db_dsn: str, topics: Topics, tenant: str
) -> None:
    """a run longer than its lease keeps it through heartbeats and succeeds (not fenced); a
    run past its timeout_ms is a retryable failure naming the timeout"""
    specs = [
        RunSpec("long", handler="it.sleep", payload={"sleep_s": 2.5}),
        RunSpec("late", handler="it.sleep", payload={"sleep_s": 5}, timeout_ms=300),
    ]
    await create_runs(db_dsn, tenant, specs)
    publish(stack.kafka, topics, tenant, specs)
    settings = worker_settings(stack, db_dsn, topics, lease_s=1)
    async with running_worker(settings) as worker:
        await wait_for(lambda: statuses_are(db_dsn, tenant, "running", 1), 30, "long started")
        await asyncio.sleep(1.8)  # past the first lease
        row = (await runs_of(db_dsn, tenant))["long"]
        assert row["status"] == "running" and row["lease_until"] > row["db_now"]
        await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", 1), 30, "long done")
        assert worker.metrics.executions.labels("fenced")._value.get() == 0
    rows = await runs_of(db_dsn, tenant)
    assert rows["late"]["status"] == "retrying"
    assert rows["late"]["last_error"] == "timed out after 300 ms"


async def test_tenant_concurrency_cap_holds(
    stack: Addresses, db_dsn: str, topics: Topics, tenant: str
) -> None:
    """with a cap of 2 runs per tenant and 4 slots, each tenant reaches 2 executing runs and
    never more"""
    other = f"o{uuid.uuid4().hex[:10]}"
    for name in (tenant, other):
        specs = [
            RunSpec(f"capped-{i}", handler="it.sleep", payload={"sleep_s": 0.1}) for i in range(12)
        ]
        await create_runs(db_dsn, name, specs)
        publish(stack.kafka, topics, name, specs)
    settings = worker_settings(stack, db_dsn, topics, worker_tenant_concurrency=2)
    async with running_worker(settings, concurrency=4):
        for name in (tenant, other):
            await wait_for(lambda n=name: statuses_are(db_dsn, n, "succeeded", 12), 30, name)
    assert TENANT_PEAK[tenant] == 2 and TENANT_PEAK[other] == 2


async def test_sigterm_lets_in_flight_run_finish_and_exits_zero(
    stack: Addresses,
    db_dsn: str,
    topics: Topics,
    tenant: str,
    workers: Subprocesses,
    exec_log: Path,
) -> None:
    """SIGTERM mid-handler: the run finishes within the grace, is recorded, its offset is
    committed, and the process exits 0"""
    spec = RunSpec("inflight", payload={"sleep_first_s": 1.5})
    await create_runs(db_dsn, tenant, [spec])
    proc = workers.start("graceful")
    publish(stack.kafka, topics, tenant, [spec])
    await wait_for(lambda: asyncio.sleep(0, bool(executions(exec_log))), 30, "handler start")
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 30) == 0
    assert (await runs_of(db_dsn, tenant))["inflight"]["status"] == "succeeded"
    group = worker_group(topics.prefix)
    assert committed_total(stack.kafka, group, [topics.runs("normal")]) == 1


# --- tests: limits that hold for the whole cluster (issue 25) -----------------------------------

CLUSTER = 4  # worker processes, and partitions of each run topic: every worker gets a share


@pytest.fixture
def wide_topics(stack: Addresses) -> Iterator[Topics]:
    """Run topics of CLUSTER partitions each (the range assignor gives every worker one)."""
    with unique_topics(stack.kafka, "cl", partitions=CLUSTER) as names:
        yield names


@pytest.fixture
def cluster(
    stack: Addresses, db_dsn: str, wide_topics: Topics, exec_log: Path, tmp_path: Path
) -> Iterator[Subprocesses]:
    asyncio.run(own_database(db_dsn, wide_topics.prefix))  # the workers' deployment (D-048)
    with Subprocesses(stack, db_dsn, wide_topics, exec_log, tmp_path) as procs:
        yield procs


def start_cluster(procs: Subprocesses, server: TargetServer, **env: str) -> list[int]:
    """CLUSTER `tickwheel worker` processes allowed to call `server`; their metrics ports."""
    ports = []
    for i in range(CLUSTER):
        port = free_port()
        ports.append(port)
        procs.start(
            f"cw{i}",
            "--metrics-port",
            str(port),
            TICKWHEEL_TARGET_ALLOWLIST=orjson.dumps([f"http://127.0.0.1:{server.port}/"]).decode(),
            **env,
        )
    return ports


async def settled(kafka: str, topics: Topics) -> bool:
    """The workers' group is stable with CLUSTER members, each holding partitions."""
    admin = admin_client(kafka)
    group = worker_group(topics.prefix)
    found = await asyncio.to_thread(lambda: admin.describe_consumer_groups([group])[group].result())
    ok = bool(
        found.state == ConsumerGroupState.STABLE
        and len(found.members) == CLUSTER
        and all(m.assignment.topic_partitions for m in found.members)
    )
    if not ok:  # shown with a failure: how far the group got (it once took > 90 s in a suite)
        held = [len(m.assignment.topic_partitions) for m in found.members]
        print(f"group {group}: {found.state}, partitions per member {held}")
    return ok


def metric_total(ports: list[int], name: str) -> float:
    """A metric's samples summed over every worker (and every label)."""
    pattern = re.compile(rf"^{name}(?:{{[^}}]*}})? (\S+)$", re.MULTILINE)
    return sum(float(v) for port in ports for v in pattern.findall(scrape(port)))


def busiest_second(times: list[float]) -> int:
    """The most arrivals in any one-second window."""
    times = sorted(times)
    return max((sum(1 for t in times[i:] if t < start + 1.0) for i, start in enumerate(times)))


async def test_four_workers_hold_a_host_to_its_cluster_wide_rate(
    stack: Addresses,
    db_dsn: str,
    wide_topics: Topics,
    tenant: str,
    cluster: Subprocesses,
    target_server: TargetServer,
) -> None:
    """four worker processes calling one host limited to 50/s (burst 10) for the cluster send
    it no more than 50 + 10 requests in any second, measured at the host; every run succeeds,
    each called once, and the workers ask Postgres once per batch of calls, not per call"""
    rate, burst, runs = 50, 10, 250
    specs = [
        RunSpec(
            f"r-{i}",
            handler=None,
            target=target(target_server, "/ok"),
            priority=PRIORITIES[i % len(PRIORITIES)],
            timeout_ms=60_000,
        )
        for i in range(runs)
    ]
    await create_runs(db_dsn, tenant, specs)
    limits = {f"127.0.0.1:{target_server.port}": {"rate_per_s": rate, "burst": burst}}
    ports = start_cluster(  # the default far above: the host's own limit is what binds
        cluster,
        target_server,
        TICKWHEEL_TARGET_LIMITS=orjson.dumps(limits).decode(),
        TICKWHEEL_TARGET_RATE_PER_S="5000",
        TICKWHEEL_TARGET_BURST="500",
    )
    await wait_for(lambda: settled(stack.kafka, wide_topics), 90, "the group settled")
    publish(stack.kafka, wide_topics, tenant, specs)
    await wait_for(lambda: statuses_are(db_dsn, tenant, "succeeded", runs), 120, "every run")
    rows = await runs_of(db_dsn, tenant)
    keys = [key for _, _, key in target_server.requests]
    assert len(keys) == runs and len(set(keys)) == runs
    assert len({r["worker"] for r in rows.values()}) == CLUSTER
    times = [t for t, _, _ in target_server.requests]
    busiest, span_s = busiest_second(times), max(times) - min(times)
    takes = metric_total(ports, "tickwheel_worker_target_takes_total")
    print(f"busiest second: {busiest}; span {span_s:.2f} s; {takes:.0f} take statements")
    # Arrivals are stamped by a server thread of this process on a busy two-core machine: a
    # stall bunches them, and a worker's event loop may send a little after its instant
    # while another sends on time; hence 20 % over rate + burst. Per-worker limits (before
    # issue 25) sent four times the rate: 200 and more in the busiest second.
    assert busiest <= (rate + burst) * 1.2
    assert span_s >= (runs - burst) / rate * 0.95
    # A worker whose calls queue asks about once per horizon, whatever their number.
    assert takes <= CLUSTER * (span_s / HORIZON_S + 3) and takes < runs / 2


@pytest.mark.parametrize(("path", "status"), [("/down", 503), ("/busy", 429)])
async def test_a_failing_host_opens_every_workers_breaker_after_k_failures_in_total(
    stack: Addresses,
    db_dsn: str,
    wide_topics: Topics,
    tenant: str,
    cluster: Subprocesses,
    target_server: TargetServer,
    path: str,
    status: int,
) -> None:
    """a host answering 503 (or 429) to everything gets about K requests from four workers
    together, not K per worker: the failures are counted for the cluster, the breaker opens
    once, and every worker fails its other runs fast, which follow the retry path"""
    failures, runs = 5, 40
    specs = [
        RunSpec(f"f-{i}", handler=None, target=target(target_server, path), max_attempts=3)
        for i in range(runs)
    ]
    for i, spec in enumerate(specs):
        spec.priority = PRIORITIES[i % len(PRIORITIES)]
    await create_runs(db_dsn, tenant, specs)
    limits = {f"127.0.0.1:{target_server.port}": {"rate_per_s": 10, "burst": 1}}
    ports = start_cluster(
        cluster,
        target_server,
        TICKWHEEL_TARGET_LIMITS=orjson.dumps(limits).decode(),
        TICKWHEEL_TARGET_BREAKER_FAILURES=str(failures),
        TICKWHEEL_TARGET_BREAKER_COOLDOWN_S="300",
    )
    await wait_for(lambda: settled(stack.kafka, wide_topics), 90, "the group settled")
    publish(stack.kafka, wide_topics, tenant, specs)
    await wait_for(lambda: statuses_are(db_dsn, tenant, "retrying", runs), 60, "every attempt")
    sent = sum(1 for _, p, _ in target_server.requests if p == path)
    print(f"{path}: {sent} requests reached the host")
    assert failures <= sent <= 2 * failures, sent  # per-worker breakers: up to 4 x K = 20
    rows = (await runs_of(db_dsn, tenant)).values()
    called = [r for r in rows if f"HTTP {status}" in r["last_error"]]
    refused = [r for r in rows if "circuit open" in r["last_error"]]
    assert len(called) == sent and len(refused) == runs - sent
    assert {r["worker"] for r in refused} == {r["worker"] for r in rows}
    assert len({r["worker"] for r in rows}) == CLUSTER
    conn = await asyncpg.connect(db_dsn)
    try:
        host = await conn.fetchrow(
            "SELECT failures, opens, open_until > now() AS open FROM target_hosts WHERE host = $1",
            f"127.0.0.1:{target_server.port}",
        )
    finally:
        await conn.close()
    assert host["opens"] == 1 and host["open"] and host["failures"] == sent
    assert metric_total(ports, "tickwheel_worker_target_breaker_opens_total") == 1


async def test_a_capped_tenant_never_runs_more_than_its_cap_across_workers(
    sched: SchedEnv, wide_topics: Topics, tmp_path: Path
) -> None:
    """a tenant capped at 3 (`tickwheel tenant cap`) never has more than 3 runs running across
    four workers, sampled in job_runs while its 24 runs are due at once; the runs held back
    wait, through the database and the leader, and all succeed with their wait recorded and
    no attempt spent; an uncapped tenant due at the same instant is never held"""
    cap, runs = 3, 24
    sched.env["TICKWHEEL_TOPIC_PREFIX"] = wide_topics.prefix
    sched.topics = wide_topics
    await own_database(sched.dsn, wide_topics.prefix)
    capped = sched.tenant
    other = replace(sched, tenant=f"u{uuid.uuid4().hex[:8]}")
    await sched.fetch("INSERT INTO tenants (name) VALUES ($1)", other.tenant)
    done = await asyncio.to_thread(
        subprocess.run,
        [TICKWHEEL, "tenant", "cap", capped, "--max-running", str(cap)],
        env={**os.environ, **sched.env},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"tenant {capped}: at most {cap} runs running at once"
    at = format_ms(now_ms() + 12_000)
    for env in (sched, other):
        await env.register(
            *(
                {"id": f"c-{i}", "at": at, "handler": "test.sleep", "payload": {"sleep_s": 0.4}}
                for i in range(runs)
            )
        )
    # The module's database holds earlier tests' runs, which this test's leader would sweep
    # (re-publish, re-dispatch) to its workers: they are finished first.
    await sched.fetch(
        "UPDATE job_runs SET status = 'succeeded', finished_at = now() WHERE tenant <> ALL($1)"
        " AND status IN ('pending', 'published', 'running', 'retrying')",
        [capped, other.tenant],
    )
    log = tmp_path / "executions.log"
    log.touch()
    sched.spawn("s1")
    for i in range(CLUSTER):
        sched.spawn_command(
            f"cw{i}",
            ["worker", "--handlers", "worker_handlers", "--id", f"cw{i}", "--concurrency", "8"],
            TW_TEST_LOG=str(log),
            PYTHONPATH=HERE,
            TICKWHEEL_KAFKA_SESSION_TIMEOUT_MS="6000",
            TICKWHEEL_TENANT_CAP_HOLD_MS="200",
        )
    peak: Counter[str] = Counter()
    conn = await asyncpg.connect(sched.dsn)
    try:
        deadline = time.monotonic() + 120
        while True:
            rows = await conn.fetch(
                "SELECT tenant, count(*) FILTER (WHERE status = 'running') AS running,"
                " count(*) FILTER (WHERE status = 'succeeded') AS succeeded"
                " FROM job_runs WHERE tenant = ANY($1) GROUP BY tenant",
                [capped, other.tenant],
            )
            for row in rows:
                peak[row["tenant"]] = max(peak[row["tenant"]], row["running"])
            if sum(row["succeeded"] for row in rows) == 2 * runs:
                break
            assert time.monotonic() < deadline, f"runs unfinished: {[dict(r) for r in rows]}"
            await asyncio.sleep(0.03)
        held = await conn.fetch(
            "SELECT tenant, job_id, attempt, max_attempts, holds, held_ms, cap_tracked"
            " FROM job_runs WHERE tenant = ANY($1)",
            [capped, other.tenant],
        )
    finally:
        await conn.close()
    print(f"peaks running: {dict(peak)}")
    assert peak[capped] == cap
    assert peak[other.tenant] > cap
    mine = [r for r in held if r["tenant"] == capped]
    theirs = [r for r in held if r["tenant"] == other.tenant]
    assert all(r["cap_tracked"] for r in mine)
    assert all(r["attempt"] - r["holds"] == 1 for r in mine)  # a hold spends no attempt
    assert all(r["max_attempts"] - r["holds"] == 5 for r in mine)
    waited = [r for r in mine if r["holds"]]
    assert len(waited) >= runs - CLUSTER * cap and all(r["held_ms"] > 0 for r in waited)
    assert all(r["holds"] == 0 and not r["cap_tracked"] for r in theirs)
    executed = executions(log)
    assert all(line.startswith((f"{capped}/", f"{other.tenant}/")) for line in executed)
    assert len(executed) == 2 * runs and set(executed.values()) == {1}
    listed = await asyncio.to_thread(
        subprocess.run,
        [TICKWHEEL, "tenant", "ls", "--json"],
        env={**os.environ, **sched.env},
        capture_output=True,
        text=True,
    )
    tenants = {t["tenant"]: t for t in orjson.loads(listed.stdout)["items"]}
    assert (tenants[capped]["max_running"], tenants[capped]["running"]) == (cap, 0)
    assert (tenants[other.tenant]["max_running"], tenants[other.tenant]["running"]) == (None, None)
