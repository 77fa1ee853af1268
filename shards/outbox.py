"""Publishing claimed runs: envelopes to `<prefix>.runs.<priority>`, dead letters to the DLQ.

The `job_runs` row is the outbox (I1): a run is published only after the transaction that
created (or re-leased) its row committed, and a run the broker did not acknowledge stays
`pending` under its publish lease until the sweeper publishes it again. Publishing blocks on the
broker's acks, so it runs on a small thread pool, off the event loop, and each thread of the
pool has an idempotent producer of its own: a confirmed publish waits until its producer's queue
has drained (`flush`), so on a producer shared by every thread it also waited for the runs the
other threads produced meanwhile, and under steady load every claim's runs queued for a
thread (D-139).

Each record is stamped with the leaders' clock (`dbclock.py`: the database's, never ahead of
it), not the producing host's wall clock: a worker's claim records the stamp as the run's
`published_at`, which the ledger compares with the scheduled instant (I8). Stamped by the wall
clock, a scheduler host whose clock was stepped 30 s back wrote `published_at` 30 s before
runs that were not early at all (found by the chaos harness's clock_step fault).

A run goes to its shard's partition of the topic (shard mod partitions), not to the one its
key hashes to: a job belongs to one shard, so its runs stay in order on one partition as with
the key, and a claim's runs — one shard's — reach the broker as one produce request, where
hashing their job ids spread them over every partition and librdkafka sends one request per
partition (D-136).

Each run envelope is sealed (header `seal`, tickwheel/run_seal.py): the leader built it from the
job's row its claim read, and a worker that opens the seal runs it without reading the row again.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial

from confluent_kafka import KafkaException, Producer

from tickwheel.domain import PRIORITIES, run_key
from tickwheel.envelopes.dead_letters import DeadLetter
from tickwheel.envelopes.run import AGAIN_HEADER, encode_run, run_headers
from tickwheel.kafka.producing import (
    Outgoing,
    PublishError,
    publish_confirmed,
    publish_reports,
    value_room,
)
from tickwheel.run_seal import SEAL_HEADER, RunSeal
from tickwheel.shards.store import Dead, Dispatch
from tickwheel.topics import Topics

log = logging.getLogger("tickwheel.scheduler.outbox")

WARM_UP_TIMEOUT_S = 10.0  # seconds to wait for topic metadata at start
PUBLISHERS = 4  # shards publishing at once, each with a producer and a thread of its own
# How long a topic's partition count is trusted before the metadata is read again: partitions
# an operator adds receive runs from then on.
PARTITIONS_REFRESH_S = 60.0
METADATA_TIMEOUT_S = 5.0


class Outbox:
    """The publishers of a process's shard leaders: one idempotent producer per thread."""

    def __init__(
        self,
        producers: Sequence[Producer],
        topics: Topics,
        clock_ms: Callable[[], int] | None = None,
        run_seal: RunSeal | None = None,
    ) -> None:
        """One thread per producer of `producers` (at least one); a publish takes an idle
        producer for its whole confirmed publish. `clock_ms` stamps the records (unix ms); None:
        the producer's wall clock. `run_seal` seals every run envelope (tickwheel/run_seal.py);
        None: none is sealed."""
        if not producers:
            raise ValueError("an outbox needs at least one producer")
        self.producers = list(producers)
        self.producer = self.producers[0]  # metadata reads
        self.topics = topics
        self.clock_ms = clock_ms
        self.run_seal = run_seal
        self._threads = ThreadPoolExecutor(len(self.producers), thread_name_prefix="publish")
        # As many producers as threads: a thread always finds one idle here.
        self._idle: queue.SimpleQueue[Producer] = queue.SimpleQueue()
        for p in self.producers:
            self._idle.put(p)
        self._partitions: dict[str, tuple[int, float]] = {}  # topic: (count, read at, monotonic)

    async def warm_up(self, timeout_s: float = WARM_UP_TIMEOUT_S) -> None:
        """Connect and fetch the run topics' metadata before the first tick needs them (the
        first produce to a topic otherwise waits for its metadata: seconds of dispatch lag)."""
        loop = asyncio.get_running_loop()
        for topic in [*(self.topics.runs(p) for p in PRIORITIES), self.topics.dlq]:
            for p in self.producers:  # each producer learns the topic's leaders
                await loop.run_in_executor(
                    self._threads, partial(self._read_partitions, topic, timeout_s, p)
                )

    def _read_partitions(
        self, topic: str, timeout_s: float, producer: Producer | None = None
    ) -> int | None:
        """The topic's partition count from the broker's metadata (None: not known)."""
        source = self.producer if producer is None else producer
        topic_md = source.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if topic_md is None or topic_md.error is not None or not topic_md.partitions:
            return None
        count = len(topic_md.partitions)
        self._partitions[topic] = (count, time.monotonic())
        return count

    def partition_of(self, topic: str, shard: int) -> int | None:
        """The partition of `topic` that `shard`'s runs go to (None: the count is not known,
        so the producer's partitioner picks by key). Blocking when the count is stale."""
        known = self._partitions.get(topic)
        if known is None or time.monotonic() - known[1] > PARTITIONS_REFRESH_S:
            try:
                count = self._read_partitions(topic, METADATA_TIMEOUT_S)
            except KafkaException:
                log.warning("reading the partitions of %s failed", topic, exc_info=True)
                count = None
            if count is None:
                if known is None:
                    return None
                # Keep the last count, and ask again a refresh later, not at every publish
                # (a broker that is away would hold each publish for the metadata timeout).
                count = known[0]
                self._partitions[topic] = (count, time.monotonic())
        else:
            count = known[0]
        return shard % count

    async def publish(
        self, runs: Sequence[Dispatch], epoch: int, shard: int, again: bool = False
    ) -> list[Dispatch]:
        """Publish run envelopes (key = job id, headers run_key and epoch) to `shard`'s
        partition; return the acked. `again`: runs that may have been published before (not
        acknowledged, adopted at a takeover, or their lease lapsed): header `again`, so that a
        worker claims them before it runs them (I4)."""
        if not runs:
            return []
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self._publish, runs, epoch, shard, again)

    def _publish(
        self, runs: Sequence[Dispatch], epoch: int, shard: int, again: bool = False
    ) -> list[Dispatch]:
        messages = []
        stamp = None if self.clock_ms is None else self.clock_ms()
        topics: dict[str, tuple[str, int | None]] = {}  # priority: (topic, partition)
        sealer = self.run_seal
        epoch_digits = str(epoch).encode()
        for run in runs:
            found = topics.get(run.priority)
            if found is None:
                topic = self.topics.runs(run.priority)
                found = topics[run.priority] = (topic, self.partition_of(topic, shard))
            key = run_key(run.tenant, run.job_id, run.scheduled_ms)
            value = encode_run(
                key, run.tenant, run.job_id, run.scheduled_ms, run.attempt, epoch, run.priority,
                run.payload, run.timeout_ms, run.handler, run.target, run.origin, run.due_ms,
            )  # fmt: skip
            headers = run_headers(key, epoch_digits)
            if sealer is not None:
                headers.append((SEAL_HEADER, sealer.seal(value)))
            if again:
                headers.append((AGAIN_HEADER, b"1"))
            messages.append(
                Outgoing(found[0], value, run.job_id, headers, stamp, found[1])  # type: ignore[arg-type]
            )
        # Each envelope names its run: no two values are equal.
        failed = self._confirmed(messages)
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
        failed = await loop.run_in_executor(self._threads, self._reports, dead)
        if failed:
            raise PublishError(failed)

    @contextmanager
    def _borrowed(self) -> Iterator[Producer]:
        """An idle producer for one confirmed publish (on a pool thread: one is always idle)."""
        producer = self._idle.get_nowait()
        try:
            yield producer
        finally:
            self._idle.put(producer)

    def _confirmed(self, messages: Sequence[Outgoing]) -> dict[int, str]:
        with self._borrowed() as producer:
            return publish_confirmed(producer, messages, distinct_values=True)

    def _reports(self, dead: Sequence[Dead]) -> dict[int, str]:
        with self._borrowed() as producer:
            return publish_reports(producer, dead, self._letter)

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
        for p in self.producers:
            p.flush(5)
