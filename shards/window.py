"""How far one tenant's dispatch may run ahead of the workers: the dispatch window (issue 25),
a quota an operator sets; off by default (D-271).

The run topics are first in, first out per partition. The 100,000 runs a tenant has due at
09:00 are claimed and published at once, and where the workers are slower than the claims
every run any other tenant has due after that instant waits behind them on every partition
(with workers that keep pace, the leaders' turns, `claims.py`, are enough). So a tenant's runs
that are claimed and not finished (`pending` with a publish lease, cluster-wide: a worker does
not mark a first delivery started, D-268, so a run counts until its result, or until a
heartbeat marks it `running`) are bounded by `limit` (`TICKWHEEL_TENANT_DISPATCH_WINDOW`): a
leader claims a tenant's due entries only while the tenant has room, at most a quarter of the
window per claim, and keeps the rest in its held queue (`ShardLeader._held`), outside the
wheel, until the workers have finished enough of them. Another tenant's runs that come due
meanwhile have room of their own, are claimed at their tick and wait behind at most `limit`
runs of the burst.

Where the count comes from: a claim reserves its entries when it takes them and settles
with the runs it committed; while what a tenant uses (its last count, the runs claims
committed since, the reservations not settled yet) is at least half the limit, the tenant is
*watched*, and `run` counts its unfinished runs in Postgres every `refresh_s` (one statement
for every watched tenant, one probe of the `job_runs_lease` index per shard). A tenant below
half the limit costs nothing: no statement runs unless some tenant is watched. The bound is
soft by what other scheduler processes claim between two counts (each adds its own claims
only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Iterable

import asyncpg

from tickwheel import db as dbmod
from tickwheel.queries import QUERIES

log = logging.getLogger(__name__)

CLAIM_SHARES = 4  # one claim takes at most a quarter of a tenant's window (`share`)


class DispatchWindow:
    """Per tenant, runs claimed and not finished; `room(tenant)` is what may still be claimed."""

    def __init__(self, limit: int, refresh_s: float, shards: int) -> None:
        self.limit = limit  # 0: no bound
        self.refresh_s = refresh_s
        self._shards = list(range(shards))  # every shard's: the count is cluster-wide
        self._share_cap = max(1, limit // CLAIM_SHARES)
        # Per tenant: its unfinished runs as last counted, plus the runs claims committed since
        # the count began (`_since`); and the entries taken for claims not settled yet. A claim
        # in flight when a count begins may commit after the count's snapshot: it stays in
        # `_reserved` until it settles, so no count can lose it (one that committed before the
        # snapshot is counted twice until the next count: the error leans towards less).
        self._base: dict[str, int] = {}
        self._since: dict[str, int] = {}
        self._reserved: dict[str, int] = {}
        self._watch = asyncio.Event()  # some tenant is watched: counting is needed
        # Leaders holding entries without room, in the order they began to wait.
        self._waiters: dict[asyncio.Event, None] = {}

    def _used(self, tenant: str) -> int:
        return self._base.get(tenant, 0) + self._reserved.get(tenant, 0)

    def room(self, tenant: str) -> int:
        if not self.limit:
            return 1 << 62
        return self.limit - self._used(tenant)

    def share(self, tenant: str) -> int:
        """What one claim may take of a tenant: its room, and at most a quarter of the window.
        A claim holds its shard's leader until it commits, so a burst claimed in claims of a
        whole window would keep another tenant's runs due on that shard waiting that long."""
        return min(self.room(tenant), self._share_cap) if self.limit else self.room(tenant)

    def reserve(self, tenants: Iterable[str]) -> None:
        """Entries just taken for a claim, one tenant name per entry: counted at once, before
        the claim's first await, so leaders claiming together share the room, not each
        take all of it."""
        if not self.limit:
            return
        _bump(self._reserved, Counter(tenants))
        self._check_watch()

    def settle(self, reserved: Iterable[str], claimed: Iterable[str]) -> None:
        """The claim of `reserved` entries is over: it committed the `claimed` runs (pending,
        one tenant name per run; none when it failed). Skipped and stale entries free their
        room; a catch-up of several runs takes more."""
        if not self.limit:
            return
        _bump(self._reserved, Counter(reserved), -1)
        runs = Counter(claimed)
        _bump(self._base, runs)
        _bump(self._since, runs)
        self._check_watch()

    def _check_watch(self) -> None:
        if not self._watch.is_set() and self.watched():
            self._watch.set()

    def wait_for_room(self, wake: asyncio.Event) -> None:
        """A leader holds entries of tenants without room: wake it when a count frees some."""
        self._waiters[wake] = None

    def watched(self) -> list[str]:
        """The tenants at half their window or more: the ones a count is needed for."""
        half = self.limit // 2
        tenants = self._base.keys() | self._reserved.keys()
        return [t for t in tenants if self._used(t) >= half]

    def begin_count(self) -> list[str]:
        """A count of the watched tenants begins: what is claimed from now on is added to it."""
        self._since = {}
        return self.watched()

    def apply(self, counts: dict[str, int], tenants: Iterable[str]) -> None:
        """A count of the watched `tenants` (absent from `counts`: none unfinished) taken when
        `begin_count` was last called."""
        since = self._since
        freed = 0
        for tenant in tenants:
            before = self._base.get(tenant, 0)
            now = counts.get(tenant, 0) + since.get(tenant, 0)
            freed += max(0, before - now)
            if now:
                self._base[tenant] = now
            else:
                self._base.pop(tenant, None)
        # Wake as many waiting leaders, first come first served, as the room freed can feed
        # (each claims at most a share), and one more; the others look again at their tick.
        if not self.watched():
            wakes = len(self._waiters)  # no tenant is near its window any more
        elif freed:
            wakes = -(-freed // self._share_cap) + 1
        else:
            wakes = 0
        for wake in list(self._waiters)[:wakes]:
            del self._waiters[wake]
            wake.set()

    async def run(self, pool: asyncpg.Pool, stop: asyncio.Event) -> None:
        """Count the watched tenants' unfinished runs while any is watched, until `stop`."""
        if not self.limit:
            await stop.wait()
            return
        while not stop.is_set():
            if not self.watched():
                self._watch.clear()
                waiting = asyncio.ensure_future(self._watch.wait())
                stopping = asyncio.ensure_future(stop.wait())
                await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
                stopping.cancel()
                continue
            try:
                await self._count(pool)
            except dbmod.DB_ERRORS:
                log.warning("counting unfinished runs failed; retrying", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.refresh_s)

    async def _count(self, pool: asyncpg.Pool) -> None:
        # The pool's sessions plan index probes only, as the workers' do (db.KEYED_LOOKUPS): a
        # day partition analysed while its runs were in flight would otherwise be read whole.
        async with pool.acquire() as conn:
            # The count begins here, once the connection is ours, just before the statement
            # takes its snapshot: begun before the pool's wait (a second, under load), every
            # claim committed meanwhile was in both the count and `_since`, and the window
            # looked full with 209 runs unstarted.
            tenants = self.begin_count()
            if not tenants:
                return
            rows = await conn.fetch(QUERIES["window_unstarted"], tenants, self._shards)
        self.apply({r["tenant"]: r["unstarted"] for r in rows}, tenants)


def _bump(counts: dict[str, int], delta: Counter[str], sign: int = 1) -> None:
    for tenant, n in delta.items():
        total = counts.get(tenant, 0) + sign * n
        if total > 0:
            counts[tenant] = total
        else:
            counts.pop(tenant, None)
