"""Which tenants are capped, as this worker knows it: a small cache of `tenants.max_running`,
refreshed every REFRESH_S by the worker's `caps` part.

The cap itself holds in Postgres (`worker_claim_capped`, tickwheel/sql/limits.sql): a claim
of a capped tenant's runs locks the tenant's row, counts its runs running across the cluster
(index `job_runs_capped_running`) and claims only as many as the cap has free; the others are
held back: `retrying` due in `TICKWHEEL_TENANT_CAP_HOLD_MS`, their attempt budget raised by
one (a hold spends no attempt), `holds` and `held_ms` recording the wait. The worker then marks
their deliveries done (the DB write landed, I5): the shard's leader dispatches them again like
a retry, so a held run is never lost and never blocks the Kafka loop.

This cache only decides which statement a run's claim takes: runs of tenants not in it take
the ordinary `worker_claim`, unchanged. A cap set (or lifted) reaches every worker within
REFRESH_S; until then its runs are claimed as before (a new cap counts only runs claimed under
it: those claimed before it are not `cap_tracked`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from tickwheel.db import DB_ERRORS
from tickwheel.workers.limit_store import LimitStore
from tickwheel.workers.metrics import WorkerMetrics

log = logging.getLogger("tickwheel.worker")

REFRESH_S = 2.0  # seconds between two reads of the capped tenants


class TenantCaps:
    def __init__(self, store: LimitStore, metrics: WorkerMetrics) -> None:
        self.store = store
        self.metrics = metrics
        self.names: frozenset[str] = frozenset()  # the capped tenants
        self._labels: set[str] = set()

    async def refresh(self) -> None:
        rows = await self.store.tenant_caps()
        self.names = frozenset(name for name, _, _ in rows)
        for name, cap, running in rows:
            self.metrics.tenant_cap.labels(name).set(cap)
            self.metrics.tenant_running.labels(name).set(running)
        for gone in self._labels - self.names:
            self.metrics.tenant_cap.remove(gone)
            self.metrics.tenant_running.remove(gone)
        self._labels = set(self.names)

    async def run(self, stop: asyncio.Event) -> None:
        """The `caps` part: refresh until `stop`; a database error keeps the last list."""
        while not stop.is_set():
            try:
                await self.refresh()
            except DB_ERRORS:
                log.warning("reading the capped tenants failed; keeping the list", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), REFRESH_S)
