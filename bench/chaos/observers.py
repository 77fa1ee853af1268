"""What the harness watches while the rounds run, beside the ledger it reads afterwards:

    LeaderWatch     every epoch of every shard, as `shard_leaders` shows it (for the stale
                    claims verdict); polled, so an epoch that lasts less than a poll may be
                    missed, which can only hide a stale claim, never invent one
    OffsetWatch     the workers' group's committed offsets, read without joining the group
                    (for the offsets-ahead verdict, I5)
    ProduceProbe    a producer of numbered messages on a topic of its own, as replicated as the
                    run topics: how long a produce waited for its acknowledgement, and whether
                    every acknowledged message can be read back (a broker's death must neither
                    lose one nor stop producing for long)

Each runs until `close`; a failed read is retried at its next turn (the services are the
thing being broken).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from tickwheel.bench.chaos.checker import OffsetAudit, Takeover
from tickwheel.clock import now_ms
from tickwheel.db import DB_ERRORS
from tickwheel.kafka.clients import consumer, producer
from tickwheel.queries import QUERIES

LEADER_POLL_S = 0.1
AUDIT_EVERY_S = 0.25
PROBE_EVERY_S = 0.1
PROBE_PARTITIONS = 3  # one led by each broker of the replicated stack, as a rule
READ_BOUND_S = 20.0


class LeaderWatch:
    """Every (shard, epoch) seen in `shard_leaders`, with its takeover instant."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.seen: dict[tuple[int, int], int] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="leader-watch")

    async def _run(self) -> None:
        conn: asyncpg.Connection | None = None
        try:
            while True:
                try:
                    if conn is None or conn.is_closed():
                        conn = await asyncpg.connect(self.dsn, timeout=5)
                    for row in await conn.fetch(QUERIES["chaos_shard_epochs"], timeout=5):
                        self.seen.setdefault((row["shard_id"], row["epoch"]), row["since_ms"])
                except DB_ERRORS:
                    if conn is not None:
                        conn.terminate()
                    conn = None
                await asyncio.sleep(LEADER_POLL_S)
        finally:
            if conn is not None:
                conn.terminate()

    def takeovers(self) -> list[Takeover]:
        return [Takeover(s, e, since) for (s, e), since in sorted(self.seen.items())]

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class OffsetWatch:
    """The committed offsets of a consumer group over time, read by a thread of its own."""

    def __init__(self, kafka: str, group: str, topics: Sequence[str], partitions: int) -> None:
        # A consumer of the group that never subscribes reads the group's offsets without
        # joining it (no rebalance) and commits nothing.
        self.consumer = consumer(kafka, group, **{"enable.auto.commit": False})
        self.parts = [TopicPartition(t, p) for t in topics for p in range(partitions)]
        self.audits: list[OffsetAudit] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offset-audit", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(AUDIT_EVERY_S):
            try:
                found = self.consumer.committed(self.parts, timeout=2)
            except KafkaException:
                continue
            committed = {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}
            self.audits.append(OffsetAudit(now_ms(), committed))

    def between(self, start_ms: int, end_ms: int) -> list[OffsetAudit]:
        return [a for a in self.audits if start_ms <= a.at_ms <= end_ms]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.consumer.close()


@dataclass
class ProbeRound:
    """The probe's figures over one window: acknowledged messages, those not read back, and
    the longest wait for an acknowledgement (seconds)."""

    acked: int = 0
    lost: int = 0
    lost_sample: list[int] = field(default_factory=list)
    longest_ack_s: float = 0.0
    refused: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "acked": self.acked,
            "lost": self.lost,
            "lost_sample": self.lost_sample[:10],
            "longest_ack_s": round(self.longest_ack_s, 3),
            "refused": self.refused,
        }


class ProduceProbe:
    """Numbered messages to `topic` every PROBE_EVERY_S, each to partition seq % 3; acks and
    their waits are recorded, and `window` reads the topic back."""

    def __init__(self, kafka: str, topic: str) -> None:
        self.topic = topic
        self.producer = producer(kafka, **{"linger.ms": 0, "message.timeout.ms": 120_000})
        self.reader: Consumer = consumer(kafka, f"chaos-probe-{uuid.uuid4().hex}")
        self.reader.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PROBE_PARTITIONS)]
        )
        self.sent: dict[int, int] = {}  # seq → produced at (unix ms)
        self.acked: dict[int, int] = {}  # seq → acked at
        self.refused: set[int] = set()
        self.read: set[int] = set()
        self.positions: dict[int, int] = {}  # partition → next offset to read
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="produce-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _on_delivery(self, seq: int) -> Callable[[Any, Any], None]:
        def done(err: Any, _msg: Any) -> None:
            with self._lock:
                if err is None:
                    self.acked[seq] = now_ms()
                else:
                    self.refused.add(seq)

        return done

    def _run(self) -> None:
        seq = 0
        while not self._stop.wait(PROBE_EVERY_S):
            with self._lock:
                self.sent[seq] = now_ms()
            try:
                self.producer.produce(
                    self.topic,
                    value=str(seq).encode(),
                    partition=seq % PROBE_PARTITIONS,
                    on_delivery=self._on_delivery(seq),
                )
            except BufferError:  # the local queue is full: this one was never sent
                with self._lock:
                    del self.sent[seq]
            seq += 1
            self.producer.poll(0)
        self.producer.flush(10)

    def _read_up(self) -> None:
        """Read the topic up to the end offsets it has now (a fresh reader's first fetch can
        take longer than any quiet spell, so the offsets, not silence, end the read)."""
        ends = {}
        for p in range(PROBE_PARTITIONS):
            with contextlib.suppress(KafkaException):
                ends[p] = self.reader.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=10
                )[1]
        deadline = time.monotonic() + READ_BOUND_S
        while time.monotonic() < deadline and any(
            self.positions.get(p, 0) < end for p, end in ends.items()
        ):
            msg = self.reader.poll(0.2)
            if msg is None or msg.error():
                continue
            self.positions[msg.partition() or 0] = (msg.offset() or 0) + 1
            with contextlib.suppress(ValueError):
                self.read.add(int(msg.value() or b"-1"))

    def window(self, start_ms: int, end_ms: int) -> ProbeRound:
        """The figures of the messages produced in [start_ms, end_ms]; an acknowledged one is
        lost if it cannot be read back once the topic is quiet."""
        self._read_up()
        with self._lock:
            mine = [s for s, at in self.sent.items() if start_ms <= at <= end_ms]
            acked = {s: self.acked[s] for s in mine if s in self.acked}
            waits = [(acked[s] - self.sent[s]) / 1000 for s in acked]
            # One still waiting counts with its wait so far: a stall is not hidden by ending.
            waits += [(now_ms() - self.sent[s]) / 1000 for s in mine if s not in self.acked]
            refused = sum(1 for s in mine if s in self.refused)
        lost = sorted(s for s in acked if s not in self.read)
        return ProbeRound(len(acked), len(lost), lost, max(waits, default=0.0), refused)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self.reader.close()
