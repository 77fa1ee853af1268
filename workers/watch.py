"""The worker's `watch` part: a worker that has stopped consuming ends instead of lingering.

librdkafka can stop consuming without any error reaching the fetch loop: after a broker
restart the registry's consumer never sent its JoinGroup again (docs/RELIABILITY.md), and a
worker's consumer is the same client. Such a worker fetches nothing, executes nothing, and its
process looks alive; with one worker every run waits. Every `stall_s / STALL_SAMPLES` the
watch samples (tickwheel/stall.py):

* the consumer itself (`BatchConsumer.holding`): its I/O thread silent for `stall_s` is a
  stall;
* the run topics' ends, asked of the broker through a probe of the group that never
  subscribes: messages waiting past the position of a partition it holds and fetches, the
  position still for `stall_s`, is a stall. A level the fetcher paused (its queue full: the
  handlers are slow, or claims fail while the database is down) waits legitimately and is not
  judged; nor are partitions it does not hold (another member's, or none: a member busy with
  long runs keeps its committed offset still, rightly);
* the group's members, asked of its coordinator: this worker's client absent for `stall_s` is
  a stall (a consumer stuck rejoining holds nothing, and nothing else here would say so);
* the database calls under way (`Underway`: a claim, a status read, a heartbeat, a batch's
  result write with its dead letters): one under way for `stall_s` is a stall (its loop waits
  on a call that never returns; its queues fill and pause their levels, which the samples
  above rightly do not judge). A call that fails is the loop's to retry, not a stall.

A sample the broker does not answer judges nothing (a Kafka outage is no stall of ours).
A stall raises `WorkerStalled`: the part dies, the process exits 1 for its supervisor to
restart it, and what this worker had fetched and not finished is redelivered to the group.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from tickwheel.kafka.admin import group_members, topic_offsets
from tickwheel.kafka.consuming import BatchConsumer
from tickwheel.stall import (
    SAMPLE_TIMEOUT_MIN_S,
    STALL_SAMPLES,
    Absence,
    Backlog,
    StallWatch,
    Underway,
    samples,
)

log = logging.getLogger("tickwheel.worker")


class WorkerStalled(RuntimeError):
    """The worker's consumer stopped consuming while it looked alive."""


class ConsumerWatch:
    """`paused_topics`: the run topics the fetcher has paused on purpose, as of now."""

    def __init__(
        self,
        source: BatchConsumer,
        paused_topics: Callable[[], set[str]],
        topics: list[str],
        probe: Consumer,
        admin: AdminClient,
        group: str,
        client_id: str,
        underway: Underway,
        stall_s: float,
    ) -> None:
        self.source = source
        self.paused_topics = paused_topics
        self.topics = topics
        self.probe = probe
        self.admin = admin
        self.group = group
        self.client_id = client_id
        self.underway = underway
        self.stall_s = stall_s
        self.stalled: str | None = None  # what ended the part, once it did
        # The broker's answers never wait in the consumer's I/O thread (nor hold the loop).
        self._probing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="worker-probe")

    async def run(self, stop: asyncio.Event) -> None:
        backlog_watch = StallWatch(self.stall_s)
        absence = Absence(self.stall_s)
        timeout_s = max(self.stall_s / STALL_SAMPLES, SAMPLE_TIMEOUT_MIN_S)
        answered = time.monotonic()
        async for now in samples(stop, self.stall_s):
            oldest = self.underway.oldest()
            if oldest is not None and now - oldest[1] >= self.stall_s:
                what, began = oldest
                self._stall(f"a {what} begun {now - began:.0f} s ago has not returned")
            try:
                held, positions = await asyncio.wait_for(self.source.holding(), timeout_s)
            except TimeoutError:
                if now - answered >= self.stall_s:
                    silent = f"{now - answered:.0f} s"
                    self._stall(f"the consumer's I/O thread has not answered for {silent}")
                continue
            answered = time.monotonic()
            paused = self.paused_topics()
            try:
                loop = asyncio.get_running_loop()
                asked = loop.run_in_executor(self._probing, self._ask_broker, timeout_s)
                (starts, ends, committed), members = await asked
            except (KafkaException, TimeoutError) as exc:
                log.warning("could not sample the run topics and the workers' group: %s", exc)
                backlog_watch.reset()
                absence.reset()
                continue
            now = time.monotonic()
            since = absence.judge(self.client_id in members, now)
            if since is not None:
                self._stall(
                    f"this worker ({self.client_id}) has not been a member of its group "
                    f"{self.group} for {now - since:.0f} s ({len(members)} member(s) are)"
                )
            fetched = frozenset(tp for tp in held if tp[0] not in paused)
            sample = Backlog.of(held, positions, starts, ends, committed).only(fetched)
            stalls = backlog_watch.judge(sample, now)
            if stalls:
                self._stall("; ".join(stall.describe(now) for stall in stalls))

    async def close(self) -> None:
        """Close the probe once a sample under way has ended (never under a call)."""
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        self._probing.shutdown(wait=True, cancel_futures=True)
        self.probe.close()

    def _ask_broker(
        self, timeout_s: float
    ) -> tuple[tuple[dict[tuple[str, int], int], ...], frozenset[str]]:
        offsets = topic_offsets(self.probe, self.topics, timeout_s)
        return offsets, group_members(self.admin, self.group, timeout_s)

    def _stall(self, what: str) -> None:
        self.stalled = what
        log.error("worker stalled: %s", what)
        raise WorkerStalled(f"worker stalled: {what}; exiting for the supervisor to restart it")
