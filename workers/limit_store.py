"""The Postgres side of the cluster-wide limits: the target hosts' rows (`target_hosts`) and
the capped tenants (`tenants.max_running`), through the statements of tickwheel/sql/limits.sql.
What they mean: workers/host_limits.py and workers/tenant_caps.py."""

from __future__ import annotations

import asyncpg

from tickwheel.queries import QUERIES
from tickwheel.workers.gcra import Rate
from tickwheel.workers.host_limits import PROBE_LEASE_S, Failed, Take


class LimitStore:
    def __init__(self, pool: asyncpg.Pool, worker_id: str) -> None:
        self.pool = pool
        self.worker_id = worker_id

    async def take(
        self, key: str, wanted: int, rate: Rate, horizon_us: int, failures_to_open: int
    ) -> Take | None:
        row = await self.pool.fetchrow(
            QUERIES["target_take"],
            key,
            wanted,
            rate.interval_us,
            rate.tolerance_us,
            horizon_us,
            failures_to_open,
            self.worker_id,
            int(PROBE_LEASE_S * 1000),
        )
        return None if row is None else Take(*row)

    async def add(self, key: str) -> None:
        await self.pool.execute(QUERIES["target_host_add"], key)

    async def failed(self, key: str, count: int, failures_to_open: int, cooldown_ms: int) -> Failed:
        row = await self.pool.fetchrow(
            QUERIES["target_failed"], key, count, failures_to_open, cooldown_ms
        )
        if row is None:  # no row: the host was never taken (cannot be: a call takes first)
            return Failed(False, 0, 0, None)
        return Failed(*row)

    async def succeeded(self, key: str) -> None:
        await self.pool.execute(QUERIES["target_succeeded"], key)

    async def tenant_caps(self) -> list[tuple[str, int, int]]:
        """(tenant, max_running, running now across the cluster) of every capped tenant."""
        caps = await self.pool.fetch(QUERIES["tenant_caps"])
        if not caps:
            return []
        names = [r["name"] for r in caps]
        rows = await self.pool.fetch(QUERIES["tenant_caps_running"], names)
        running: dict[str, int] = {r["tenant"]: r["running"] for r in rows}
        return [(r["name"], r["max_running"], running.get(r["name"], 0)) for r in caps]
