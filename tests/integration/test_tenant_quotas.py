"""Per-tenant quotas (issue 25) on the real stack: a tenant over its job quota or its
registration rate is refused — HTTP 429 with Retry-After and the quota named, a rejection on
the rejected topic naming it over Kafka — while another tenant's registrations in the same
batch are applied; the job quota holds for two registry processes writing at once."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from tickwheel.clock import now_ms
from tickwheel.domain import RegistrationOp
from tickwheel.kafka.clients import producer
from tickwheel.registry_api.document import Limits, parse_document, validate_job
from tickwheel.registry_api.http import create_app
from tickwheel.registry_api.metrics import Metrics
from tickwheel.registry_api.state import Op
from tickwheel.registry_api.store import RegistryStore
from tickwheel.signatures import sign
from tickwheel.stack import Addresses
from tickwheel.testing import drain
from tickwheel.topics import Topics

from .conftest import run_intake_until, stack_settings

pytestmark = pytest.mark.integration

SHARDS = 16


def _job(job_id: str) -> dict[str, Any]:
    return {"id": job_id, "schedule": "*/5 * * * *", "handler": "demo.echo"}


@pytest.fixture
async def store(db_dsn: str) -> AsyncIterator[RegistryStore]:
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=4)
    yield RegistryStore(pool, shards=SHARDS)
    await pool.close()


def _name() -> str:
    return f"q{uuid.uuid4().hex[:10]}"


async def _tenant(store: RegistryStore, **quotas: Any) -> tuple[str, str]:
    name = _name()
    key = await store.create_tenant(name)
    if quotas:
        await store.set_quotas(name, quotas)
    return name, key


async def _job_ids(db_dsn: str, tenant: str) -> set[str]:
    conn = await asyncpg.connect(db_dsn)
    try:
        rows = await conn.fetch(
            "SELECT job_id FROM jobs WHERE tenant = $1 AND status <> 'deleted'", tenant
        )
        return {r["job_id"] for r in rows}
    finally:
        await conn.close()


async def _counted(db_dsn: str, tenant: str) -> int:
    conn = await asyncpg.connect(db_dsn)
    try:
        jobs: int = await conn.fetchval("SELECT jobs FROM tenant_usage WHERE tenant = $1", tenant)
        return jobs
    finally:
        await conn.close()


def _client(store: RegistryStore, metrics: Metrics, key: str) -> httpx.AsyncClient:
    app = create_app(store, Limits(shards=SHARDS), metrics=metrics)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://registry.test",
        headers={"Authorization": f"Bearer {key}"},
    )


def _refusals(metrics: Metrics, tenant: str, quota: str) -> float:
    value = metrics.registry.get_sample_value(
        "tickwheel_registry_quota_refusals_total", {"tenant": tenant, "quota": quota}
    )
    return value or 0.0


async def test_http_job_quota_refuses_one_job_more_with_429_and_spares_updates_deletes_and_others(
    db_dsn: str, store: RegistryStore
) -> None:
    """over HTTP a tenant at max_jobs gets 429 (Retry-After, quota max_jobs) for a new job and
    nothing of it changes; updating and deleting its jobs still work, and another tenant
    registers meanwhile"""
    limited, key = await _tenant(store, max_jobs=2)
    other, other_key = await _tenant(store)
    metrics = Metrics()
    async with _client(store, metrics, key) as tw, _client(store, metrics, other_key) as tw2:
        for job_id in ("a", "b"):
            assert (await tw.post("/v1/jobs", json=_job(job_id))).status_code == 201
        refused = await tw.post("/v1/jobs", json=_job("c"))
        assert refused.status_code == 429, refused.text
        body = refused.json()
        assert body["error"] == "quota_exceeded"
        assert body["quota"] == "max_jobs"
        assert "max_jobs" in body["detail"] and limited in body["detail"]
        assert int(refused.headers["Retry-After"]) == body["retry_after_s"] >= 1
        for i in range(3):
            assert (await tw2.post("/v1/jobs", json=_job(f"o{i}"))).status_code == 201
        updated = await tw.post("/v1/jobs", json={**_job("a"), "schedule": "0 9 * * *"})
        assert updated.status_code == 200, updated.text
        paused = await tw.post("/v1/jobs/a/pause")
        assert paused.status_code == 200, paused.text
        assert (await tw.delete("/v1/jobs/b")).status_code == 204
        assert (await tw.post("/v1/jobs", json=_job("c"))).status_code == 201
    assert await _job_ids(db_dsn, limited) == {"a", "c"}
    assert await _counted(db_dsn, limited) == 2
    assert await _job_ids(db_dsn, other) == {"o0", "o1", "o2"}
    assert await _counted(db_dsn, other) == 3
    assert _refusals(metrics, limited, "max_jobs") == 1
    assert _refusals(metrics, other, "max_jobs") == 0


async def test_http_rate_quota_refuses_the_registration_past_its_burst(
    db_dsn: str, store: RegistryStore
) -> None:
    """a rate of 0.1/s with a burst of 1: the first registration lands, the second within the
    test is a 429 naming max_registrations_per_s with a Retry-After of up to 10 s; another
    tenant is not slowed"""
    limited, key = await _tenant(store, max_registrations_per_s=0.1, registrations_burst=1)
    other, other_key = await _tenant(store)
    metrics = Metrics()
    async with _client(store, metrics, key) as tw, _client(store, metrics, other_key) as tw2:
        assert (await tw.post("/v1/jobs", json=_job("first"))).status_code == 201
        refused = await tw.post("/v1/jobs", json=_job("second"))
        assert refused.status_code == 429, refused.text
        assert refused.json()["quota"] == "max_registrations_per_s"
        assert 1 <= int(refused.headers["Retry-After"]) <= 10
        also = await tw.delete("/v1/jobs/first")  # every operation is a registration
        assert also.status_code == 429, also.text
        for i in range(5):
            assert (await tw2.post("/v1/jobs", json=_job(f"o{i}"))).status_code == 201
    assert await _job_ids(db_dsn, limited) == {"first"}
    assert len(await _job_ids(db_dsn, other)) == 5
    assert _refusals(metrics, limited, "max_registrations_per_s") == 2


def _signed_batch(
    kafka: str,
    topic: str,
    messages: list[tuple[str, str, dict[str, Any]]],
    keys: dict[str, str],
) -> list[bytes]:
    """Produce (tenant, job id, job) upserts, each signed with its tenant's key, in order;
    returns their values."""
    prod = producer(kafka, **{"linger.ms": 50})
    values = []
    for tenant, job_id, job in messages:
        value = orjson.dumps({"op": "upsert", "tenant": tenant, "job": job})
        values.append(value)
        prod.produce(
            topic,
            key=job_id.encode(),
            value=value,
            headers=[sign(value, keys[tenant], topic=topic)],
        )
    assert prod.flush(30) == 0
    return values


async def test_kafka_job_quota_rejects_one_job_more_naming_it_and_applies_the_other_tenant(
    stack: Addresses, topics: Topics, db_dsn: str, store: RegistryStore
) -> None:
    """over Kafka, in one batch: the limited tenant's registrations past max_jobs are on the
    rejected topic with a reason naming max_jobs, the other tenant's interleaved ones are all
    applied, and the intake's offsets reach the end (nothing retried, nothing lost)"""
    limited, key = await _tenant(store, max_jobs=3)
    other, other_key = await _tenant(store)
    batch = []
    for i in range(5):
        batch.append((limited, f"l{i}", _job(f"l{i}")))
        batch.append((other, f"o{i}", _job(f"o{i}")))
    values = _signed_batch(
        stack.kafka, topics.registrations, batch, {limited: key, other: other_key}
    )
    settings = stack_settings(stack, db_dsn, topics)
    await run_intake_until(settings, store, len(batch))
    assert await _job_ids(db_dsn, other) == {f"o{i}" for i in range(5)}
    # Keyed by job id, the messages spread over two partitions: which three come first is
    # the batch's order, not the production order.
    applied = await _job_ids(db_dsn, limited)
    assert len(applied) == 3
    assert await _counted(db_dsn, limited) == 3
    rejected = [orjson.loads(m.value()) for m in drain(stack.kafka, topics.rejected, expect=2)]
    originals = {base64.b64decode(r["original"]): r["reason"] for r in rejected}
    limited_values = {f"l{i}": values[2 * i] for i in range(5)}
    assert set(originals) == {v for job, v in limited_values.items() if job not in applied}
    assert all(reason.startswith("quota max_jobs exceeded") for reason in originals.values())


async def test_kafka_rate_quota_rejects_past_the_burst_and_applies_the_other_tenant(
    stack: Addresses, topics: Topics, db_dsn: str, store: RegistryStore
) -> None:
    """over Kafka a tenant at 0.1 registrations/s with a burst of 1 gets its first
    registration applied and the rest rejected naming max_registrations_per_s, while the other
    tenant's registrations in the same batch all land"""
    limited, key = await _tenant(store, max_registrations_per_s=0.1, registrations_burst=1)
    other, other_key = await _tenant(store)
    batch = [(limited, f"l{i}", _job(f"l{i}")) for i in range(3)]
    batch += [(other, f"o{i}", _job(f"o{i}")) for i in range(3)]
    _signed_batch(stack.kafka, topics.registrations, batch, {limited: key, other: other_key})
    settings = stack_settings(stack, db_dsn, topics)
    await run_intake_until(settings, store, len(batch))
    assert await _job_ids(db_dsn, other) == {"o0", "o1", "o2"}
    assert len(await _job_ids(db_dsn, limited)) == 1
    rejected = [orjson.loads(m.value()) for m in drain(stack.kafka, topics.rejected, expect=2)]
    assert len(rejected) == 2
    assert all("quota max_registrations_per_s exceeded" in r["reason"] for r in rejected)


async def test_the_job_quota_holds_for_two_registry_processes_writing_at_once(
    db_dsn: str, store: RegistryStore
) -> None:
    """two registries (two pools) creating 20 jobs of one tenant concurrently, max_jobs 5:
    exactly 5 jobs exist and the counter says 5"""
    limited, _ = await _tenant(store, max_jobs=5)
    pools = [await asyncpg.create_pool(db_dsn, min_size=4, max_size=4) for _ in range(2)]
    try:
        registries = [RegistryStore(pool, shards=SHARDS) for pool in pools]

        async def create(i: int) -> int:
            doc = parse_document(_job(f"j{i}"))
            spec = validate_job(limited, doc, Limits(shards=SHARDS), now_ms())
            op = Op(RegistrationOp.UPSERT, limited, f"j{i}", spec=spec)
            [applied] = await registries[i % 2].apply([op])
            return 0 if applied.quota is not None else 1

        created = await asyncio.gather(*(create(i) for i in range(20)))
    finally:
        for pool in pools:
            await pool.close()
    assert sum(created) == 5
    assert len(await _job_ids(db_dsn, limited)) == 5
    assert await _counted(db_dsn, limited) == 5


async def test_operators_read_every_tenants_quotas_and_cap_over_http(
    store: RegistryStore,
) -> None:
    """GET /v1/ops/tenants: an operator key sees each tenant's jobs, quotas and cap (what
    `tickwheel tenant ls --json` prints); a tenant's key is refused with 403, no key with 401"""
    from tickwheel.registry_api.ops.keys import OperatorKeys

    limited, key = await _tenant(store, max_jobs=5, max_registrations_per_s=2.5)
    await store.set_max_running(limited, 7)
    plain, _ = await _tenant(store)
    operator = await OperatorKeys(store.pool).create(f"ops-{uuid.uuid4().hex[:8]}")
    metrics = Metrics()
    async with _client(store, metrics, key) as tw, _client(store, metrics, operator) as ops:
        assert (await tw.post("/v1/jobs", json=_job("a"))).status_code == 201
        assert (await tw.get("/v1/ops/tenants")).status_code == 403
        anonymous = await tw.get("/v1/ops/tenants", headers={"Authorization": ""})
        assert anonymous.status_code == 401
        answer = await ops.get("/v1/ops/tenants")
    assert answer.status_code == 200, answer.text
    assert answer.headers["Cache-Control"] == "no-store"
    items = {item["tenant"]: item for item in answer.json()["items"]}
    mine = items[limited]
    assert (mine["jobs"], mine["max_jobs"], mine["max_registrations_per_s"]) == (1, 5, 2.5)
    assert (mine["max_running"], mine["running"], mine["active_keys"]) == (7, 0, 1)
    other = items[plain]
    assert (other["jobs"], other["max_jobs"], other["max_running"], other["running"]) == (
        0,
        None,
        None,
        None,
    )
    assert [i for i in answer.json()["items"] if i["tenant"] in (limited, plain)] == [
        i for i in await store.tenants() if i["tenant"] in (limited, plain)
    ]
