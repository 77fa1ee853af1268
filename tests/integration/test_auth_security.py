"""API keys: revocable from the CLI, hashed at rest, failed attempts throttled per client
address, and never written to the registry's logs or metrics."""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from tickwheel.registry_api.auth import FAILED_AUTH_BURST
from tickwheel.registry_api.document import Limits
from tickwheel.registry_api.http import create_app
from tickwheel.registry_api.store import RegistryStore

pytestmark = pytest.mark.integration

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")
SHARDS = 8


@pytest.fixture
async def store(db_dsn: str) -> AsyncIterator[RegistryStore]:
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=4)
    yield RegistryStore(pool, SHARDS)
    await pool.close()


def _revoke(db_dsn: str, what: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "TICKWHEEL_DSN": db_dsn, "TICKWHEEL_SHARDS": str(SHARDS)}
    return subprocess.run(
        [TICKWHEEL, "tenant", "revoke-key", what], env=env, capture_output=True, text=True
    )


async def test_revoke_key_by_prefix_or_whole_key(db_dsn: str, store: RegistryStore) -> None:
    """`tenant revoke-key` revokes by prefix or by the whole key; the key then authenticates
    no one; a second revocation and an unknown prefix exit 2 with one line"""
    tenant = f"rk-{uuid.uuid4().hex[:10]}"
    key = await store.create_tenant(tenant)
    assert await store.tenant_for_key(key) == tenant
    done = _revoke(db_dsn, key[:10])
    assert done.returncode == 0, done.stderr
    assert tenant in done.stdout and key not in done.stdout
    assert await store.tenant_for_key(key) is None
    again = _revoke(db_dsn, key)
    assert again.returncode == 2 and "no active API key" in again.stderr
    assert "Traceback" not in again.stderr
    rows = await store.pool.fetch("SELECT key_hash, prefix FROM api_keys WHERE tenant = $1", tenant)
    assert len(rows) == 1 and key.encode() not in bytes(rows[0]["key_hash"])
    assert rows[0]["prefix"] == key[:10]


async def test_failed_authentications_are_throttled_per_client(store: RegistryStore) -> None:
    """past the burst of failed attempts a client gets 429 with Retry-After, even with a good
    key; a request with a good key never draws from the bucket"""
    key = await store.create_tenant(f"rl-{uuid.uuid4().hex[:10]}")
    app = create_app(store, Limits(shards=SHARDS))
    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://registry.test") as c:
        good = {"Authorization": f"Bearer {key}"}
        for _ in range(FAILED_AUTH_BURST + 5):
            assert (await c.get("/v1/jobs", headers=good)).status_code == 200
        codes = [
            (await c.get("/v1/jobs", headers={"Authorization": "Bearer tw_guess"})).status_code
            for _ in range(FAILED_AUTH_BURST)
        ]
        assert codes == [401] * FAILED_AUTH_BURST
        throttled = await c.get("/v1/jobs", headers=good)
        assert throttled.status_code == 429
        assert int(throttled.headers["Retry-After"]) >= 1
        assert throttled.json()["error"] == "too_many_requests"
    other = httpx.ASGITransport(app=app, client=("203.0.113.8", 1234))
    async with httpx.AsyncClient(transport=other, base_url="http://registry.test") as c:
        assert (await c.get("/v1/jobs", headers=good)).status_code == 200


async def test_operator_endpoints_share_the_failed_authentication_budget(
    store: RegistryStore,
) -> None:
    """issue 28 (low): failures on /v1/ops draw from the client's budget like those on
    /v1/jobs — an unknown key (401) and a tenant's key (403, which tells a valid tenant key
    from an invalid one) alike — so past the burst the client gets 429 there and on the
    tenants' endpoints, before any key is looked up; another client is untouched"""
    key = await store.create_tenant(f"rl-{uuid.uuid4().hex[:10]}")
    app = create_app(store, Limits(shards=SHARDS))
    guesser = httpx.ASGITransport(app=app, client=("203.0.113.9", 1234))
    async with httpx.AsyncClient(transport=guesser, base_url="http://registry.test") as c:
        tenant_key = {"Authorization": f"Bearer {key}"}
        half = FAILED_AUTH_BURST // 2
        codes = [
            (await c.get("/v1/ops/shards", headers=tenant_key)).status_code for _ in range(half)
        ]
        codes += [
            (await c.get("/v1/ops/dead", headers={"Authorization": "Bearer twop_x"})).status_code
            for _ in range(FAILED_AUTH_BURST - half)
        ]
        assert codes == [403] * half + [401] * (FAILED_AUTH_BURST - half)
        ops = await c.get("/v1/ops/shards", headers=tenant_key)
        assert ops.status_code == 429 and int(ops.headers["Retry-After"]) >= 1
        assert (await c.get("/v1/jobs", headers=tenant_key)).status_code == 429
    other = httpx.ASGITransport(app=app, client=("203.0.113.10", 1234))
    async with httpx.AsyncClient(transport=other, base_url="http://registry.test") as c:
        assert (await c.get("/v1/ops/shards", headers=tenant_key)).status_code == 403
        assert (await c.get("/v1/jobs", headers=tenant_key)).status_code == 200


async def test_an_api_key_never_reaches_logs_or_metrics(
    store: RegistryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """good, bad and malformed keys through every kind of answer: none appears in any log
    record or in /metrics"""
    key = await store.create_tenant(f"lg-{uuid.uuid4().hex[:10]}")
    bogus = "tw_" + uuid.uuid4().hex
    app = create_app(store, Limits(shards=SHARDS))
    caplog.set_level(logging.DEBUG)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://registry.test"
    ) as c:
        for secret in (key, bogus):
            h = {"Authorization": f"Bearer {secret}"}
            await c.get("/v1/jobs", headers=h)
            await c.put("/v1/jobs/x", headers=h, json={"schedule": "bad"})
            await c.get("/v1/jobs/missing", headers=h)
            await c.get(f"/v1/jobs?cursor={secret}", headers=h)
        await c.get("/v1/jobs", headers={"Authorization": f"Basic {key}"})
        metrics = (await c.get("/metrics")).text
    # The registry's own records (the test's HTTP client logs the URLs it sends, not ours).
    ours = [r for r in caplog.records if r.name.startswith("tickwheel")]
    logged = "\n".join(r.getMessage() + " " + str(r.__dict__) for r in ours)
    assert ours, "the request log wrote nothing: the test would prove nothing"
    for secret in (key, bogus):
        assert secret not in logged
        assert secret not in metrics
