"""Telling a consumer that has stopped consuming from one that has nothing to consume.

A group consumer can stop consuming without any error reaching its loop: librdkafka rejoining a
group after its coordinator moved, or the loop itself waiting on a call that never returns.
Neither ends the process, and /healthz would go on saying ok. The judgement here is pure, fed
samples of the consumer's topics (`Backlog.of` the consumer's own state, `BatchConsumer.holding`,
and the broker's answers, `kafka.admin.topic_offsets`) taken on a timer:

* a partition the consumer holds is **stalled** when its messages wait beyond the consumer's
  position and the position has not moved for `after_s` (librdkafka's position passes
  transaction markers and aborted records, so a topic fed by transactional producers does not
  look stalled at its tail);
* a partition it does not hold is judged only while the consumer holds none at all: the
  group's committed offset then stands for whoever should consume it, stalled the same way.
  (While the consumer holds some, the others are other members' to judge.)

A worker judges only the partitions it holds and fetches (`Backlog.only`): a level it paused
because its queue is full waits legitimately, and a partition it does not hold may belong to a
busy member whose committed offset rightly stands still. What would show a worker out of its
group is asked of the broker instead: a consumer absent from its group's members for `after_s`
is stalled (`Absence`).

`Underway` keeps the calls a loop has under way, for a watch to tell a loop waiting on one
that never returns.

A sample taken while the loop is backing off from a failure it already reports (the database
down) is not judged: `reset` forgets what was seen, and the failure is on /healthz already.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

TopicPartitionKey = tuple[str, int]

STALL_SAMPLES = 4  # samples per stall window
SAMPLE_TIMEOUT_MIN_S = 5.0  # a sample's broker calls may take this long at least


async def samples(stop: asyncio.Event, stall_s: float) -> AsyncIterator[float]:
    """A watch's timer: the monotonic time every `stall_s / STALL_SAMPLES`, until `stop`."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), stall_s / STALL_SAMPLES)
        if stop.is_set():
            return
        yield time.monotonic()


@dataclass(frozen=True)
class Backlog:
    """One sample of a consumer's topics: per partition, the offset consumption has reached
    (the consumer's position where it holds the partition, else the group's committed offset,
    else the partition's start) and the partition's end."""

    held: frozenset[TopicPartitionKey]
    reached: dict[TopicPartitionKey, int]
    ends: dict[TopicPartitionKey, int]

    @classmethod
    def of(
        cls,
        held: frozenset[TopicPartitionKey],
        positions: dict[TopicPartitionKey, int],
        starts: dict[TopicPartitionKey, int],
        ends: dict[TopicPartitionKey, int],
        committed: dict[TopicPartitionKey, int],
    ) -> Backlog:
        """A sample from the consumer's own state (held partitions, its positions) and the
        broker's answers (each partition's start and end, the group's committed offsets)."""
        # A position is known only for a held partition: elsewhere the group's offset stands.
        reached = {tp: positions.get(tp, committed.get(tp, start)) for tp, start in starts.items()}
        return cls(held, reached, ends)

    def only(self, judged: frozenset[TopicPartitionKey]) -> Backlog:
        """This sample cut to the partitions in `judged` (a worker judges only the held
        partitions it fetches: one it paused on purpose waits legitimately)."""
        return Backlog(
            self.held & judged,
            {tp: n for tp, n in self.reached.items() if tp in judged},
            {tp: n for tp, n in self.ends.items() if tp in judged},
        )

    def waiting(self) -> dict[TopicPartitionKey, int]:
        """Messages waiting per partition that has any."""
        return {
            tp: end - self.reached.get(tp, 0)
            for tp, end in self.ends.items()
            if end > self.reached.get(tp, 0)
        }


@dataclass(frozen=True)
class Stall:
    """A partition whose messages have waited, unread, since `since` (monotonic seconds)."""

    topic: str
    partition: int
    held: bool
    reached: int
    waiting: int
    since: float

    def describe(self, now: float) -> str:
        whose = "held by this consumer" if self.held else "held by no one this consumer sees"
        return (
            f"{self.topic}[{self.partition}] ({whose}): {self.waiting} message(s) waiting "
            f"after offset {self.reached}, unread for {now - self.since:.0f} s"
        )


@dataclass
class StallWatch:
    """Judges successive samples; `after_s`: how long waiting messages may stay unread."""

    after_s: float
    _seen: dict[TopicPartitionKey, tuple[int, float]] = field(default_factory=dict)

    def reset(self) -> None:
        self._seen.clear()

    def judge(self, backlog: Backlog, now: float) -> list[Stall]:
        """The partitions stalled as of this sample (taken at `now`, monotonic seconds)."""
        judged = set(backlog.held) if backlog.held else set(backlog.ends)
        waiting = {tp: n for tp, n in backlog.waiting().items() if tp in judged}
        seen: dict[TopicPartitionKey, tuple[int, float]] = {}
        stalls = []
        for tp, count in waiting.items():
            reached = backlog.reached.get(tp, 0)
            before = self._seen.get(tp)
            since = before[1] if before is not None and before[0] == reached else now
            seen[tp] = (reached, since)
            if now - since >= self.after_s:
                stalls.append(Stall(tp[0], tp[1], tp in backlog.held, reached, count, since))
        self._seen = seen
        return stalls


@dataclass
class Absence:
    """Judges successive answers to "is this consumer a member of its group?": absent from
    every answer for `after_s` is a stall (a consumer stuck rejoining its group holds nothing,
    and no other sample of its own state says so)."""

    after_s: float
    _since: float | None = None

    def reset(self) -> None:
        self._since = None

    def judge(self, present: bool, now: float) -> float | None:
        """When the absence began, once it has lasted `after_s`; else None."""
        if present:
            self._since = None
            return None
        if self._since is None:
            self._since = now
        return self._since if now - self._since >= self.after_s else None


class Underway:
    """The calls a loop has under way (a claim, a result write) and when each began, so that a
    watch can tell a loop waiting on a call that never returns: its queues fill and pause
    their levels, and no sample of the topics would say so."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._began: dict[int, tuple[str, float]] = {}
        self._tokens = itertools.count()

    @contextlib.contextmanager
    def call(self, what: str) -> Iterator[None]:
        token = next(self._tokens)
        self._began[token] = (what, self._clock())
        try:
            yield
        finally:
            del self._began[token]

    def oldest(self) -> tuple[str, float] | None:
        """The call under way longest, and when it began; None while none is."""
        return min(self._began.values(), key=lambda call: call[1], default=None)
