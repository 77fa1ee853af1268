"""Test support for the integration tests: ZooKeeper session faults, scheduler processes, jobs.

`expire_session` and `drop_connection` break a kazoo client's session on purpose, the way
kazoo's own test harness does (`kazoo.testing.harness`): expiry by a second client that joins
the same session and closes it (the server then expires the session for real, as after a
pause past the timeout), a dropped connection by injecting the connection-drop event (the
client goes SUSPENDED and reconnects to the same session).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest
from confluent_kafka import TopicPartition
from kazoo.client import KazooClient, KazooState
from kazoo.protocol.connection import _CONNECTION_DROP

from tickwheel.clock import now_ms
from tickwheel.config import Settings, load_settings
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.kafka.clients import consumer
from tickwheel.registry_api.document import Limits, parse_document, validate_job
from tickwheel.registry_api.intake import BatchReport
from tickwheel.registry_api.service import intake_group, make_intake
from tickwheel.registry_api.state import Op
from tickwheel.registry_api.store import RegistryStore
from tickwheel.runtime import Process
from tickwheel.shards.service import Scheduler
from tickwheel.stack import Addresses
from tickwheel.testing import drain
from tickwheel.topics import Topics

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")
TEST_SHARDS = 8
ZK_TEST_SESSION_MS = 4000  # the dev ZooKeeper's minimum: 2 x tickTime (2 s)


# --- ZooKeeper session faults ------------------------------------------------------------------


def expire_session(client: KazooClient, hosts: str, timeout_s: float = 10.0) -> None:
    """Expire `client`'s session on the server now; return once the client saw LOST."""
    lost = threading.Event()

    def watch(state: str) -> bool | None:
        if state == KazooState.LOST:
            lost.set()
            return True
        return None

    client.add_listener(watch)
    session_id, password = client.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password))
    twin.start(timeout=timeout_s)
    twin.stop()  # closing the twin's connection closes the shared session: ZK expires it
    twin.close()
    if not lost.wait(timeout_s):
        raise AssertionError("the client never saw its session expire")


def drop_connection(client: KazooClient, timeout_s: float = 10.0) -> None:
    """Drop `client`'s connection (SUSPENDED); it reconnects to the same session by itself."""
    suspended = threading.Event()

    def watch(state: str) -> bool | None:
        if state == KazooState.SUSPENDED:
            suspended.set()
            return True
        return None

    client.add_listener(watch)
    client._call(_CONNECTION_DROP, None)
    if not suspended.wait(timeout_s):
        raise AssertionError("the client never went SUSPENDED")


# --- settings, jobs and runs -------------------------------------------------------------------


@dataclass
class SchedEnv:
    """One test's scheduler deployment: database, topics, a tenant, settings as env vars."""

    dsn: str
    stack: Addresses
    topics: Topics
    tenant: str
    env: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: dict[str, Path] = field(default_factory=dict)

    def settings(self, **overrides: Any) -> Settings:
        values = {k.removeprefix("TICKWHEEL_").lower(): v for k, v in self.env.items()}
        values.update(overrides)
        return load_settings(**values)

    async def register(self, *docs: dict[str, Any]) -> None:
        """Upsert job documents through the registry's store (as HTTP and Kafka do)."""
        pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=2)
        try:
            shards = int(self.env["TICKWHEEL_SHARDS"])
            store = RegistryStore(pool, shards=shards)
            await store.apply([upsert_op(self.tenant, doc, shards) for doc in docs])
        finally:
            await pool.close()

    async def op(self, kind: str, job_id: str) -> None:
        """pause | resume | delete a job through the registry's store."""
        pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=2)
        try:
            store = RegistryStore(pool, shards=int(self.env["TICKWHEEL_SHARDS"]))
            await store.apply([Op(kind, self.tenant, job_id)])
        finally:
            await pool.close()

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        conn = await asyncpg.connect(self.dsn)
        try:
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()

    async def runs(self, job_id: str | None = None) -> list[asyncpg.Record]:
        """This tenant's run rows (scheduled_at and created_at as ms), oldest first."""
        return await self.fetch(
            "SELECT job_id, (extract(epoch FROM scheduled_at) * 1000)::bigint AS ms,"
            " (extract(epoch FROM created_at) * 1000)::bigint AS created_ms,"
            " (extract(epoch FROM published_at) * 1000)::bigint AS published_ms,"
            " status, attempt, epoch, shard_id, skip_reason, priority"
            " FROM job_runs WHERE tenant = $1 AND ($2::text IS NULL OR job_id = $2)"
            " ORDER BY job_id, scheduled_at",
            self.tenant,
            job_id,
        )

    def spawn(self, name: str, *args: str, **extra_env: str) -> subprocess.Popen[bytes]:
        """Start `tickwheel scheduler --id NAME` as a subprocess (stderr to a log file)."""
        return self.spawn_command(name, ["scheduler", "--id", name, *args], **extra_env)

    def spawn_command(
        self, name: str, argv: list[str], **extra_env: str
    ) -> subprocess.Popen[bytes]:
        """Start `tickwheel ARGV…` with this deployment's settings (output to a log file)."""
        log = Path(f"/tmp/tw-sched-{self.topics.prefix}-{name}.log")
        self.logs[name] = log
        env = {**os.environ, **self.env, **extra_env}
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                [TICKWHEEL, *argv],
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.procs.append(proc)
        return proc

    def log_text(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def spawn_worker(self, log: Path, **extra_env: str) -> subprocess.Popen[bytes]:
        """`tickwheel worker --handlers worker_handlers` (tests/integration/worker_handlers.py),
        noting each execution in `log`; `extra_env` reaches its handlers."""
        log.touch()
        return self.spawn_command(
            "worker",
            ["worker", "--handlers", "worker_handlers", "--id", "w1"],
            TW_TEST_LOG=str(log),
            PYTHONPATH=str(Path(__file__).parent),
            TICKWHEEL_KAFKA_SESSION_TIMEOUT_MS="6000",
            **extra_env,
        )


@pytest.fixture
def sched(stack: Addresses, db_dsn: str, topics: Topics) -> Iterator[SchedEnv]:
    """A scheduler deployment for one test, on a database of its own (recorded as its topics'
    deployment): small shard count, short ticks and horizons."""
    env = SchedEnv(
        dsn=db_dsn,
        stack=stack,
        topics=topics,
        tenant=f"t{uuid.uuid4().hex[:8]}",
        env={
            "TICKWHEEL_DSN": db_dsn,
            "TICKWHEEL_KAFKA": stack.kafka,
            "TICKWHEEL_ZK": stack.zk,
            "TICKWHEEL_TOPIC_PREFIX": topics.prefix,
            "TICKWHEEL_SHARDS": str(TEST_SHARDS),
            "TICKWHEEL_TICK_MS": "50",
            "TICKWHEEL_HORIZON_S": "10",
            "TICKWHEEL_RESYNC_S": "3",
            "TICKWHEEL_SWEEP_INTERVAL_MS": "500",
            "TICKWHEEL_PUBLISH_LEASE_S": "30",
            "TICKWHEEL_ZK_SESSION_TIMEOUT_MS": str(ZK_TEST_SESSION_MS),
            "TICKWHEEL_SCHEDULER_DB_CONNECTIONS": "8",
        },
    )
    asyncio.run(_create_tenant(db_dsn, env.tenant))
    try:
        yield env
    finally:
        for proc in env.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait(10)


async def _create_tenant(dsn: str, tenant: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("INSERT INTO tenants (name) VALUES ($1)", tenant)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def running_scheduler(
    env: SchedEnv, member_id: str, **overrides: Any
) -> AsyncIterator[tuple[Scheduler, Process]]:
    """A scheduler on this event loop; stopped (and checked to exit cleanly) on leaving."""
    process = Process(f"scheduler-{member_id}")
    scheduler = Scheduler(env.settings(**overrides), member_id)
    await scheduler.start(process)
    runner = asyncio.create_task(process.run(signals=False, grace_s=10))
    try:
        yield scheduler, process
    finally:
        process.request_stop()
        code = await runner
        assert code == 0, f"scheduler {member_id} exited with {code}: {process.health}"


async def wait_for(
    check: Callable[[], Any], timeout_s: float, interval_s: float = 0.1, what: str = "condition"
) -> Any:
    """Poll an async or sync `check` until it returns something truthy; return it."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)


def consume_runs(
    kafka: str, topic: str, timeout_s: float = 20.0
) -> list[tuple[RunEnvelope, dict[str, bytes]]]:
    """Every run envelope on `topic` so far (with headers), read from the beginning."""
    return [
        (RunEnvelope.decode(msg.value() or b""), dict(msg.headers() or []))
        for msg in drain(kafka, topic, timeout_s=timeout_s)
    ]


def envelope_keys(found: list[tuple[RunEnvelope, dict[str, bytes]]]) -> list[str]:
    return [env.run_key for env, _ in found]


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


# --- the registration intake -----------------------------------------------------------------


def stack_settings(stack: Addresses, db_dsn: str, topics: Topics, **extra: Any) -> Settings:
    """Settings on the test stack, a scratch database and a test's topics (16 shards)."""
    return load_settings(
        dsn=db_dsn, kafka=stack.kafka, zk=stack.zk, topic_prefix=topics.prefix, shards=16, **extra
    )


def _intake_partitions(settings: Settings, partitions: int = 2) -> list[TopicPartition]:
    topic = Topics(settings.topic_prefix).registrations
    return [TopicPartition(topic, p) for p in range(partitions)]


def intake_committed(settings: Settings) -> int:
    """Offsets of the registrations topic the intake's group has committed, summed."""
    cons = consumer(
        settings.effective_kafka, intake_group(settings), **{"enable.auto.commit": False}
    )
    try:
        return sum(
            max(0, tp.offset) for tp in cons.committed(_intake_partitions(settings), timeout=10)
        )
    finally:
        cons.close()


def rewind_intake(settings: Settings) -> None:
    """Move the intake's group back to the start of the topic: every message is redelivered."""
    cons = consumer(
        settings.effective_kafka, intake_group(settings), **{"enable.auto.commit": False}
    )
    try:
        start = [TopicPartition(tp.topic, tp.partition, 0) for tp in _intake_partitions(settings)]
        cons.commit(offsets=start, asynchronous=False)
    finally:
        cons.close()


async def run_intake_until(
    settings: Settings,
    store: RegistryStore,
    committed: int,
    timeout_s: float = 60.0,
    *,
    on_batch: Callable[[BatchReport], None] | None = None,
) -> None:
    """Run an intake on this loop until `committed` offsets of the registrations topic are
    committed; fail if it dies or takes longer than `timeout_s`. `on_batch` sees each settled
    batch's report."""
    intake = make_intake(store, settings)
    intake.on_batch = on_batch
    stop = asyncio.Event()
    task = asyncio.create_task(intake.run(stop))
    deadline = time.monotonic() + timeout_s
    try:
        while intake_committed(settings) < committed:
            assert time.monotonic() < deadline, "the intake did not finish in time"
            assert not task.done(), task
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await task
        await intake.close()


def upsert_op(tenant: str, doc: dict[str, Any], shards: int) -> Op:
    """The registry's upsert of a job document, validated as HTTP and Kafka validate it."""
    spec = validate_job(tenant, parse_document(doc), Limits(shards=shards), now_ms())
    return Op("upsert", tenant, doc["id"], spec=spec)
