"""What a worker holds: the runs in hand, marked `running` or not, and their leases (I4, D-268).

A run enters when the dispatch starts it — claimed (a suspect delivery, a capped tenant: it is
`running` under this worker already) or not (the first delivery of a fresh claim: `unmarked`,
with its delivery and start) — and leaves when its result is written (workers/record.py). In
between:

    heartbeat  every lease/3: the leases of the marked runs are extended; the unmarked ones
               executing `MARK_AFTER_MS` or longer are marked `running` under this worker with
               a lease (`worker_mark_running`), so long runs stay visible and a lapse of the
               leader's lease cannot re-dispatch them; shorter runs, and runs that finished
               and wait for their result's write (unless that takes `FINISHED_MARK_AFTER_MS`),
               are never written before their result
    release    while a rebalance takes partitions away, on the consumer's thread: their
               offsets are revoked (the dispatch starts nothing of them from then on), and the
               unmarked runs in hand of those partitions are marked before the partitions go,
               so the next owner's claim of a redelivery finds them taken; this worker
               finishes them and writes their results
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from tickwheel import broken
from tickwheel.clock import now_ms
from tickwheel.db import DB_ERRORS
from tickwheel.kafka.offsets import ContiguousOffsets
from tickwheel.stall import Underway
from tickwheel.workers.deliveries import Delivery, Queues
from tickwheel.workers.metrics import WorkerMetrics
from tickwheel.workers.store import Keys, RunId, RunStore

log = logging.getLogger("tickwheel.worker")

# A run started without a claim and still in hand at a heartbeat this long after its start is
# marked `running` (a short run is never written before its result).
MARK_AFTER_MS = 1000
# A run whose attempt finished and whose result waits for the recorder's next batch is marked
# only this long after its start: its result is on its way, and marking it meanwhile was a
# write per run for nothing (a hot second's recorder ran ~3 s behind the starts, and the
# heartbeat marked 17,795 of 100,000 runs on the way to their result, measured).
FINISHED_MARK_AFTER_MS = 30_000
# How long a revocation waits for the runs in hand of its partitions to be marked.
RELEASE_TIMEOUT_S = 10.0

Partition = tuple[str, int]  # topic, partition


class Holdings:
    def __init__(
        self,
        store: RunStore,
        offsets: ContiguousOffsets,
        queues: Queues,
        metrics: WorkerMetrics,
        underway: Underway,
        lease_s: float,
    ) -> None:
        self.store = store
        self.offsets = offsets
        self.queues = queues
        self.metrics = metrics
        self.underway = underway
        self.lease_s = lease_s
        self.leased: dict[RunId, int] = {}  # runs held (executing or awaiting their write)
        # Those of them started without a claim and not marked `running` yet: the delivery and
        # when it started (unix ms, this host's clock).
        self.unmarked: dict[RunId, tuple[Delivery, int]] = {}
        # Those unmarked runs whose attempt finished: their result is on its way.
        self.finished: set[RunId] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The event loop the worker runs on (a revocation's marking runs there)."""
        self._loop = loop

    # --- heartbeat ----------------------------------------------------------------------------

    async def heartbeat(self, recorded: asyncio.Event) -> None:
        """Beat every lease/3 until `recorded` (everything handed over is recorded)."""
        interval_s = self.lease_s / 3
        while not recorded.is_set():
            try:
                await asyncio.wait_for(recorded.wait(), interval_s)
                break
            except TimeoutError:
                pass
            held = Keys()
            unmarked, finished = self.unmarked, self.finished
            due: list[RunId] = []
            now = now_ms()
            for run, attempt in list(self.leased.items()):
                started = unmarked.get(run)
                if started is None:
                    held.add(run, attempt)
                elif now - started[1] >= (
                    FINISHED_MARK_AFTER_MS if run in finished else MARK_AFTER_MS
                ):
                    due.append(run)
            try:
                with self.underway.call("heartbeat"):
                    await self.store.heartbeat(held)
                    if due:
                        await self.mark(due)
            except DB_ERRORS:
                # The next beat tries again; a lease that lapses meanwhile fences our write.
                log.warning("heartbeat of %d runs failed", len(held) + len(due), exc_info=True)

    async def mark(self, runs: Sequence[RunId]) -> None:
        """Mark runs started without a claim `running` under this worker (`worker_mark_running`):
        those the answer leaves out moved on meanwhile and their result will be fenced out."""
        keys = Keys()
        ran: list[int] = []
        now = now_ms()
        chosen = []
        for run in runs:
            held = self.unmarked.get(run)
            if held is None:  # recorded meanwhile
                continue
            d, started = held
            keys.add(run, d.env.attempt, d.published_ms)
            ran.append(max(0, now - started))
            chosen.append(run)
        if not keys:
            return
        marked = await self.store.mark_running(keys, ran)
        for run in chosen:
            self.unmarked.pop(run, None)
            self.finished.discard(run)
        self.metrics.marked.labels("marked").inc(len(marked))
        if len(marked) < len(chosen):
            self.metrics.marked.labels("moved_on").inc(len(chosen) - len(marked))

    # --- partitions taken away ----------------------------------------------------------------

    def release_from_consumer(self, partitions: list[Partition]) -> dict[Partition, int | None]:
        """On the consumer's thread, while partitions are taken away (I4): the runs of those
        partitions this worker started without a claim are marked `running` under it before
        the partitions go, so their next owner's claim of a redelivery finds them taken and a
        rebalance runs nothing twice; this worker finishes them and writes their results.
        Returns each partition's done position, to commit."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return {tp: self.offsets.revoke(tp) for tp in partitions}
        future = asyncio.run_coroutine_threadsafe(self._release(partitions), loop)
        try:
            return future.result(RELEASE_TIMEOUT_S)
        except Exception:  # the database away, or the loop busy past the bound
            log.warning(
                "marking the runs of %d revoked partitions failed; their next owner may run "
                "them again",
                len(partitions),
                exc_info=True,
            )
            future.cancel()
            return {tp: self.offsets.revoke(tp) for tp in partitions}

    async def _release(self, partitions: list[Partition]) -> dict[Partition, int | None]:
        # No await before the offsets are revoked: from here on the dispatch starts nothing
        # of these partitions (their queued deliveries are stale).
        gone = set(partitions)
        positions = {tp: self.offsets.revoke(tp) for tp in partitions}
        self.queues.drop_revoked()
        held = [run for run, (d, _) in self.unmarked.items() if d.tp in gone]
        if held and not broken.on(broken.RELEASE_UNMARKED):
            with self.underway.call("release"):
                await self.mark(held)
            log.info("partitions revoked: %d runs in hand marked running", len(held))
        return positions
