"""The registration intake: `<prefix>.registrations` → Postgres, rejects → `….rejected`.

One loop iteration handles one batch (up to `intake_batch` messages) in this order, which is
what makes a crash at any point lose nothing and apply nothing twice in effect (I5, I7):

    1. decode and validate every message; a bad one becomes a rejection, a good one an `Op`
       carrying its source (partition, offset);
    2. apply all ops in one database transaction (store.apply): per-job order is the topic's
       order, and a job remembers the position of the last message applied to it, so a
       redelivered message is a no-op (`replay`);
    3. publish the rejections (including ops the database refused: unknown job, conflict) and
       wait until the broker has acknowledged every one;
    4. only then store the batch's offsets; the consumer commits stored offsets in the
       background (tickwheel/kafka.py), never per message synchronously.

A crash before 4 redelivers the batch: step 2 is then a no-op for what was applied, and step 3
may publish a rejection again (the rejected topic is at-least-once; its `source` position
identifies duplicates). A failing database or broker makes the loop seek back to the batch's
first offsets and retry with backoff, so nothing is skipped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from tickwheel.envelopes import EnvelopeError, Registration, Rejection
from tickwheel.faults import crash_point
from tickwheel.registry_api.document import (
    JobValidationError,
    Limits,
    parse_document,
    validate_job,
)
from tickwheel.registry_api.state import Op, Outcome
from tickwheel.registry_api.store import Applied, RegistryStore

log = logging.getLogger("tickwheel.registry.intake")

POLL_TIMEOUT_S = 0.5
# After the first message arrives, keep collecting for up to this long to fill the batch: a
# transaction per few messages would cost more than the wait.
BATCH_LINGER_S = 0.05
DELIVERY_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # seconds, then stays at the last
REFUSED = {Outcome.NOT_FOUND: "no such job", Outcome.CONFLICT: "not allowed in the job's status"}
# SQLSTATE classes that mean "this data", not "this moment": data exception, integrity
# violation, program limit. A batch failing so is applied op by op to isolate the culprit.
DATA_ERROR_CLASSES = ("22", "23", "54")


@dataclass
class BatchReport:
    """What one batch did, for metrics, logs and tests."""

    messages: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    rejected: int = 0


@dataclass(frozen=True)
class _Rejected:
    message: Message
    reason: str


@dataclass
class _Prepared:
    """A decoded, validated batch, ready for the database."""

    messages: list[Message]
    ops: list[Op] = field(default_factory=list)
    op_messages: list[Message] = field(default_factory=list)
    rejected: list[_Rejected] = field(default_factory=list)


class RegistrationIntake:
    """Consumes registrations; owns its consumer and the producer of rejections."""

    def __init__(
        self,
        store: RegistryStore,
        limits: Limits,
        consumer: Consumer,
        producer: Producer,
        registrations_topic: str,
        rejected_topic: str,
        batch_size: int,
    ) -> None:
        self.store = store
        self.limits = limits
        self.consumer = consumer
        self.producer = producer
        self.rejected_topic = rejected_topic
        self.batch_size = batch_size
        self.consumer.subscribe([registrations_topic])
        self._tenants: set[str] = set()
        # Called with each settled batch's report (metrics, benchmarks).
        self.on_batch: Callable[[BatchReport], None] | None = None
        # confluent-kafka calls block; one thread keeps every consumer call on one thread.
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="intake-kafka")
        self._cpu = ThreadPoolExecutor(max_workers=1, thread_name_prefix="intake-validate")

    async def _kafka(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    async def run(self, stop: asyncio.Event) -> None:
        """Consume and apply until `stop`; two batches in flight at most.

        While batch N's transaction, rejections and offsets are under way, batch N+1 is
        consumed and validated (pure CPU), so the database's work and ours overlap. Batch N
        always settles (offsets stored, or a rewind) before N+1 is handed to the database, so
        offsets are stored in order and never ahead of the database (I5).
        """
        failures = 0
        inflight: tuple[list[Message], asyncio.Task[BatchReport]] | None = None
        while inflight is not None or not stop.is_set():
            messages: list[Message] = (
                [] if stop.is_set() else await self._kafka(self._consume_batch)
            )
            prepared = await self.prepare(messages) if messages else None
            if inflight is not None:
                batch, task = inflight
                inflight = None
                try:
                    report = await task
                    failures = 0
                    log.info("registrations batch", extra={"batch": report.__dict__})
                    if self.on_batch is not None:
                        self.on_batch(report)
                except Exception:
                    log.exception("registration batch failed; rewinding to retry it")
                    # The batch consumed meanwhile lies after the failed one: drop it too.
                    await self._kafka(self._rewind, [*batch, *messages])
                    await asyncio.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S) - 1)])
                    failures += 1
                    continue
            if prepared is not None:
                inflight = (messages, asyncio.create_task(self.commit(prepared)))

    async def close(self) -> None:
        # close() commits the stored offsets (and only those) and leaves the group.
        await self._kafka(self.consumer.close)
        self._io.shutdown(wait=True)
        self._cpu.shutdown(wait=True)

    async def prepare(self, messages: Sequence[Message]) -> _Prepared:
        """Step 1: decode and validate; no write happens here.

        The CPU work runs on its own thread: the GIL is free while the previous batch waits
        on Postgres, so validating this batch overlaps with the database writing the last.
        """
        loop = asyncio.get_running_loop()
        prepared, registrations = await loop.run_in_executor(self._cpu, self._decode, messages)
        known = await self._known_tenants({r.tenant for _, r in registrations})
        now = self.store.clock()
        await loop.run_in_executor(self._cpu, self._validate, prepared, registrations, known, now)
        return prepared

    @staticmethod
    def _decode(
        messages: Sequence[Message],
    ) -> tuple[_Prepared, list[tuple[Message, Registration]]]:
        prepared = _Prepared(list(messages))
        registrations: list[tuple[Message, Registration]] = []
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"consumer error: {err}")
            try:
                registrations.append((msg, Registration.decode(msg.value() or b"")))
            except EnvelopeError as exc:
                prepared.rejected.append(_Rejected(msg, str(exc)))
            except Exception as exc:  # unforeseen: reject this message, never stall the rest
                log.exception("decoding a registration raised %s", type(exc).__name__)
                prepared.rejected.append(_Rejected(msg, f"could not be decoded: {exc!r}"))
        return prepared, registrations

    def _validate(
        self,
        prepared: _Prepared,
        registrations: list[tuple[Message, Registration]],
        known: set[str],
        now: int,
    ) -> None:
        for msg, reg in registrations:
            try:
                prepared.ops.append(self._op(msg, reg, known, now))
                prepared.op_messages.append(msg)
            except (EnvelopeError, JobValidationError) as exc:
                prepared.rejected.append(_Rejected(msg, str(exc)))
            except Exception as exc:  # unforeseen: reject this message, never stall the rest
                log.exception("validating a registration raised %s", type(exc).__name__)
                prepared.rejected.append(_Rejected(msg, f"could not be validated: {exc!r}"))

    async def _known_tenants(self, names: set[str]) -> set[str]:
        """Tenants that exist, from a process-lifetime cache of positive answers (tenants are
        never deleted); only names not seen yet cost a query."""
        unseen = names - self._tenants
        if unseen:
            self._tenants |= await self.store.existing_tenants(sorted(unseen))
        return names & self._tenants

    async def commit(self, prepared: _Prepared) -> BatchReport:
        """Steps 2 to 4: apply, publish rejections, store offsets."""
        report = BatchReport(messages=len(prepared.messages))
        ops, op_messages, rejected = prepared.ops, prepared.op_messages, prepared.rejected
        if ops:
            try:
                results: list[Applied | None] = list(await self.store.apply(ops))
            except asyncpg.PostgresError as exc:
                if str(getattr(exc, "sqlstate", ""))[:2] not in DATA_ERROR_CLASSES:
                    raise
                log.warning("batch refused by the database; applying op by op", exc_info=True)
                results = await self._apply_singly(ops, op_messages, rejected)
            for msg, applied in zip(op_messages, results, strict=True):
                if applied is None:
                    continue
                outcome = applied.outcome
                report.outcomes[outcome.value] = report.outcomes.get(outcome.value, 0) + 1
                if outcome in REFUSED:
                    op = applied.op
                    rejected.append(
                        _Rejected(msg, f"{op.kind} of job {op.job_id!r}: {REFUSED[outcome]}")
                    )
        crash_point("intake_after_db")
        if rejected:
            await self._kafka(self._publish_rejections, rejected)
            report.rejected = len(rejected)
        crash_point("intake_before_offsets")
        await self._kafka(self._store_offsets, prepared.messages)
        return report

    async def _apply_singly(
        self, ops: list[Op], messages: list[Message], rejected: list[_Rejected]
    ) -> list[Applied | None]:
        """Apply ops one transaction each; a data error rejects that message alone (I7)."""
        results: list[Applied | None] = []
        for op, msg in zip(ops, messages, strict=True):
            try:
                results.extend(await self.store.apply([op]))
            except asyncpg.PostgresError as exc:
                if str(getattr(exc, "sqlstate", ""))[:2] not in DATA_ERROR_CLASSES:
                    raise
                rejected.append(_Rejected(msg, f"the database refused it: {exc}"))
                results.append(None)
        return results

    def _op(self, msg: Message, reg: Registration, known: set[str], now_ms: int) -> Op:
        if reg.tenant not in known:
            raise EnvelopeError(f"tenant {reg.tenant!r} does not exist")
        source = (msg.partition() or 0, msg.offset() or 0)
        if reg.op == "upsert":
            doc = parse_document(reg.job)
            spec = validate_job(reg.tenant, doc, self.limits, now_ms)
            return Op("upsert", reg.tenant, doc.id, spec=spec, version=reg.version, source=source)
        assert reg.id is not None
        return Op(reg.op, reg.tenant, reg.id, version=reg.version, source=source)

    # Kafka side (runs on the intake thread) ----------------------------------------------------

    def _consume_batch(self) -> list[Message]:
        messages: list[Message] = self.consumer.consume(self.batch_size, POLL_TIMEOUT_S)
        deadline = time.monotonic() + BATCH_LINGER_S
        while messages and len(messages) < self.batch_size:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            more = self.consumer.consume(self.batch_size - len(messages), left)
            if not more:
                break
            messages.extend(more)
        return messages

    def _publish_rejections(self, rejected: list[_Rejected]) -> None:
        failures: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                failures.append(str(err))

        for item in rejected:
            msg = item.message
            body = Rejection(
                reason=item.reason,
                partition=msg.partition() or 0,
                offset=msg.offset() or 0,
                original=msg.value() or b"",
            )
            self.producer.produce(
                self.rejected_topic, key=msg.key(), value=body.encode(), on_delivery=on_delivery
            )
            self.producer.poll(0)
        remaining = self.producer.flush(DELIVERY_TIMEOUT_S)
        if remaining or failures:
            raise RuntimeError(
                f"rejections not acknowledged: {remaining} pending, failures: {failures[:3]}"
            )

    def _store_offsets(self, messages: Sequence[Message]) -> None:
        last: dict[tuple[str, int], int] = {}
        for msg in messages:
            if msg.error() is None:
                key = (msg.topic() or "", msg.partition() or 0)
                last[key] = max(last.get(key, -1), msg.offset() or 0)
        offsets = [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]
        if offsets:
            try:
                self.consumer.store_offsets(offsets=offsets)
            except Exception:
                # The partition was revoked meanwhile; its new owner redelivers from the last
                # committed offset and the job positions make that a no-op.
                log.warning("could not store offsets (partition revoked?)", exc_info=True)

    def _rewind(self, messages: Sequence[Message]) -> None:
        first: dict[tuple[str, int], int] = {}
        for msg in messages:
            if msg.error() is None:
                key = (msg.topic() or "", msg.partition() or 0)
                first[key] = min(first.get(key, msg.offset() or 0), msg.offset() or 0)
        for (topic, partition), offset in first.items():
            try:
                self.consumer.seek(TopicPartition(topic, partition, offset))
            except Exception:
                log.warning("could not rewind %s[%d]", topic, partition, exc_info=True)
