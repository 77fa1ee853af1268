"""`ContiguousOffsets`: per partition, the next offset that may be committed when messages
finish out of order (a worker runs many messages of a partition at once); its contract and
its use are in the class's docstring.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterable


class ContiguousOffsets:
    """Per partition, the next offset that may be committed when messages finish out of order.

    A loop that works on many messages of a partition at once (a worker runs them
    concurrently) may finish offset 7 before offset 5. The committed offset must never pass a
    message whose work has not landed (I5), so per partition this keeps the offsets handed out
    and not yet done; the committable position is the lowest of them, or one past the highest
    handed out when none is outstanding.

        gen = offsets.track(tp, offset)      # when the message is received
        offsets.done(tp, offset, gen)        # when its database write (and DLQ publish) landed
        positions = offsets.advanced()       # {tp: next offset} that moved since the last call

    A partition's entry lives from its first tracked message (or `assign`) until `revoke`;
    `track` returns the entry's generation, and a `done` with an older generation (the
    partition was revoked, perhaps assigned back since) is ignored: the offsets it speaks of
    belong to the partition's previous owner period. Thread-safe: a rebalance callback runs on
    the consumer's I/O thread while the loop marks messages done on its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[tuple[str, int], _PartitionOffsets] = {}
        self._generation = 0

    def assign(self, tp: tuple[str, int]) -> int:
        with self._lock:
            return self._entry(tp).generation

    def track(self, tp: tuple[str, int], offset: int) -> int:
        return self.track_many(tp, (offset,))

    def track_many(self, tp: tuple[str, int], offsets: Iterable[int]) -> int:
        """`track` for several offsets of one partition (one lock for a fetched batch)."""
        with self._lock:
            part = self._entry(tp)
            pending, heap = part.pending, part.outstanding
            for offset in offsets:
                if offset not in pending:  # a redelivery of an offset still outstanding
                    pending.add(offset)
                    heapq.heappush(heap, offset)
                if offset >= part.next:
                    part.next = offset + 1
            return part.generation

    def done(self, tp: tuple[str, int], offset: int, generation: int) -> None:
        self.done_many(((tp, offset, generation),))

    def done_many(self, items: Iterable[tuple[tuple[str, int], int, int]]) -> None:
        """`done` for several (tp, offset, generation) at once (one lock for a settled batch)."""
        parts = self._parts
        with self._lock:
            for tp, offset, generation in items:
                part = parts.get(tp)
                if part is not None and part.generation == generation and offset in part.pending:
                    part.finished.add(offset)

    def generation(self, tp: tuple[str, int]) -> int | None:
        """The current generation of `tp`, or None when it is not assigned."""
        with self._lock:
            part = self._parts.get(tp)
            return None if part is None else part.generation

    def position(self, tp: tuple[str, int]) -> int | None:
        """The next offset to commit for `tp` (None: nothing tracked yet)."""
        with self._lock:
            part = self._parts.get(tp)
            return None if part is None else part.position()

    def advanced(self) -> dict[tuple[str, int], int]:
        """{tp: next offset} of the partitions whose position moved since the last call."""
        moved: dict[tuple[str, int], int] = {}
        with self._lock:
            for tp, part in self._parts.items():
                position = part.position()
                if position is not None and position != part.reported:
                    part.reported = position
                    moved[tp] = position
        return moved

    def revoke(self, tp: tuple[str, int]) -> int | None:
        """Forget `tp`; return its final committable position (None: nothing tracked)."""
        with self._lock:
            part = self._parts.pop(tp, None)
            return None if part is None else part.position()

    def outstanding(self) -> int:
        """Messages handed out and not done, over all partitions."""
        with self._lock:
            return sum(len(p.outstanding) - len(p.finished) for p in self._parts.values())

    def _entry(self, tp: tuple[str, int]) -> _PartitionOffsets:
        part = self._parts.get(tp)
        if part is None:
            self._generation += 1
            part = self._parts[tp] = _PartitionOffsets(self._generation)
        return part


class _PartitionOffsets:
    __slots__ = ("finished", "generation", "next", "outstanding", "pending", "reported")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.outstanding: list[int] = []  # min-heap of offsets handed out, done ones included
        self.pending: set[int] = set()  # the same offsets, for membership
        self.finished: set[int] = set()  # done, still in the heap until they reach its top
        self.next = -1  # one past the highest offset handed out; -1: none yet
        self.reported: int | None = None

    def position(self) -> int | None:
        heap = self.outstanding
        while heap and heap[0] in self.finished:
            offset = heapq.heappop(heap)
            self.finished.discard(offset)
            self.pending.discard(offset)
        if heap:
            return heap[0]
        return None if self.next < 0 else self.next
