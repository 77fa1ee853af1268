"""The worker's `record` part: steps 5 to 7 of `workers/service.py` for batches of attempts.

The dispatch hands over finished attempts and unreadable deliveries (`finished`,
`unreadable`); `run` takes them in batches — the first one wakes it, it lingers a few
milliseconds for others, then takes up to `worker_batch` — and for each batch:

    5. publishes the dead letters of dead runs and unreadable deliveries, and waits for their
       acknowledgement (each fitted to one message), BEFORE anything else;
    6. writes the results in one UPDATE fenced by attempt (`RunStore.write_results`): a run
       missing from the answer was fenced out (its lease lapsed and the sweeper moved it on);
    7. marks the batch's deliveries done and stores each partition's highest contiguous done
       offset (committed by librdkafka in the background).

A batch that fails (the database, or the broker refusing a letter) is retried whole with a
growing pause; still failing after the last pause, `run` raises and the process stops (I9). The
crash argument for each step is the module docstring of `workers/service.py`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import NamedTuple

from confluent_kafka import Producer

from tickwheel.clock import now_ms
from tickwheel.crash_points import crash_point
from tickwheel.db import DB_ERRORS
from tickwheel.domain import RunStatus
from tickwheel.envelopes.dead_letters import DeadLetter
from tickwheel.kafka.consuming import BatchConsumer
from tickwheel.kafka.offsets import ContiguousOffsets
from tickwheel.kafka.producing import Outgoing, PublishError, publish_reports, value_room
from tickwheel.metrics import observe_many
from tickwheel.stall import Underway
from tickwheel.topics import Topics
from tickwheel.workers.deliveries import Delivery, Unreadable
from tickwheel.workers.metrics import WorkerMetrics
from tickwheel.workers.retry import decide
from tickwheel.workers.store import Claim, Results, RunId, RunStore

log = logging.getLogger("tickwheel.worker")

IDLE_WAIT_S = 0.5  # seconds `run` waits for work before it looks whether to stop
LINGER_S = 0.005  # after a first result, gather others finishing this long
# What a failed result write raises: the database, or the broker refusing a dead letter.
RECORD_ERRORS: tuple[type[BaseException], ...] = (*DB_ERRORS, PublishError)
RETRY_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0)  # then the process dies (I9)

# A finished attempt on its way to the result write: the delivery, the claim, the status,
# the retry delay (retrying) and the error.
Finished = tuple[Delivery, Claim, str, "int | None", "str | None"]


class Failed(NamedTuple):
    """A failed attempt whose claim read no backoff (a sealed claim): decided in the batch's
    step 6, once the backoffs of the batch's failed jobs are read (one statement)."""

    delivery: Delivery
    claim: Claim
    error: str
    permanent: bool


def decided(
    d: Delivery, claim: Claim, error: str, permanent: bool, base_ms: int, cap_ms: int
) -> Finished:
    """What a failed attempt becomes (workers/retry.py), as the result write takes it."""
    assert claim.max_attempts is not None, "a run started without a claim reads its budget first"
    decision = decide(
        error=error,
        permanent=permanent,
        attempt=claim.attempt,
        max_attempts=claim.max_attempts,
        base_ms=base_ms,
        cap_ms=cap_ms,
    )
    return (d, claim, decision.status.value, decision.retry_in_ms, decision.error)


class Recorder:
    def __init__(
        self,
        *,
        store: RunStore,
        producer: Producer,
        source: BatchConsumer,
        offsets: ContiguousOffsets,
        topics: Topics,
        metrics: WorkerMetrics,
        leased: dict[RunId, int],
        unmarked: dict[RunId, tuple[Delivery, int]],
        finished_unmarked: set[RunId],
        worker_id: str,
        batch_size: int,
        underway: Underway,
    ) -> None:
        self.store = store
        self.underway = underway  # the watch sees a batch's settling under way
        self.producer = producer
        self.source = source
        self.offsets = offsets
        self.topics = topics
        self.metrics = metrics
        self.leased = leased  # the worker's runs held; a recorded attempt leaves it
        self.unmarked = unmarked  # those of them started without a claim and not marked
        self.finished_unmarked = finished_unmarked  # those of them that finished
        self.worker_id = worker_id
        self.batch_size = batch_size
        self.finished: list[Finished | Failed] = []
        self.unreadable: list[Unreadable] = []
        self.durations: list[float] = []  # handler seconds of the finished attempts
        self.pending = asyncio.Event()  # something waits to be recorded
        self.done = asyncio.Event()  # `run` ended: everything handed over is recorded

    def add_finished(self, item: Finished, seconds: float) -> None:
        self.finished.append(item)
        self.durations.append(seconds)
        self.pending.set()

    def add_failed(self, item: Failed, seconds: float) -> None:
        self.finished.append(item)
        self.durations.append(seconds)
        self.pending.set()

    def add_unreadable(self, item: Unreadable) -> None:
        self.unreadable.append(item)
        self.pending.set()

    async def run(self, executions_done: asyncio.Event) -> None:
        """Record until the dispatch has ended (`executions_done`) and nothing is left."""
        failures = 0
        finished: list[Finished | Failed] = []
        unreadable: list[Unreadable] = []
        while True:
            if not finished and not unreadable:
                if not self.finished and not self.unreadable:
                    if executions_done.is_set():
                        break
                    self.pending.clear()
                    try:
                        await asyncio.wait_for(self.pending.wait(), IDLE_WAIT_S)
                    except TimeoutError:
                        continue
                    await asyncio.sleep(LINGER_S)
                finished, unreadable = self._take_batch()
            try:
                with self.underway.call("result write"):
                    await self._settle(finished, unreadable)
            except RECORD_ERRORS:
                if failures >= len(RETRY_BACKOFF_S):
                    raise
                log.exception(
                    "recording %d results failed; retrying", len(finished) + len(unreadable)
                )
                await asyncio.sleep(RETRY_BACKOFF_S[failures])
                failures += 1
                continue
            failures = 0
            finished, unreadable = [], []
        self.done.set()

    def _take_batch(self) -> tuple[list[Finished | Failed], list[Unreadable]]:
        """Up to a batch of what waits, oldest first; the waiting durations go to the metrics."""
        size = self.batch_size
        finished, self.finished = self.finished[:size], self.finished[size:]
        unreadable, self.unreadable = self.unreadable[:size], self.unreadable[size:]
        durations, self.durations = self.durations, []
        if durations:
            observe_many(self.metrics.handler_seconds, durations)
        return finished, unreadable

    async def _settle(self, batch: list[Finished | Failed], unreadable: list[Unreadable]) -> None:
        """Steps 5 to 7, for a batch (its failed attempts decided first, in place: a retried
        batch does not decide them again)."""
        if any(type(f) is Failed for f in batch):
            await self._decide(batch)
        finished: list[Finished] = batch  # type: ignore[assignment]  # all decided now
        dead = [f for f in finished if f[2] == RunStatus.DEAD]
        letters: list[Finished | Unreadable] = [*dead, *unreadable]
        if letters:
            loop = asyncio.get_running_loop()
            failed = await loop.run_in_executor(
                None, publish_reports, self.producer, letters, self._letter
            )
            if failed:
                raise PublishError(failed)
            self.metrics.dlq.labels("dead").inc(len(dead))
            self.metrics.dlq.labels("unreadable").inc(len(unreadable))
        crash_point("worker_after_dlq")
        results = Results()
        now = now_ms()
        for d, claim, status, retry_in_ms, error in finished:
            # A claimed run keeps the start its claim recorded; for the others the write
            # records one from how long ago the run started.
            results.add(
                d.run, claim.attempt, status, retry_in_ms, error,
                max(0, now - claim.started_ms), d.published_ms,
            )  # fmt: skip
        written = await self.store.write_results(results)
        crash_point("worker_after_results")
        outcomes: Counter[str] = Counter()
        done = []
        leased = self.leased
        for d, claim, status, _, error in finished:
            run = d.run
            if run in written:
                outcomes[status] += 1
                if status == RunStatus.DEAD:  # rare, and on the DLQ: one line per dead run
                    log.warning(
                        "run dead after %d attempts",
                        claim.attempt,
                        extra={"run_key": d.env.run_key, "error": error},
                    )
            else:
                outcomes["fenced"] += 1
                log.warning(
                    "result of %s fenced out (lease lost)",
                    d.env.run_key,
                    extra={"run_key": d.env.run_key},
                )
            if leased.get(run) == claim.attempt:
                del leased[run]
                if self.unmarked.pop(run, None) is not None:
                    self.finished_unmarked.discard(run)
            done.append((d.tp, d.offset, d.generation))
        for outcome, count in outcomes.items():
            self.metrics.executions.labels(outcome).inc(count)
        done.extend((u.tp, u.offset, u.generation) for u in unreadable)
        self.offsets.done_many(done)
        await self.source.store_positions(self.offsets.advanced())

    async def _decide(self, batch: list[Finished | Failed]) -> None:
        """Decide the batch's failed attempts with their jobs' backoff, read in one statement
        (and, for runs started without a claim, which read nothing, their attempt budget)."""
        failed = [f for f in batch if type(f) is Failed]
        unclaimed = [f.claim.run for f in failed if f.claim.max_attempts is None]
        policies = await self.store.retry_policies(unclaimed)
        jobs = list(
            {(f.claim.tenant, f.claim.job_id) for f in failed if f.claim.max_attempts is not None}
        )
        backoffs = await self.store.backoffs(jobs)
        for i, f in enumerate(batch):
            if type(f) is Failed:
                c = f.claim
                if c.max_attempts is None:
                    policy = policies[c.run]
                    c = c._replace(max_attempts=policy.max_attempts)
                    backoff = policy.backoff
                else:
                    backoff = backoffs[(c.tenant, c.job_id)]
                batch[i] = decided(
                    f.delivery, c, f.error, f.permanent, backoff.base_ms, backoff.cap_ms
                )

    def _letter(self, item: Finished | Unreadable, max_bytes: int) -> Outgoing:
        """The DLQ message of a dead run or an unreadable delivery, fitted to `max_bytes`."""
        if isinstance(item, Unreadable):
            return Outgoing(
                self.topics.dlq, value=item.record.fitted(value_room(max_bytes, None)).encode()
            )
        d, claim, _, _, error = item
        env = d.env
        headers = env.headers()
        letter = DeadLetter(
            run=env,
            error=error or "",
            attempts=claim.attempt,
            dead_at=now_ms(),
            worker=self.worker_id,
        )
        return Outgoing(
            self.topics.dlq,
            key=env.job_id,
            value=letter.fitted(value_room(max_bytes, env.job_id, headers)).encode(),
            headers=list(headers),
        )
