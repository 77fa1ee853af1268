"""Publishing claimed runs: envelopes to `<prefix>.runs.<priority>`, dead letters to the DLQ.

The `job_runs` row is the outbox (I1): a run is published only after the transaction that
created (or re-leased) its row committed, and a run the broker did not acknowledge stays
`pending` under its publish lease until the sweeper publishes it again. Publishing blocks on the
broker's acks, so it runs on a small thread pool, off the event loop.

Each record is stamped with the leaders' clock (`dbclock.py`: the database's, never ahead of
it), not the producing host's wall clock: a worker's claim records the stamp as the run's
`published_at`, which the ledger compares with the scheduled instant (I8). Stamped by the wall
clock, a scheduler host whose clock was stepped 30 s back wrote `published_at` 30 s before
runs that were not early at all (found by the chaos harness's clock_step fault).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from confluent_kafka import Producer

from tickwheel.domain import PRIORITIES, run_key
from tickwheel.envelopes import DeadLetter
from tickwheel.kafka import Outgoing, PublishError, publish_confirmed, publish_reports, value_room
from tickwheel.shards.store import Dead, Dispatch
from tickwheel.topics import Topics

log = logging.getLogger("tickwheel.scheduler.outbox")

WARM_UP_TIMEOUT_S = 10.0  # seconds to wait for topic metadata at start
PUBLISH_THREADS = 4  # shards publishing at once; acks are waited for on these threads


class Outbox:
    """One idempotent producer per process, shared by its shard leaders."""

    def __init__(
        self, producer: Producer, topics: Topics, clock_ms: Callable[[], int] | None = None
    ) -> None:
        """`clock_ms` stamps the records (unix ms); None: the producer's wall clock."""
        self.producer = producer
        self.topics = topics
        self.clock_ms = clock_ms
        self._threads = ThreadPoolExecutor(PUBLISH_THREADS, thread_name_prefix="publish")

    async def warm_up(self, timeout_s: float = WARM_UP_TIMEOUT_S) -> None:
        """Connect and fetch the run topics' metadata before the first tick needs them (the
        first produce to a topic otherwise waits for its metadata: seconds of dispatch lag)."""
        loop = asyncio.get_running_loop()
        for topic in [*(self.topics.runs(p) for p in PRIORITIES), self.topics.dlq]:
            await loop.run_in_executor(
                self._threads, partial(self.producer.list_topics, topic, timeout=timeout_s)
            )

    async def publish(self, runs: Sequence[Dispatch], epoch: int) -> list[Dispatch]:
        """Publish run envelopes (key = job id, headers run_key and epoch); return the acked."""
        if not runs:
            return []
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self._publish, runs, epoch)

    def _publish(self, runs: Sequence[Dispatch], epoch: int) -> list[Dispatch]:
        messages = []
        stamp = None if self.clock_ms is None else self.clock_ms()
        for run in runs:
            envelope = run.envelope(epoch)
            messages.append(
                Outgoing(
                    self.topics.runs(run.priority),
                    envelope.encode(),
                    key=run.job_id,
                    headers=envelope.headers(),  # type: ignore[arg-type]
                    timestamp_ms=stamp,
                )
            )
        failed = publish_confirmed(self.producer, messages)
        if failed:
            log.warning(
                "%d of %d runs not acknowledged; the sweeper publishes them again",
                len(failed),
                len(runs),
                extra={
                    "sample": list(failed.values())[:3],
                    "run_keys": [
                        run_key(runs[i].tenant, runs[i].job_id, runs[i].scheduled_ms)
                        for i in list(failed)[:3]
                    ],
                },
            )
        return [run for i, run in enumerate(runs) if i not in failed]

    async def publish_dead(self, dead: Sequence[Dead]) -> None:
        """Publish dead letters to the DLQ and wait for every ack, else PublishError."""
        if not dead:
            return
        loop = asyncio.get_running_loop()
        failed = await loop.run_in_executor(
            self._threads, publish_reports, self.producer, dead, self._letter
        )
        if failed:
            raise PublishError(failed)

    def _letter(self, item: Dead, max_bytes: int) -> Outgoing:
        """A dead letter fitted to one message of `max_bytes`."""
        env = item.run.envelope(item.epoch)
        headers = env.headers()
        letter = DeadLetter(
            run=env, error=item.error, attempts=item.run.attempt, dead_at=item.dead_at_ms
        )
        return Outgoing(
            self.topics.dlq,
            letter.fitted(value_room(max_bytes, item.run.job_id, headers)).encode(),
            key=item.run.job_id,
            headers=list(headers),
            timestamp_ms=None if self.clock_ms is None else self.clock_ms(),
        )

    def close(self) -> None:
        self._threads.shutdown(wait=True)
        self.producer.flush(5)
