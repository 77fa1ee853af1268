"""A batch folded ahead as if its jobs were new is used only when none of them exists."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from tickwheel.clock import now_ms
from tickwheel.registry_api.document import Limits, parse_document, validate_job
from tickwheel.registry_api.state import Op, Outcome
from tickwheel.registry_api.store import RegistryStore

pytestmark = pytest.mark.integration

SHARDS = 4


def _upsert(tenant: str, job_id: str, payload: dict[str, int]) -> Op:
    doc = parse_document(
        {"id": job_id, "schedule": "*/5 * * * *", "handler": "h.run", "payload": payload}
    )
    spec = validate_job(tenant, doc, Limits(shards=SHARDS), now_ms())
    return Op("upsert", tenant, job_id, spec=spec)


async def _store(db_dsn: str) -> tuple[asyncpg.Pool, RegistryStore, str]:
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=2)
    store = RegistryStore(pool, shards=SHARDS)
    tenant = f"t{uuid.uuid4().hex[:8]}"
    await store.create_tenant(tenant)
    return pool, store, tenant


async def test_new_jobs_are_written_from_the_plan(db_dsn: str) -> None:
    """a batch of new jobs applied with its plan stores them as the in-transaction fold would"""
    pool, store, tenant = await _store(db_dsn)
    try:
        ops = [_upsert(tenant, f"j{i}", {"n": i}) for i in range(3)]
        ops.append(_upsert(tenant, "j0", {"n": 10}))  # the same job again, later in the batch
        plan = store.plan_new(ops, now_ms())
        applied = await store.apply(ops, plan)
        assert [a.outcome for a in applied] == [Outcome.CREATED] * 3 + [Outcome.UPDATED]
        rows = await pool.fetch(
            "SELECT job_id, version, payload::text AS payload FROM jobs WHERE tenant = $1"
            " ORDER BY job_id",
            tenant,
        )
        assert [(r["job_id"], r["version"], r["payload"]) for r in rows] == [
            ("j0", 2, '{"n": 10}'),
            ("j1", 1, '{"n": 1}'),
            ("j2", 1, '{"n": 2}'),
        ]
    finally:
        await pool.close()


async def test_a_plan_is_ignored_when_a_job_exists(db_dsn: str) -> None:
    """a plan that assumed a new job is not used once the job exists: its version moves on"""
    pool, store, tenant = await _store(db_dsn)
    try:
        await store.apply([_upsert(tenant, "x", {"n": 1})])
        changed = [_upsert(tenant, "x", {"n": 2}), _upsert(tenant, "y", {"n": 1})]
        stale_plan = store.plan_new(changed, now_ms())
        assert [a.outcome for a in stale_plan.results] == [Outcome.CREATED, Outcome.CREATED]
        applied = await store.apply(changed, stale_plan)
        assert [a.outcome for a in applied] == [Outcome.UPDATED, Outcome.CREATED]
        versions = dict(
            await pool.fetch(
                "SELECT job_id, version FROM jobs WHERE tenant = $1 ORDER BY job_id", tenant
            )
        )
        assert versions == {"x": 2, "y": 1}
    finally:
        await pool.close()
