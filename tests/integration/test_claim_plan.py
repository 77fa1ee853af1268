"""The leaders' claim finds each due job by its primary key, whatever `jobs`' statistics say.

In a hot second every due job of a shard has the same `next_run_at`, so the `jobs_due` entry
(shard, instant) names all of them: a claim that probed it per job walked the whole shard for
each one. The planner chose that probe while `jobs` had not been analysed since the burst's
jobs were written (a fresh registration, autovacuum not there yet), and the burst then cost
Postgres twice the CPU (docs/BENCHMARKS.md, session 20). Checked here on this module's own
database with its autovacuum off, before and after an ANALYZE, in the plan a statement gets
for its values and in the generic plan a prepared statement settles on.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tickwheel.bench.load import Handler, documents, due_instants, register_bulk_into
from tickwheel.bench.scratch import TENANT
from tickwheel.clock import now_ms
from tickwheel.queries import QUERIES
from tickwheel.schedule import ScheduleCache
from tickwheel.shards import store
from tickwheel.shards.plan import plan_claims

pytestmark = pytest.mark.integration

JOBS = 5_000  # one shard's, all due at one instant
CLAIMED = 300  # what one claim takes of them
LEAD_MS = 3_600_000


@pytest.fixture
async def claim(db_dsn: str) -> AsyncIterator[tuple[asyncpg.Connection, list[object]]]:
    """A connection and the parameters of one leader's claim of `CLAIMED` of the due jobs."""
    conn = await asyncpg.connect(db_dsn)
    try:
        await conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        await conn.execute(QUERIES["bench_tenant"], TENANT)
        due_at = now_ms() + LEAD_MS
        docs = documents(due_instants(JOBS, due_at, 0), Handler.parse("noop"))
        await register_bulk_into(db_dsn, 1, docs, lambda _: None)
        lease = await store.take_over(conn, 0, "plan-test")
        loaded, _ = await store.horizon(conn, 0, due_at + 1)
        entries = [entry for entry, _ in loaded]
        assert len(entries) == JOBS
        batch = plan_claims(entries[:CLAIMED], due_at, ScheduleCache())
        params = store.claim_params([(lease, batch)], [(lease.epoch, lease.owner)], 300_000)
        yield conn, params
    finally:
        await conn.close()


async def _plans(conn: asyncpg.Connection, params: list[object]) -> dict[str, list[str]]:
    """The claim's plan for these values, and its generic plan."""
    custom = await conn.fetch("EXPLAIN " + QUERIES["claim_due"], *params)
    types = [
        "text[]" if t.name == "_text" else t.name
        for t in (await conn.prepare(QUERIES["claim_due"])).get_parameters()
    ]
    async with conn.transaction():
        await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        await conn.execute(f"PREPARE claim_plan ({', '.join(types)}) AS {QUERIES['claim_due']}")
        nulls = ", ".join(["NULL"] * len(types))
        generic = await conn.fetch(f"EXPLAIN EXECUTE claim_plan ({nulls})")
        await conn.execute("DEALLOCATE claim_plan")
    return {"custom": [r[0] for r in custom], "generic": [r[0] for r in generic]}


def _jobs_access(plan: list[str]) -> list[str]:
    """How the plan reads `jobs`: the index of each index scan of it ("seq" for a scan of the
    whole table)."""
    found = []
    for line in plan:
        if "Seq Scan on jobs " in line:
            found.append("seq")
        elif match := re.search(r"(?:using|Bitmap Index Scan on) (jobs_\w+)", line):
            found.append(match.group(1))
    return found


async def test_the_claim_reads_each_due_job_by_its_key(
    claim: tuple[asyncpg.Connection, list[object]],
) -> None:
    """no plan of the claim reads `jobs` through `jobs_due` (or any index but its key), with
    the burst's jobs never analysed and once analysed"""
    conn, params = claim
    for state in ("never analysed", "analysed"):
        if state == "analysed":
            await conn.execute("ANALYZE jobs")
        for kind, plan in (await _plans(conn, params)).items():
            access = _jobs_access(plan)
            assert access, (state, kind, plan)
            assert set(access) == {"jobs_pkey"}, (state, kind, access, plan)
