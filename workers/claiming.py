"""The claim before a run (I4, D-268): for suspect deliveries — redelivered after a partition
moved, sent again by a leader, late, unsealed — and for every run of a capped tenant.

One UPDATE per batch (`RunStore.claim_isolating`: sealed deliveries take the claim that reads
no job row, the others the one that reads what to run from it; capped tenants' runs the capped
claim, which holds back what the cap has no room for). What was claimed starts; a delivery the
claim did not return is a duplicate or a stale one (done at once, counted by reason), one naming
no run at all goes to the DLQ as unreadable, a held one is done once the hold committed. A claim
that fails for want of the database puts the batch back in its queue and pauses, growing while
it keeps failing.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence

from tickwheel.db import DB_ERRORS
from tickwheel.kafka.consuming import BatchConsumer
from tickwheel.kafka.offsets import ContiguousOffsets
from tickwheel.metrics import observe_many
from tickwheel.stall import Underway
from tickwheel.workers.deliveries import Delivery, Queues
from tickwheel.workers.metrics import WorkerMetrics
from tickwheel.workers.store import Claim, Keys, RunId, RunStore
from tickwheel.workers.tenant_caps import TenantCaps

log = logging.getLogger("tickwheel.worker")

# A claim that fails for want of the database waits this long before the next try (the
# deliveries wait in their queue meanwhile), growing while it keeps failing.
DB_RETRY_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0)

# (partition, offset, generation, the message's bytes, why): a message for the DLQ.
DeadLetterFn = Callable[[tuple[str, int], int, int, bytes, str], None]


class Claiming:
    def __init__(
        self,
        *,
        store: RunStore,
        underway: Underway,
        queues: Queues,
        offsets: ContiguousOffsets,
        source: BatchConsumer,
        metrics: WorkerMetrics,
        caps: TenantCaps,
        leased: dict[RunId, int],
        hold_ms: int,
        start: Callable[[Delivery, Claim], None],
        dead_letter: DeadLetterFn,
    ) -> None:
        """`start`: runs a claimed delivery (step 3); `leased`: the worker's runs in hand, which a
        claimed run joins; `hold_ms`: how long a capped tenant's run is held back."""
        self.store = store
        self.underway = underway
        self.queues = queues
        self.offsets = offsets
        self.source = source
        self.metrics = metrics
        self.caps = caps
        self.leased = leased
        self.hold_ms = hold_ms
        self.start = start
        self.dead_letter = dead_letter
        self._failures = 0  # claims failed in a row (the database unavailable)

    async def claim(self, picked: list[Delivery]) -> None:
        """Claim `picked` (suspect deliveries, runs of capped tenants), start what was claimed,
        settle the rest."""
        capped = self.caps.names
        if capped:  # runs of capped tenants take the capped claim (workers/tenant_caps.py)
            under_cap = [d for d in picked if d.env.tenant in capped]
            if under_cap:
                rest = [d for d in picked if d.env.tenant not in capped]
                if rest:
                    await self._claim_uncapped(rest)
                await self._claim_batch(under_cap, sorted({d.env.tenant for d in under_cap}))
                return
        await self._claim_uncapped(picked)

    async def _claim_uncapped(self, picked: list[Delivery]) -> None:
        """Sealed deliveries take the claim that reads no job row; the others the one that
        reads what to run from it (tickwheel/run_seal.py)."""
        sealed = [d for d in picked if d.sealed]
        if len(sealed) == len(picked):
            await self._claim_batch(picked, None, sealed=True)
            return
        if sealed:
            await self._claim_batch(sealed, None, sealed=True)
            picked = [d for d in picked if not d.sealed]
        await self._claim_batch(picked, None)

    async def _claim_batch(
        self, picked: list[Delivery], capped: list[str] | None, sealed: bool = False
    ) -> None:
        # Two deliveries of one run may carry different attempts (a stale one and its
        # re-dispatch): both are asked for, at most one can match the row.
        keys = Keys()
        asked: set[tuple[RunId, int]] = set()
        for d in picked:
            wanted = (d.run, d.env.attempt)
            if wanted not in asked:
                asked.add(wanted)
                keys.add(d.run, d.env.attempt, d.published_ms)
        try:
            with self.underway.call("claim"):
                claims, refused = await self.store.claim_isolating(
                    keys,
                    None if capped is None else (capped, self.hold_ms),
                    sealed,
                )
        except DB_ERRORS as exc:
            self._failures += 1
            pause_s = DB_RETRY_BACKOFF_S[min(self._failures, len(DB_RETRY_BACKOFF_S)) - 1]
            if self._failures == 1:
                log.exception("claiming %d runs failed; they wait in the queue", len(keys))
            else:  # one traceback per outage, not one per attempt
                log.warning(
                    "claiming %d runs failed again (%d in a row; next try in %.1f s): %s",
                    len(keys),
                    self._failures,
                    pause_s,
                    exc,
                )
            self.queues.put_back(picked)
            await asyncio.sleep(pause_s)
            return
        self._failures = 0
        unclaimed: list[Delivery] = []
        held: list[Delivery] = []
        lateness: list[float] = []
        opened = 0  # claimed deliveries whose seal opened: their envelope's content runs
        for d in picked:
            env = d.env
            if refused:
                reason = refused.get((d.run, env.attempt))
                if reason is not None:
                    log.warning(
                        "delivery of %s refused by the database; dead-lettered", env.run_key
                    )
                    self.dead_letter(d.tp, d.offset, d.generation, d.raw, reason)
                    continue
            claim = claims.get(d.run)
            if claim is None or claim.attempt != env.attempt:
                if claim is None and d.run in claims:
                    del claims[d.run]
                    held.append(d)
                else:
                    unclaimed.append(d)
                continue
            del claims[d.run]  # a second delivery of this attempt in the batch is a duplicate
            due = env.scheduled_at if env.due is None else env.due  # jitter (D-287)
            lateness.append(max(0, claim.started_ms - due) / 1000)
            self.leased[d.run] = claim.attempt
            opened += d.sealed
            self.start(d, claim)
        if lateness:
            observe_many(self.metrics.start_lateness, lateness)
            if opened:
                self.metrics.claimed.labels("sealed").inc(opened)
            if opened < len(lateness):
                self.metrics.claimed.labels("job_row").inc(len(lateness) - opened)
        if held:
            await self._held(held)
        if unclaimed:
            await self._skip(unclaimed)

    async def _held(self, held: Sequence[Delivery]) -> None:
        """Deliveries of runs their tenant's cap held back: the hold is written (the claim's
        transaction committed), so they are done (I5); the leader dispatches the runs again."""
        for tenant, count in Counter(d.env.tenant for d in held).items():
            self.metrics.tenant_held.labels(tenant).inc(count)
        self.offsets.done_many([(d.tp, d.offset, d.generation) for d in held])
        await self.source.store_positions(self.offsets.advanced())

    async def _skip(self, unclaimed: Sequence[Delivery]) -> None:
        """Deliveries that claimed nothing are done at once; say why in the metrics."""
        try:
            with self.underway.call("status read"):
                found = await self.store.statuses([d.run for d in unclaimed])
        except DB_ERRORS:
            found = None  # the reason is only for the metrics; the skip stands
        done = []
        for d in unclaimed:
            reason = "duplicate"
            if found is not None:
                row = found.get(d.run)
                if row is None:
                    reason = "unknown_run"
                elif row[1] != d.env.attempt:
                    reason = "stale"
                elif row[2]:
                    reason = "held"
                    log.warning(
                        "delivery of %s, which overlap buffer_one holds back, skipped",
                        d.env.run_key,
                        extra={"run_key": d.env.run_key},
                    )
            self.metrics.skipped.labels(reason).inc()
            if reason == "unknown_run":  # no scheduler made it: dead-lettered, with its bytes
                log.warning(
                    "delivery of an unknown run %s dead-lettered",
                    d.env.run_key,
                    extra={"run_key": d.env.run_key},
                )
                self.dead_letter(
                    d.tp,
                    d.offset,
                    d.generation,
                    d.raw,
                    "names no run: there is no row for this run key (not produced by a scheduler)",
                )
                continue
            done.append((d.tp, d.offset, d.generation))
        self.offsets.done_many(done)
        await self.source.store_positions(self.offsets.advanced())
