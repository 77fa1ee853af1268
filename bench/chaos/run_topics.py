"""The run topics as the chaos harness reads them: where this invocation's messages begin
(`skip_to_ends`: the workers' group moved past what earlier invocations left on a kept `--dir`,
before any worker of this one runs) and every envelope from there on, by tenant (`RunTopics`:
what the checker judges early envelopes, failover gaps and offsets ahead by)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from tickwheel.bench.chaos.checker import Envelope
from tickwheel.bench.chaos.deployment import PARTITIONS
from tickwheel.envelopes.parsing import EnvelopeError
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.kafka.clients import consumer


class RunTopics:
    """Every envelope on the run topics, read incrementally by one consumer for the whole run
    and kept by tenant (the run key's first part)."""

    IDLE_S = 1.5  # a round's envelopes are all read once the topics are this long quiet
    BOUND_S = 20.0

    def __init__(self, kafka: str, topics: list[str], starts: dict[tuple[str, int], int]) -> None:
        """Reads each partition of `topics` from its offset in `starts` (where this invocation's
        messages begin; the start of a partition not in it)."""
        self.consumer = consumer(kafka, f"chaos-check-{uuid.uuid4().hex}")
        self.consumer.assign(
            [
                TopicPartition(t, p, starts.get((t, p), OFFSET_BEGINNING))
                for t in topics
                for p in range(PARTITIONS)
            ]
        )
        self.by_tenant: dict[str, list[Envelope]] = {}
        self.unreadable = 0

    def catch_up(self) -> None:
        deadline = time.monotonic() + self.BOUND_S
        quiet_since = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - quiet_since < self.IDLE_S:
            msg = self.consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            quiet_since = time.monotonic()
            try:
                env = RunEnvelope.decode(msg.value() or b"")
            except EnvelopeError:
                self.unreadable += 1
                continue
            _kind, produced_ms = msg.timestamp()
            self.by_tenant.setdefault(env.tenant, []).append(
                Envelope(
                    env.run_key,
                    env.scheduled_at,
                    env.attempt,
                    produced_ms,
                    msg.topic() or "",
                    msg.partition() or 0,
                    msg.offset() or 0,
                )
            )

    def close(self) -> None:
        self.consumer.close()


SKIP_PATIENCE_S = 30.0  # several consumer sessions of the chaos deployment's workers


def _committed(probe: Consumer, parts: list[TopicPartition]) -> list[TopicPartition]:
    """`parts` with the group's committed offsets. A stack just started (or a broker just
    killed) answers "not coordinator" or "coordinator load in progress" for a while: those are
    retried until SKIP_PATIENCE_S, anything else raises at once."""
    deadline = time.monotonic() + SKIP_PATIENCE_S
    while True:
        try:
            return probe.committed(parts, timeout=10)
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def skip_to_ends(
    kafka: str, group: str, topics: list[str]
) -> tuple[dict[tuple[str, int], int], int]:
    """Each existing partition's end on `topics`, committed as `group`'s offset (a group no
    member has joined: the workers' before any worker of this invocation runs), and how many
    messages the group had not read."""
    probe = consumer(kafka, group, **{"enable.auto.commit": False})
    try:
        listed = probe.list_topics(timeout=10).topics
        parts = [
            TopicPartition(t, p)
            for t in topics
            if (meta := listed.get(t)) is not None and meta.error is None
            for p in meta.partitions
        ]
        if not parts:
            return {}, 0
        ends = {
            (tp.topic, tp.partition): probe.get_watermark_offsets(tp, timeout=10)[1] for tp in parts
        }
        unread = sum(  # a partition the group never committed reads from its start (0 here)
            max(0, ends[tp.topic, tp.partition] - max(tp.offset, 0))
            for tp in _committed(probe, parts)
        )
        offsets = [TopicPartition(t, p, end) for (t, p), end in ends.items()]
        # The broker takes a commit from outside the group only while the group is empty: a
        # worker of the last invocation that was killed stays a member until its session ends.
        deadline = time.monotonic() + SKIP_PATIENCE_S
        while True:
            try:
                probe.commit(offsets=offsets, asynchronous=False)
                return ends, unread
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        "could not move the workers' group past earlier invocations' runs "
                        f"within {SKIP_PATIENCE_S:.0f} s (does a worker of one still run?): {exc}"
                    ) from exc
                time.sleep(1.0)
    finally:
        probe.close()
