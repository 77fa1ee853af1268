"""A newly assigned partition's end (workers/fetch.py, D-272), without a broker: it is asked
after the assignment, off the fetch loop; until an answer for that same assignment arrives the
partition's deliveries stay suspect; a failed read is asked again."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from tickwheel.kafka.offsets import ContiguousOffsets
from tickwheel.topics import Topics
from tickwheel.workers.deliveries import Queues
from tickwheel.workers.fetch import Fetcher
from tickwheel.workers.metrics import WorkerMetrics
from tickwheel.workers.priorities import WeightedPicker

pytestmark = pytest.mark.unit

TOPICS = Topics("t")
TP = (TOPICS.runs("normal"), 0)


class Consumer:
    def subscribe(self, topics: list[str], **hooks: Any) -> None:
        pass


class Broker:
    """`read_ends`: answers with `end`, after `gate` opens if one is given; or raises."""

    def __init__(self, end: int, gate: threading.Event | None = None) -> None:
        self.end = end
        self.gate = gate
        self.fail = False
        self.asked: list[list[tuple[str, int]]] = []

    def __call__(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self.asked.append(keys)
        if self.gate is not None:
            self.gate.wait(5)
        if self.fail:
            raise RuntimeError("broker away")
        return {key: self.end for key in keys}


def _fetcher(broker: Broker) -> Fetcher:
    offsets = ContiguousOffsets()
    queues = Queues(WeightedPicker({"high": 6, "normal": 3, "low": 1}), 0, offsets.generation)
    return Fetcher(
        Consumer(),  # type: ignore[arg-type]
        TOPICS,
        batch_size=10,
        queue_cap=10,
        offsets=offsets,
        queues=queues,
        metrics=WorkerMetrics(),
        dead_letter=lambda *args: None,
        read_ends=broker,
    )


def _assign(fetcher: Fetcher) -> None:
    fetcher._on_assign(None, [TopicPartition(*TP)])  # type: ignore[arg-type]


async def _read(fetcher: Fetcher) -> None:
    fetcher._read_ends_soon()
    assert fetcher._ends_task is not None
    await fetcher._ends_task


async def test_the_end_is_asked_after_the_assignment_and_unknown_until_answered() -> None:
    fetcher = _fetcher(Broker(end=120))
    _assign(fetcher)
    assert fetcher.assigned_end[TP] is None  # every delivery suspect meanwhile
    await _read(fetcher)
    assert fetcher.assigned_end[TP] == 120
    assert not fetcher._ends_unknown


async def test_an_answer_for_an_earlier_assignment_of_the_partition_is_not_its_end() -> None:
    """Revoked and assigned again while the read was under way: the answer may predate what
    the owner in between ran, so the partition stays unknown and is asked again."""
    gate = threading.Event()
    broker = Broker(end=50, gate=gate)
    fetcher = _fetcher(broker)
    _assign(fetcher)
    fetcher._read_ends_soon()
    task = fetcher._ends_task
    assert task is not None
    await asyncio.sleep(0.05)
    _assign(fetcher)  # a new assignment of the same partition
    gate.set()
    await task
    assert fetcher.assigned_end[TP] is None
    fetcher._ends_retry_at = 0.0
    broker.end = 80
    await _read(fetcher)
    assert fetcher.assigned_end[TP] == 80


async def _after_a_failed_read() -> tuple[Broker, Fetcher]:
    broker = Broker(end=30)
    broker.fail = True
    fetcher = _fetcher(broker)
    _assign(fetcher)
    await _read(fetcher)
    assert fetcher.assigned_end[TP] is None
    return broker, fetcher


async def test_a_failed_read_leaves_the_partition_suspect_and_is_asked_again() -> None:
    broker, fetcher = await _after_a_failed_read()
    fetcher._read_ends_soon()  # within the retry pause: not asked again yet
    assert len(broker.asked) == 1
    fetcher._ends_retry_at = 0.0
    broker.fail = False
    await _read(fetcher)
    assert fetcher.assigned_end[TP] == 30


async def test_a_partition_revoked_before_its_answer_is_not_asked_for_again() -> None:
    _, fetcher = await _after_a_failed_read()
    fetcher._on_revoke(None, [TopicPartition(*TP)])  # type: ignore[arg-type]
    assert not fetcher._ends_unknown and TP not in fetcher.assigned_end
