"""What a worker holds of the messages it received, and which of them get the free slots.

    Delivery     a run envelope received and not yet done: where it came from (partition,
                 offset, the partition's generation), its priority level, the envelope, the
                 record's timestamp, its bytes (for a dead letter should it prove forged),
                 whether its seal opened (its content is then what runs) and whether it is
                 suspect (it may not be the first delivery of a fresh claim: it is claimed
                 before it runs, workers/fetch.py says when)
    Unreadable   a message that is no run envelope, or one the database refused: on its way
                 to the DLQ with its bytes
    Queues       one FIFO per priority level; `pick` fills the free execution slots by smooth
                 weighted round robin over the levels with work (workers/priorities.py),
                 within a per-tenant cap, skipping deliveries of revoked partitions

Pure: no I/O, no clock. Plain classes with slots, not dataclasses: one is made per message.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable

from tickwheel.domain import PRIORITIES, Priority
from tickwheel.envelopes.dead_letters import UnreadableRun
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.workers.priorities import WeightedPicker
from tickwheel.workers.store import RunId

TopicPartition = tuple[str, int]


class Delivery:
    __slots__ = (
        "env",
        "generation",
        "level",
        "offset",
        "published_ms",
        "raw",
        "run",
        "sealed",
        "suspect",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        offset: int,
        generation: int,
        level: str,
        env: RunEnvelope,
        published_ms: int | None,  # the record's timestamp: when the leader produced it
        raw: bytes,
        sealed: bool = False,  # its seal opened: a leader of ours built it (tickwheel/run_seal.py)
        suspect: bool = True,  # perhaps not the first delivery of a fresh claim: claim first (I4)
    ) -> None:
        self.tp = tp
        self.offset = offset
        self.generation = generation
        self.level = level
        self.env = env
        self.published_ms = published_ms
        self.raw = raw
        self.sealed = sealed
        self.suspect = suspect or not sealed
        self.run: RunId = (env.tenant, env.job_id, env.scheduled_at)


class Unreadable:
    __slots__ = ("generation", "offset", "record", "tp")

    def __init__(
        self, tp: TopicPartition, offset: int, generation: int, record: UnreadableRun
    ) -> None:
        self.tp = tp
        self.offset = offset
        self.generation = generation
        self.record = record


class Queues:
    """The local queues per priority, and the picker that shares the slots between them."""

    def __init__(
        self,
        picker: WeightedPicker,
        tenant_cap: int,
        current_generation: Callable[[TopicPartition], int | None],
    ) -> None:
        self.by_level: dict[str, deque[Delivery]] = {p: deque() for p in PRIORITIES}
        self.picker = picker
        self.tenant_cap = tenant_cap  # 0: none
        self.current_generation = current_generation

    def __getitem__(self, level: str) -> deque[Delivery]:
        return self.by_level[level]

    def size(self, level: str) -> int:
        return len(self.by_level[level])

    def clear(self) -> None:
        for queue in self.by_level.values():
            queue.clear()

    def drop_revoked(self) -> None:
        """Forget deliveries of partitions revoked since they came: the next owner has them."""
        generation = self.current_generation
        for queue in self.by_level.values():
            kept = [d for d in queue if generation(d.tp) == d.generation]
            queue.clear()
            queue.extend(kept)

    def put_back(self, picked: list[Delivery]) -> None:
        """Deliveries picked but not claimed (the database was unavailable), in their order."""
        for d in reversed(picked):
            self.by_level[d.level].appendleft(d)

    def pick(self, free: int, tenant_load: Counter[str]) -> list[Delivery]:
        """Deliveries for `free` slots: weighted by priority, within the tenant cap."""
        picked: list[Delivery] = []
        ready = [level for level in PRIORITIES if self._eligible(level, tenant_load) is not None]
        if len(ready) == 1 and self.tenant_cap <= 0:
            # One level has work (the usual hot second): every pick would choose it, so take
            # them at once; the picker's state after k picks of a lone level is what
            # `served_alone` leaves.
            (level,) = ready
            take = free if level == Priority.HIGH else free - self.picker.reserved_high
            queue = self.by_level[level]
            for _ in range(min(take, len(queue))):
                d = queue.popleft()
                if self.current_generation(d.tp) == d.generation:
                    picked.append(d)
            if picked:
                self.picker.served_alone(level)
            return picked
        load = Counter(tenant_load)
        while free > 0:
            choice = {level: self._eligible(level, load) for level in PRIORITIES}
            ready = [level for level, index in choice.items() if index is not None]
            chosen = self.picker.pick(ready, free)
            if chosen is None:
                break
            queue, index = self.by_level[chosen], choice[chosen]
            assert index is not None
            delivery = queue[index]
            del queue[index]
            picked.append(delivery)
            load[delivery.env.tenant] += 1
            free -= 1
        return picked

    def _eligible(self, level: str, load: Counter[str]) -> int | None:
        """The index of the level's first delivery that may take a slot (None: none may)."""
        queue = self.by_level[level]
        while queue and self.current_generation(queue[0].tp) != queue[0].generation:
            queue.popleft()  # its partition was revoked: the next owner has it
        if not queue:
            return None
        cap = self.tenant_cap
        if cap <= 0:
            return 0
        for index, delivery in enumerate(queue):
            if load[delivery.env.tenant] < cap:
                return index
        return None
