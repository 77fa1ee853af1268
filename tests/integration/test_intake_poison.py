"""Poison messages on the real stack: none stops or wedges the shared intake (issue 10).

Each poison is followed, on the same key (so the same partition, strictly after it), by a valid
registration: the poison must end on the rejected topic with its reason, the valid one must
land in Postgres within seconds, and the intake must still be running. The intake runs
in-process as a part of a `Process`, as `tickwheel registry` runs it; one test runs the real
command to see a dying intake end the process non-zero.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from tickwheel.config import Settings, load_settings
from tickwheel.kafka.producing import PRODUCER_MESSAGE_MAX_BYTES
from tickwheel.registry_api.document import VERSION_MAX
from tickwheel.registry_api.http import create_app
from tickwheel.registry_api.service import intake_group, limits_of, make_intake
from tickwheel.registry_api.store import RegistryStore
from tickwheel.runtime import EXIT_OK, EXIT_PART_DIED, Process
from tickwheel.stack import Addresses
from tickwheel.testing import drain, produce
from tickwheel.topics import Topics

pytestmark = pytest.mark.integration

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")
SHARDS = 16
LANDS_WITHIN_S = 30.0  # seconds from produce until every message is settled (group join incl.)


def _job(job_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": job_id, "schedule": "*/5 * * * *", "handler": "demo.echo", **extra}


def _upsert(tenant: str, job: dict[str, Any], version: int | None = None) -> bytes:
    body: dict[str, Any] = {"op": "upsert", "tenant": tenant, "job": job}
    if version is not None:
        body["version"] = version
    return json.dumps(body).encode()  # the stdlib writes integers of any size


def _op(op: str, tenant: str, job_id: str, version: int | None = None) -> bytes:
    body: dict[str, Any] = {"op": op, "tenant": tenant, "id": job_id}
    if version is not None:
        body["version"] = version
    return json.dumps(body).encode()


def _trigger(tenant: str, job_id: str, idempotency_key: str) -> bytes:
    body = {"op": "trigger", "tenant": tenant, "id": job_id, "idempotency_key": idempotency_key}
    return json.dumps(body).encode()


def _offsets(kafka: str, group: str, topic: str) -> tuple[int, int]:
    """(committed, end) offsets of `topic` summed over its two partitions."""
    cons = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        parts = [TopicPartition(topic, p) for p in range(2)]
        committed = sum(max(0, tp.offset) for tp in cons.committed(parts, timeout=10))
        end = sum(cons.get_watermark_offsets(tp, timeout=10)[1] for tp in parts)
        return committed, end
    finally:
        cons.close()


async def _jobs(dsn: str, tenant: str) -> dict[str, tuple[int, str]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT job_id, version, status FROM jobs WHERE tenant = $1", tenant
        )
    finally:
        await conn.close()
    return {r["job_id"]: (r["version"], r["status"]) for r in rows}


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> float:
    """Poll `check` until true; the seconds it took."""
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < timeout_s, f"{what} within {timeout_s}s"
        await asyncio.sleep(0.2)
    return time.monotonic() - started


@pytest.fixture
def settings(stack: Addresses, topics: Topics, db_dsn: str) -> Settings:
    # Signatures off, said explicitly: these tests are about poison messages and dying loops, not
    # about who may produce; its registrations are unsigned (signatures: test_intake.py,
    # test_intake_replays.py, with the default).
    return load_settings(
        dsn=db_dsn,
        kafka=stack.kafka,
        zk=stack.zk,
        topic_prefix=topics.prefix,
        shards=SHARDS,
        kafka_session_timeout_ms=6000,
        intake_require_signature=False,
    )


@pytest.fixture
async def store(db_dsn: str) -> AsyncIterator[RegistryStore]:
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=4)
    yield RegistryStore(pool, shards=SHARDS)
    await pool.close()


@asynccontextmanager
async def registry(settings: Settings, store: RegistryStore) -> AsyncIterator[Process]:
    """The intake as `tickwheel registry` runs it: a part of a Process; stopped cleanly after."""
    process = Process("registry-under-test")
    intake = make_intake(store, settings, health=process.state("intake"))
    process.on_close(intake.close)
    process.spawn("intake", intake.run(process.stop))
    runner = asyncio.create_task(process.run(signals=False, grace_s=20))
    try:
        yield process
    finally:
        if not runner.done():
            process.request_stop()
        code = await runner
    assert code == EXIT_OK, process.health["intake"].error


async def _settled(settings: Settings, process: Process) -> float:
    """Wait until every produced registration's offset is committed; seconds it took."""
    group, topic = intake_group(settings), f"{settings.topic_prefix}.registrations"

    async def done() -> bool:
        assert process.health["intake"].alive, process.health["intake"].error
        committed, end = await asyncio.to_thread(_offsets, settings.effective_kafka, group, topic)
        return committed == end

    return await _until(done, LANDS_WITHIN_S, "every registration settled")


async def test_each_poison_is_rejected_and_the_valid_message_behind_it_lands(
    stack: Addresses, topics: Topics, settings: Settings, store: RegistryStore, db_dsn: str
) -> None:
    """NUL tenant or id, a message near the size limit, versions 2^63, 2^63-1, 0, -5, a
    stale version and a trigger's idempotency key with a NUL or of 10,000 characters are each
    rejected with their reason; the valid message behind each lands and
    the intake keeps running"""
    tenant = f"p{uuid.uuid4().hex[:10]}"
    await store.create_tenant(tenant)
    big = _upsert(tenant, _job("big", payload={"blob": "x" * 900_000}))
    poisons: list[tuple[str, bytes, str]] = [
        ("nul-tenant", _upsert(tenant + "\u0000", _job("nul-tenant")), "does not exist"),
        ("nul-id", _op("pause", tenant, "nul\u0000id"), "the database refused it"),
        ("big", big, "payload: is 900011 bytes of JSON"),
        ("v-2-63", _upsert(tenant, _job("v-2-63"), version=2**63), "version: must be"),
        ("v-int64", _upsert(tenant, _job("v-int64"), version=2**63 - 1), "version: must be"),
        ("v-zero", _upsert(tenant, _job("v-zero"), version=0), "version: must be"),
        ("v-neg", _op("pause", tenant, "v-neg", version=-5), "version: must be"),
        # issue 28 (low): one rule for idempotency keys, as over HTTP and the CLI.
        ("idem-nul", _trigger(tenant, "idem-nul", "a\u0000b"), "idempotency_key: must be"),
        ("idem-long", _trigger(tenant, "idem-long", "k" * 10_000), "idempotency_key: must be"),
    ]
    messages = [(key, value) for key, value, _ in poisons]
    # Stale: version 5 applies, version 3 behind it is rejected naming the stored 5.
    messages += [
        ("stale", _upsert(tenant, _job("stale"), version=5)),
        ("stale", _upsert(tenant, _job("stale", schedule="1 * * * *"), version=3)),
    ]
    messages += [(key, _upsert(tenant, _job(key))) for key, _, _ in poisons]
    messages += [("stale", _upsert(tenant, _job("stale", schedule="2 * * * *")))]

    async with registry(settings, store) as process:
        produce(stack.kafka, topics.registrations, messages)
        await _settled(settings, process)
        intake = process.health["intake"]
        assert intake.alive and intake.detail["consuming"] and intake.detail["failing"] == 0
        assert len(intake.detail["partitions"]) == 2 and intake.detail["last_batch_at"]

    jobs = await _jobs(db_dsn, tenant)
    expected = {key: (1, "active") for key, _, _ in poisons}
    expected["stale"] = (6, "active")  # 5, then the unversioned change's bump
    assert jobs == expected

    raw = drain(stack.kafka, topics.rejected, expect=len(poisons) + 1)
    assert all(len(m.value()) + len(m.key() or b"") <= PRODUCER_MESSAGE_MAX_BYTES for m in raw)
    bodies = {m.key().decode(): orjson.loads(m.value()) for m in raw}
    assert len(raw) == len(bodies) == len(poisons) + 1, [m.key() for m in raw]
    for key, value, reason in poisons:
        assert reason in bodies[key]["reason"], (key, bodies[key]["reason"])
        if key != "big":
            assert base64.b64decode(bodies[key]["original"]) == value
    assert f"from 1 to {VERSION_MAX}" in bodies["v-2-63"]["reason"]
    assert bodies["stale"]["reason"] == (
        "stale: version 3 of job 'stale' is not newer than the stored version 5"
    )
    cut = bodies["big"]
    assert cut["truncated"] is True and cut["original_size"] == len(big)
    assert cut["original_sha256"] == hashlib.sha256(big).hexdigest()
    assert big.startswith(base64.b64decode(cut["original"]))


async def test_every_message_of_a_mixed_stream_is_applied_or_rejected(
    stack: Addresses, topics: Topics, settings: Settings, store: RegistryStore, db_dsn: str
) -> None:
    """of N mixed registrations (valid, invalid, stale, bad versions, unknown tenants and
    jobs), rows in the database plus rejections equal N, each rejection once"""
    tenant = f"m{uuid.uuid4().hex[:10]}"
    await store.create_tenant(tenant)
    rng = random.Random(10)
    blocks: list[list[tuple[str, bytes]]] = []
    blocks += [[(f"ok-{i}", _upsert(tenant, _job(f"ok-{i}")))] for i in range(150)]
    blocks += [
        [
            (f"vs-{i}", _upsert(tenant, _job(f"vs-{i}"), version=10)),
            (f"vs-{i}", _op("pause", tenant, f"vs-{i}", version=4)),  # stale
        ]
        for i in range(30)
    ]
    blocks += [
        [(f"bad-{i}", _upsert(tenant, _job(f"bad-{i}", schedule="61 * * * *")))] for i in range(30)
    ]
    blocks += [[(f"nt-{i}", _upsert(f"{tenant}\u0000{i}", _job(f"nt-{i}")))] for i in range(20)]
    out_of_range = (0, -1, VERSION_MAX + 1, 2**63)
    blocks += [
        [(f"bv-{i}", _upsert(tenant, _job(f"bv-{i}"), version=out_of_range[i % 4]))]
        for i in range(20)
    ]
    blocks += [[(f"ghost-{i}", _op("resume", tenant, f"ghost-{i}"))] for i in range(20)]
    rng.shuffle(blocks)
    messages = [m for block in blocks for m in block]
    total = len(messages)
    assert total == 300

    async with registry(settings, store) as process:
        produce(stack.kafka, topics.registrations, messages)
        await _settled(settings, process)

    jobs = await _jobs(db_dsn, tenant)
    rejected = [orjson.loads(m.value()) for m in drain(stack.kafka, topics.rejected, expect=120)]
    positions = {(r["source"]["partition"], r["source"]["offset"]) for r in rejected}
    assert len(positions) == len(rejected), "each message is rejected at most once"
    assert len(jobs) + len(rejected) == total
    assert len(jobs) == 180
    assert all(version == 10 for key, (version, _) in jobs.items() if key.startswith("vs-"))
    assert sum(r["reason"].startswith("stale:") for r in rejected) == 30


async def test_healthz_reports_the_intake_and_fails_when_it_dies(
    stack: Addresses,
    topics: Topics,
    settings: Settings,
    store: RegistryStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/healthz shows the intake consuming with its partitions; when the intake's loop raises,
    the process ends with exit code 1 and /healthz answers 503 naming the dead part"""
    process = Process("registry-under-test")
    intake = make_intake(store, settings, health=process.state("intake"))
    process.on_close(intake.close)
    process.spawn("intake", intake.run(process.stop))
    runner = asyncio.create_task(process.run(signals=False, grace_s=20))
    app = create_app(store, limits_of(settings), parts=process.health)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://registry.test"
    ) as client:

        async def holds_partitions() -> bool:
            body = (await client.get("/healthz")).json()
            return len(body["parts"]["intake"]["detail"]["partitions"]) == 2

        await _until(holds_partitions, LANDS_WITHIN_S, "the intake holds its partitions")
        healthy = await client.get("/healthz")
        assert healthy.status_code == 200
        part = healthy.json()["parts"]["intake"]
        assert part["alive"] is True and part["detail"]["consuming"] is True

        monkeypatch.setenv("TICKWHEEL_FAULT", "raise:intake_loop")
        assert await asyncio.wait_for(runner, 30) == EXIT_PART_DIED
        dead = await client.get("/healthz")
    assert dead.status_code == 503
    body = dead.json()
    assert body["status"] == "unavailable" and "intake" in body["detail"]
    assert body["parts"]["intake"]["alive"] is False
    assert "InjectedFault" in body["parts"]["intake"]["error"]


def _registry_env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "TICKWHEEL_DSN": settings.effective_dsn,
        "TICKWHEEL_KAFKA": settings.effective_kafka,
        "TICKWHEEL_ZK": settings.effective_zk,
        "TICKWHEEL_TOPIC_PREFIX": settings.topic_prefix,
        "TICKWHEEL_SHARDS": str(SHARDS),
        "TICKWHEEL_KAFKA_SESSION_TIMEOUT_MS": "6000",
        "TICKWHEEL_INTAKE_REQUIRE_SIGNATURE": "false",  # as the settings fixture, and why
    }


def test_a_registry_whose_intake_dies_exits_non_zero_with_the_traceback(
    settings: Settings,
) -> None:
    """`tickwheel registry` whose intake loop raises logs the traceback and exits 1"""
    done = subprocess.run(
        [TICKWHEEL, "registry", "--no-http"],
        env={**_registry_env(settings), "TICKWHEEL_FAULT": "raise:intake_loop"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == EXIT_PART_DIED, done.stderr[-3000:]
    lines = [orjson.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    [death] = [line for line in lines if line["msg"].startswith("part intake died")]
    assert "Traceback" in death["exc"] and "InjectedFault" in death["exc"]


def test_a_registry_whose_http_server_cannot_start_exits_non_zero(settings: Settings) -> None:
    """`tickwheel registry` on a port already taken ends with exit 1, not a half-started process"""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [TICKWHEEL, "registry", "--no-intake", "--port", str(port)],
            env=_registry_env(settings),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == EXIT_PART_DIED, done.stderr[-3000:]
    assert "part http died" in done.stderr
