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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import asyncpg
from confluent_kafka import Consumer, Message, Producer

from tickwheel.domain import RegistrationOp
from tickwheel.envelopes import EnvelopeError, Registration, Rejection
from tickwheel.faults import crash_point
from tickwheel.kafka import BatchConsumer, Outgoing, PublishError, publish_confirmed
from tickwheel.registry_api.document import (
    JobValidationError,
    Limits,
    parse_document,
    validate_job,
)
from tickwheel.registry_api.state import Op, Outcome
from tickwheel.registry_api.store import Applied, RegistryStore

log = logging.getLogger("tickwheel.registry.intake")

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
        self.source = BatchConsumer(consumer, [registrations_topic], batch_size, name="intake")
        self.producer = producer
        self.rejected_topic = rejected_topic
        self._tenants: set[str] = set()
        # Called with each settled batch's report (metrics, benchmarks).
        self.on_batch: Callable[[BatchReport], None] | None = None
        self._cpu = ThreadPoolExecutor(max_workers=1, thread_name_prefix="intake-validate")

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
            messages: list[Message] = [] if stop.is_set() else await self.source.batch()
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
                    await self.source.rewind([*batch, *messages])
                    await asyncio.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S) - 1)])
                    failures += 1
                    continue
            if prepared is not None:
                inflight = (messages, asyncio.create_task(self.commit(prepared)))

    async def close(self) -> None:
        # close() commits the stored offsets (and only those) and leaves the group.
        await self.source.close()
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
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._publish_rejections, rejected)
            report.rejected = len(rejected)
        crash_point("intake_before_offsets")
        await self.source.store_offsets(prepared.messages)
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
        if reg.op == RegistrationOp.UPSERT:
            doc = parse_document(reg.job)
            spec = validate_job(reg.tenant, doc, self.limits, now_ms)
            return Op(
                RegistrationOp.UPSERT,
                reg.tenant,
                doc.id,
                spec=spec,
                version=reg.version,
                source=source,
            )
        assert reg.id is not None
        return Op(reg.op, reg.tenant, reg.id, version=reg.version, source=source)

    # Kafka side ------------------------------------------------------------------------------

    def _publish_rejections(self, rejected: list[_Rejected]) -> None:
        outgoing = [
            Outgoing(
                self.rejected_topic,
                key=item.message.key(),
                value=Rejection(
                    reason=item.reason,
                    partition=item.message.partition() or 0,
                    offset=item.message.offset() or 0,
                    original=item.message.value() or b"",
                ).encode(),
            )
            for item in rejected
        ]
        failed = publish_confirmed(self.producer, outgoing)
        if failed:
            raise PublishError(failed)
