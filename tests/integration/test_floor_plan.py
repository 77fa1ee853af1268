"""The floor's claim reaches each due job through the primary key, not a scan of the table.

Left to itself the planner joined a claim's 5,000 due jobs with `floor_jobs` by a hash join over
a scan of every job (it costs one scan below 5,000 index probes) at every size tried: at
1,000,000 jobs each claim scanned them all, 241 ms instead of 72-80 ms, so the floor a hot
second of a million is compared with was slowed by its own plan (docs/BENCHMARKS.md, session
23). The floor's session (`floor_connection`, its claimer's and its consumers') leaves the
planner key lookups only, as tickwheel's workers' does. Checked here on a table the default
planner does scan, in the generic plan the claimer's prepared statement runs, and by a real
claim.
"""

from __future__ import annotations

import asyncpg
import pytest

from tickwheel.bench.floor import CLAIM_BATCH, floor_connection
from tickwheel.bench.load import job_id
from tickwheel.clock import ms_to_datetime, now_ms
from tickwheel.queries import QUERIES

pytestmark = pytest.mark.integration

JOBS = 20_000  # the default planner scans here as at 50,000, 100,000 and 1,000,000


async def _claim_plan(conn: asyncpg.Connection) -> str:
    await conn.execute(f"PREPARE floor_claim_plan(integer) AS {QUERIES['floor_claim']}")
    try:
        rows = await conn.fetch(f"EXPLAIN EXECUTE floor_claim_plan({CLAIM_BATCH})")
    finally:
        await conn.execute("DEALLOCATE floor_claim_plan")
    return "\n".join(row[0] for row in rows)


async def test_floor_claim_uses_the_primary_key_not_a_scan(db_dsn: str) -> None:
    setup = await asyncpg.connect(db_dsn)
    try:
        await setup.execute(QUERIES["floor_schema"])
        await setup.execute(
            QUERIES["floor_jobs_load"],
            [job_id(i) for i in range(JOBS)],
            ms_to_datetime(now_ms() - 1000),
        )
        await setup.execute(QUERIES["floor_analyze"])
        # What the planner does unguided: the scan the claimer's session rules out.
        await setup.execute("SET plan_cache_mode = force_generic_plan")
        assert "Seq Scan on floor_jobs" in await _claim_plan(setup)
    finally:
        await setup.close()

    conn = await floor_connection(db_dsn)
    try:
        plan = await _claim_plan(conn)
        assert "Seq Scan" not in plan, plan
        assert "Index Scan using floor_jobs_pkey on floor_jobs" in plan, plan
        claimed = await conn.fetch(QUERIES["floor_claim"], CLAIM_BATCH)
        assert len(claimed) == CLAIM_BATCH
        done = await conn.fetchval("SELECT count(*) FROM floor_jobs WHERE done")
        runs = await conn.fetchval("SELECT count(*) FROM floor_runs WHERE status = 'pending'")
        assert (done, runs) == (CLAIM_BATCH, CLAIM_BATCH)
    finally:
        await conn.close()
