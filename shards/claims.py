"""The claims of a process's leaders, combined: one statement for every claim made meanwhile.

Each of a process's 64 leaders claims what has come due on its shard as soon as its loop sees
it, so under steady load every claim is a few runs: at 5,000 runs/s the leaders made ~970
claim statements a second of ~5 runs each, and a statement's own cost (its round trip, the
fence, the commit, the event loop's work around it) outweighed its rows' (docs/BENCHMARKS.md,
session 19). `ClaimCombiner.claim` sends a leader's claim at once when fewer than
`MAX_IN_FLIGHT` statements are under way; otherwise it waits for one to end, and the next
statement carries every claim that waited (up to `max_jobs` due entries), each fenced by its
own shard (`store.claim_many`): a fenced-out leader gets FencedOut, the others' claims stand.

A statement that fails fails every claim it carried, and each is sent again alone (as a
worker isolates a batch's bad delivery), so one leader's batch that the database refuses
fails that leader's claim only; a database that is down fails them all, once each.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

import asyncpg

from tickwheel.shards import store
from tickwheel.shards.plan import ClaimBatch
from tickwheel.shards.store import Claimed, FencedOut, Lease

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 2  # claim statements of one process under way at once (the host's cores)


class _Waiting:
    __slots__ = ("batch", "done", "lease")

    def __init__(self, lease: Lease, batch: ClaimBatch, done: asyncio.Future[Claimed]) -> None:
        self.lease = lease
        self.batch = batch
        self.done = done


class ClaimCombiner:
    """Sends the leaders' claims, combining those that wait for a statement under way."""

    def __init__(self, pool: asyncpg.Pool, lease_ms: int, max_jobs: int) -> None:
        self.pool = pool
        self.lease_ms = lease_ms
        self.max_jobs = max_jobs  # due entries one combined statement carries at most
        self._waiting: deque[_Waiting] = deque()
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def claim(self, lease: Lease, batch: ClaimBatch) -> Claimed:
        """`store.claim` for `lease`'s shard, in a statement shared with other leaders'."""
        done: asyncio.Future[Claimed] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(lease, batch, done))
        self._send_while_free()
        return await done

    def _send_while_free(self) -> None:
        while self._waiting and self._in_flight < MAX_IN_FLIGHT:
            self._send()

    def _send(self) -> None:
        """A statement for the oldest waiting claims, up to `max_jobs` entries (at least one;
        none when every waiting claim's leader stopped waiting)."""
        taken: list[_Waiting] = []
        entries = 0
        while self._waiting:
            w = self._waiting[0]
            if w.done.done():  # its leader stopped waiting (cancelled): nothing to send
                self._waiting.popleft()
                continue
            if taken and entries + len(w.batch.tenants) > self.max_jobs:
                break
            taken.append(self._waiting.popleft())
            entries += len(w.batch.tenants)
        if not taken:
            return
        self._in_flight += 1
        task = asyncio.create_task(self._run(taken), name="claim statement")
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._in_flight -= 1
        self._send_while_free()  # what one statement could not carry goes out too

    async def _run(self, taken: list[_Waiting]) -> None:
        try:
            outcomes = await self._statement(taken)
        except store.DB_ERRORS as exc:
            if len(taken) == 1:
                _settle(taken[0], exc)
                return
            log.warning(
                "a combined claim of %d leaders failed; each is sent alone",
                len(taken),
                exc_info=True,
            )
            for w in taken:
                outcome: Claimed | BaseException
                try:
                    (outcome,) = await self._statement([w])
                except store.DB_ERRORS as one:
                    outcome = one
                _settle(w, outcome)
            return
        except BaseException as exc:  # cancelled, or a bug: no leader waits for ever
            for w in taken:
                _settle(w, exc)  # a bug reaches every leader it concerned, and stops them
            if isinstance(exc, asyncio.CancelledError):
                raise
            log.exception("claim statement of %d leaders failed unexpectedly", len(taken))
            return
        for w, outcome in zip(taken, outcomes, strict=True):
            _settle(w, outcome)

    async def _statement(self, taken: list[_Waiting]) -> list[Claimed | FencedOut]:
        async with self.pool.acquire() as conn:
            return await store.claim_many(conn, self.lease_ms, [(w.lease, w.batch) for w in taken])


def _settle(w: _Waiting, outcome: Claimed | BaseException) -> None:
    if w.done.done():  # the leader was cancelled meanwhile: what committed, the sweeps see
        return
    if isinstance(outcome, asyncio.CancelledError):
        w.done.cancel()
    elif isinstance(outcome, BaseException):
        w.done.set_exception(outcome)
    else:
        w.done.set_result(outcome)
