"""The claims of a process's leaders, combined: one statement for every claim made meanwhile.

Each of a process's 64 leaders claims what has come due on its shard as soon as its loop sees
it, so under steady load every claim is a few runs, and a statement's own cost (its round
trip, the fence, the commit, the event loop's work around it) outweighed its rows'
(D-123). `ClaimCombiner.claim` sends a leader's claim at once when fewer than
`MAX_IN_FLIGHT` statements are under way; otherwise it waits for one to end, and the next
statement carries every claim that waited (up to `max_jobs` due entries), each fenced by its
own shard (`store.claim_many`): a fenced-out leader gets FencedOut, the others' claims stand.

Under a burst on many shards, what the leaders have under way is bounded too (D-271): a leader
asks for its turn (`turn`) before it takes due entries from its queue, and holds it until its
claim is published (`release`). Turns are granted while what they cover stays within
`PIPELINE_STATEMENTS` statements' worth; with many leaders waiting each turn is a share of it.
The leaders waiting keep their entries in their queues, where what comes due joins them, and
the turn goes first to the leader whose lightest tenant was served least lately; the waiting
claims go into a statement in the same order. Without turns every leader claimed its whole
share of a burst at once, and a small tenant's runs due a little later waited until their
leader's batch of the burst was claimed and published (D-271).

A statement that fails fails every claim it carried, and each is sent again alone (as a
worker isolates a batch's bad delivery), so one leader's batch that the database refuses
fails that leader's claim only; a database that is down fails them all, once each.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable

import asyncpg

from tickwheel.shards import store
from tickwheel.shards.plan import ClaimBatch
from tickwheel.shards.store import Claimed, FencedOut, Lease

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 2  # claim statements of one process under way at once (the host's cores)
# The turns granted cover a leader's claim and its publish; at most this many statements' worth
# are granted at once (the statements under way, and publishes of the ones before).
PIPELINE_STATEMENTS = 1
# A turn is granted for at least this many entries (or what the leader has), so a crowd of
# leaders does not shrink every claim to a few entries.
MIN_GRANT = 100
# What a tenant was served is halved every this many seconds: "lately" is the last few.
SERVED_HALF_LIFE_S = 1.0

# A leader's view when its turn may come: the tenants of its due entries, and how many of them
# it would take.
View = Callable[[], tuple[Iterable[str], int]]


class _Turn:
    __slots__ = ("done", "seq", "shard", "view")

    def __init__(self, shard: int, view: View, done: asyncio.Future[int], seq: int) -> None:
        self.shard = shard
        self.view = view
        self.done = done
        self.seq = seq


class _Waiting:
    __slots__ = ("batch", "done", "lease", "rank")

    def __init__(
        self, lease: Lease, batch: ClaimBatch, done: asyncio.Future[Claimed], rank: tuple[int, int]
    ) -> None:
        self.lease = lease
        self.batch = batch
        self.done = done
        self.rank = rank  # (its least-served tenant's service when it came, arrival)


class ClaimCombiner:
    """Sends the leaders' claims, combining those that wait for a statement under way."""

    def __init__(self, pool: asyncpg.Pool, lease_ms: int, max_jobs: int) -> None:
        self.pool = pool
        self.lease_ms = lease_ms
        self.max_jobs = max_jobs  # due entries one combined statement carries at most
        # Entries granted to leaders and not yet published (or given back) at most.
        self.pipeline_max = PIPELINE_STATEMENTS * max_jobs
        self._waiting: list[_Waiting] = []
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._turns: list[_Turn] = []  # leaders waiting for their turn
        self._granted: dict[int, int] = {}  # shard: entries it may claim, not claimed yet
        self._seq = itertools.count()
        self._served: Counter[str] = Counter()  # entries claimed per tenant, decayed
        self._decayed_at = time.monotonic()

    # --- turns ----------------------------------------------------------------------------

    async def turn(self, shard: int, view: View) -> int:
        """Wait for `shard`'s leader's turn to take due entries; how many it may take (0:
        it has none). `view` is asked when the turn may come (the leader moves what came due
        into its queue then). The turn is held until `release` (after the leader published)."""
        self.release(shard)
        if not self._turns:
            _, want = view()
            if not want:
                return 0
            size = self._room(want)
            if size:
                self._granted[shard] = size
                return size
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        turn = _Turn(shard, view, done, next(self._seq))
        self._turns.append(turn)
        try:
            return await done
        except BaseException:
            if turn in self._turns:
                self._turns.remove(turn)
            self.release(shard)
            raise

    def release(self, shard: int) -> None:
        """Give back what `shard`'s turn granted and did not claim (idempotent)."""
        if self._granted.pop(shard, None) is not None:
            self._grant()

    def _room(self, want: int) -> int:
        """How many of `want` entries may be taken now (0: wait)."""
        free = self.pipeline_max - sum(self._granted.values())
        if free < min(want, MIN_GRANT):
            return 0
        return min(want, free)

    def _grant(self) -> None:
        """Grant the waiting turns the room allows, the least-served tenant's first."""
        while self._turns:
            self._decay()
            served = self._served
            best: tuple[int, int] | None = None
            chosen = None
            for turn in self._turns:
                tenants, want = turn.view()
                key = (min((served[t] for t in tenants), default=0) if want else -1, turn.seq)
                if best is None or key < best:
                    best, chosen = key, (turn, want)
            assert chosen is not None
            turn, want = chosen
            if want:
                # Many leaders waiting: each takes its share of the pipeline, so every one's
                # turn comes round soon (what came due on it goes in its next batch).
                size = self._room(min(want, max(MIN_GRANT, self.pipeline_max // len(self._turns))))
                if not size:
                    return
                self._granted[turn.shard] = size
            else:
                size = 0  # nothing due any more: the leader goes back to its loop
            self._turns.remove(turn)
            if not turn.done.done():
                turn.done.set_result(size)
            elif size:
                self._granted.pop(turn.shard, None)

    def _decay(self) -> None:
        now = time.monotonic()
        if now - self._decayed_at < SERVED_HALF_LIFE_S:
            return
        halvings = min(32, int((now - self._decayed_at) / SERVED_HALF_LIFE_S))
        self._decayed_at = now
        served = self._served
        for tenant, n in list(served.items()):
            if n >> halvings:
                served[tenant] = n >> halvings
            else:
                del served[tenant]

    # --- claims ---------------------------------------------------------------------------

    async def claim(self, lease: Lease, batch: ClaimBatch) -> Claimed:
        """`store.claim` for `lease`'s shard, in a statement shared with other leaders'."""
        done: asyncio.Future[Claimed] = asyncio.get_running_loop().create_future()
        served = self._served
        lightest = min((served[t] for t in set(batch.tenants)), default=0)
        self._waiting.append(_Waiting(lease, batch, done, (lightest, next(self._seq))))
        served.update(batch.tenants)
        if lease.shard in self._granted:  # held until the leader published (`release`)
            self._granted[lease.shard] = len(batch.tenants)
        self._send_while_free()
        self._grant()
        return await done

    def _send_while_free(self) -> None:
        while self._waiting and self._in_flight < MAX_IN_FLIGHT:
            self._send()

    def _send(self) -> None:
        """A statement for the waiting claims, the least-served tenant's first, up to
        `max_jobs` entries (at least one; none when every waiting claim's leader stopped
        waiting)."""
        taken: list[_Waiting] = []
        left: list[_Waiting] = []
        entries = 0
        for w in sorted(self._waiting, key=_rank) if len(self._waiting) > 1 else self._waiting:
            if w.done.done():  # its leader stopped waiting (cancelled): nothing to send
                continue
            size = len(w.batch.tenants)
            if taken and entries + size > self.max_jobs:
                left.append(w)
                continue
            taken.append(w)
            entries += size
        self._waiting = left
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
        self._grant()

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


def _rank(w: _Waiting) -> tuple[int, int]:
    return w.rank


def _settle(w: _Waiting, outcome: Claimed | BaseException) -> None:
    if w.done.done():  # the leader was cancelled meanwhile: what committed, the sweeps see
        return
    if isinstance(outcome, asyncio.CancelledError):
        w.done.cancel()
    elif isinstance(outcome, BaseException):
        w.done.set_exception(outcome)
    else:
        w.done.set_result(outcome)
