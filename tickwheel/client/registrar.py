"""`Registrar`: registrations over Kafka, and what became of each one.

A registration produced to `<prefix>.registrations` ends applied or on
`<prefix>.registrations.rejected` with its reason (DESIGN I7), but Kafka answers a producer only
"stored". The registrar closes that loop without any help from the registry:

1. it produces each registration keyed by its job id (so one job's registrations stay in order;
   a calendar's by `calendar/<name>`, so one calendar's do), signed with the tenant's API key
   when it has one (`tickwheel.signatures.sign`), with an increasing version when asked
   (`versions=True`: the clock's milliseconds, never below the last version it gave the job
   plus one; calendar ops take none), and remembers the (partition, offset) Kafka gives it;
2. it reads the rejected topic from where it stood when the registrar was made — by assigned
   partitions, joining no group — and matches each rejection's `source` to what it sent: that
   registration is rejected, with the reason;
3. it reads the committed offsets of the registry's intake group (`<prefix>.registry`): the intake
   commits a registration's offset only after its database write and its rejection, if any, were
   done (I5). So once the committed offset of a partition passes a registration, and the rejected
   topic has been read up to the end it had *after* that offset was seen, a registration with no
   rejection was applied.

Outcomes go to `on_outcome`, on the caller's thread, from `poll()` and `flush()` — the registrar
has no thread of its own. A registration Kafka would not store (its delivery failed) is reported
`failed`; one the producer refuses at once (too large) raises from the call instead. Rejections
are at-least-once: a second one for a settled registration is ignored.

A job naming a calendar may travel on another partition than the calendar's put_calendar, and
partitions have no order between them: send the job once the put_calendar is reported applied.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from tickwheel.clock import now_ms
from tickwheel.domain import CALENDAR_OPS, RegistrationOp
from tickwheel.envelopes.parsing import EnvelopeError
from tickwheel.envelopes.registrations import Registration, Rejection
from tickwheel.kafka.clients import QUIET, admin_client, consumer, producer
from tickwheel.signatures import sign
from tickwheel.topics import Topics
from tickwheel.wire.calendar import CalendarDocument
from tickwheel.wire.job import VERSION_MAX, JobDocument

__all__ = ["Outcome", "Registrar"]

KAFKA_TIMEOUT_S = 10.0  # seconds a metadata, watermark or group-offset request may take
CHECK_INTERVAL_S = 0.25  # seconds between two reads of the intake group's committed offsets
_READ_BATCH = 500  # rejections per consume() call
Status = Literal["applied", "rejected", "failed"]


@dataclass(frozen=True)
class Outcome:
    """What became of one registration."""

    status: Status  # applied | rejected (see reason) | failed (Kafka did not store it)
    op: str
    job_id: str  # the job's id; for put_calendar and delete_calendar, the calendar's name
    version: int | None
    partition: int | None  # where Kafka stored it (None: failed)
    offset: int | None
    reason: str | None = None  # the registry's reason (rejected) or Kafka's error (failed)

    @property
    def applied(self) -> bool:
        return self.status == "applied"


@dataclass
class _Sent:
    op: str
    job_id: str
    version: int | None
    partition: int | None = None
    offset: int | None = None


class Registrar:
    """Produce registrations of one tenant and report each one's outcome (module docstring).

    `prefix` is the deployment's `TICKWHEEL_TOPIC_PREFIX`; `api_key` one of the tenant's keys
    (required where the registry runs with `TICKWHEEL_INTAKE_REQUIRE_SIGNATURE=true`);
    `producer_config` overrides the idempotent producer's librdkafka settings.
    """

    def __init__(
        self,
        kafka: str,
        tenant: str,
        *,
        api_key: str | None = None,
        prefix: str = "tickwheel",
        on_outcome: Callable[[Outcome], None] | None = None,
        versions: bool = False,
        clock: Callable[[], int] = now_ms,
        producer_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.tenant = tenant
        self.on_outcome = on_outcome
        self.versions = versions
        self.clock = clock
        self._api_key = api_key
        self._topics = Topics(prefix)
        self._group = f"{prefix}.registry"  # the intake's (registry_api/service.py)
        self._producer = producer(kafka, **{"linger.ms": 5, **(producer_config or {})})
        self._admin = admin_client(kafka, quiet=True)
        self._reader = consumer(
            kafka,
            f"registrar-{uuid.uuid4()}",  # never joined, never committed to
            **{"enable.auto.commit": False},
            **QUIET,
        )
        self._last_version: dict[str, int] = {}
        self._in_flight: dict[int, _Sent] = {}  # id → not yet stored by Kafka
        self._waiting: dict[tuple[int, int], _Sent] = {}  # (partition, offset) → no outcome yet
        self._read_to: dict[int, int] = {}  # rejected partition → next offset to read
        self._next_check = 0.0
        self._start_reading()

    # -- what is produced --------------------------------------------------------------------

    def upsert(self, job: JobDocument | Mapping[str, Any], *, version: int | None = None) -> None:
        """Create or replace a job (its document, as over HTTP)."""
        document = (
            job.model_dump(mode="json", exclude_unset=True)
            if isinstance(job, JobDocument)
            else dict(job)
        )
        job_id = str(document.get("id"))
        self._send(RegistrationOp.UPSERT, job_id, version, job=document)

    def delete(self, job_id: str, *, version: int | None = None) -> None:
        self._send(RegistrationOp.DELETE, job_id, version, id=job_id)

    def pause(self, job_id: str, *, version: int | None = None) -> None:
        self._send(RegistrationOp.PAUSE, job_id, version, id=job_id)

    def resume(self, job_id: str, *, version: int | None = None) -> None:
        self._send(RegistrationOp.RESUME, job_id, version, id=job_id)

    def trigger(self, job_id: str, *, idempotency_key: str | None = None) -> None:
        """One run now; a redelivery starts nothing new (keyed by the key, else the position)."""
        self._send(RegistrationOp.TRIGGER, job_id, None, id=job_id, idempotency_key=idempotency_key)

    def backfill(self, job_id: str, start: str, end: str) -> None:
        """One run per past occurrence in [start, end) (ISO-8601 instants with an offset)."""
        self._send(
            RegistrationOp.BACKFILL, job_id, None, id=job_id, window_from=start, window_to=end
        )

    def put_calendar(self, name: str, calendar: CalendarDocument | Mapping[str, Any]) -> None:
        """Create or replace the tenant's calendar `name` (its document, as over HTTP)."""
        document = (
            calendar.model_dump(mode="json", exclude_unset=True)
            if isinstance(calendar, CalendarDocument)
            else dict(calendar)
        )
        self._send(RegistrationOp.PUT_CALENDAR, name, None, name=name, calendar=document)

    def delete_calendar(self, name: str, *, force: bool = False) -> None:
        """Delete a calendar; rejected naming the jobs while jobs name it, unless `force`."""
        self._send(RegistrationOp.DELETE_CALENDAR, name, None, name=name, force=force or None)

    def _version(self, op: str, job_id: str, given: int | None) -> int | None:
        versioned = op not in (RegistrationOp.TRIGGER, RegistrationOp.BACKFILL, *CALENDAR_OPS)
        if given is not None or not self.versions or not versioned:
            return given
        version = max(self.clock(), self._last_version.get(job_id, 0) + 1)
        if version > VERSION_MAX:
            raise ValueError(f"version {version} is past the largest allowed, {VERSION_MAX}")
        return version

    def _send(self, op: str, job_id: str, version: int | None, **fields: Any) -> None:
        version = self._version(op, job_id, version)
        registration = Registration(op, self.tenant, version=version, **fields)
        value = registration.encode()
        key = registration.calendar_key if op in CALENDAR_OPS else job_id
        if version is not None:
            self._last_version[job_id] = max(version, self._last_version.get(job_id, 0))
        sent = _Sent(str(op), job_id, version)
        ticket = id(sent)
        self._in_flight[ticket] = sent

        def delivered(err: KafkaError | None, msg: Message) -> None:
            self._in_flight.pop(ticket, None)
            if err is not None:
                self._settle(sent, "failed", str(err))
                return
            sent.partition, sent.offset = msg.partition(), msg.offset()
            self._waiting[(sent.partition or 0, sent.offset or 0)] = sent

        headers: list[tuple[str, str | bytes | None]] | None = None
        if self._api_key is not None:
            headers = [sign(value, self._api_key, topic=self._topics.registrations)]
        while True:
            try:
                self._producer.produce(
                    self._topics.registrations,
                    key=key.encode(),
                    value=value,
                    headers=headers,
                    on_delivery=delivered,
                )
                break
            except BufferError:  # the producer's queue is full: let it drain a little
                self._producer.poll(0.1)
            except BaseException:
                # Refused on the spot (too large for the producer, say): the caller is told by
                # the exception; nothing is sent, so nothing stays pending.
                del self._in_flight[ticket]
                raise
        self._producer.poll(0)

    # -- what became of it -----------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Registrations sent whose outcome is not known yet."""
        return len(self._in_flight) + len(self._waiting)

    def poll(self, timeout_s: float = 0.0) -> int:
        """Report the outcomes known by now (waiting up to `timeout_s` for delivery reports);
        returns how many are still pending."""
        self._producer.poll(timeout_s)
        self._read_rejections(0.0)
        if self._waiting and time.monotonic() >= self._next_check:
            self._next_check = time.monotonic() + CHECK_INTERVAL_S
            self._settle_applied()
        return self.pending

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait until every registration sent has an outcome, at most `timeout_s`; returns how
        many are still pending (0: all reported)."""
        deadline = time.monotonic() + timeout_s
        self._producer.flush(timeout_s)
        while self.poll(0.05) and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.pending

    def close(self) -> None:
        """Flush what is queued for Kafka (outcomes not yet known are not waited for)."""
        self._producer.flush(KAFKA_TIMEOUT_S)
        self._reader.close()

    def __enter__(self) -> Registrar:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _settle(self, sent: _Sent, status: Status, reason: str | None = None) -> None:
        outcome = Outcome(
            status, sent.op, sent.job_id, sent.version, sent.partition, sent.offset, reason
        )
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    def _start_reading(self) -> None:
        """Assign the rejected topic's partitions at their ends: only rejections to come."""
        topic = self._topics.rejected
        meta = self._reader.list_topics(topic, timeout=KAFKA_TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None:
            raise KafkaException(f"topic {topic} does not exist (is the prefix right?)")
        for partition in meta.partitions:
            _, high = self._watermarks(partition)
            self._read_to[partition] = high
        self._reader.assign([TopicPartition(topic, p, o) for p, o in self._read_to.items()])

    def _watermarks(self, partition: int) -> tuple[int, int]:
        tp = TopicPartition(self._topics.rejected, partition)
        low, high = self._reader.get_watermark_offsets(tp, timeout=KAFKA_TIMEOUT_S, cached=False)
        return low, high

    def _read_rejections(self, timeout_s: float) -> None:
        for msg in self._reader.consume(_READ_BATCH, timeout_s):
            err, partition, offset = msg.error(), msg.partition(), msg.offset()
            if err is not None:
                if err.fatal():
                    raise KafkaException(err)
                continue
            if partition is None or offset is None:
                continue
            self._read_to[partition] = offset + 1
            try:
                rejection = Rejection.decode(msg.value() or b"")
            except EnvelopeError:
                continue  # not a rejection: not ours to judge
            sent = self._waiting.pop((rejection.partition, rejection.offset), None)
            if sent is not None:
                self._settle(sent, "rejected", rejection.reason)

    def _settle_applied(self) -> None:
        """Registrations the intake has committed past and not rejected: applied (step 3)."""
        topic = self._topics.registrations
        partitions = sorted({p for p, _ in self._waiting})
        request = ConsumerGroupTopicPartitions(
            self._group, [TopicPartition(topic, p) for p in partitions]
        )
        future = self._admin.list_consumer_group_offsets([request], request_timeout=KAFKA_TIMEOUT_S)
        committed: dict[int, int] = {}
        for result in future.values():
            for tp in result.result().topic_partitions:
                if tp.error is None and tp.offset >= 0:
                    committed[tp.partition] = tp.offset
        done = [key for key in self._waiting if key[1] < committed.get(key[0], -1)]
        if not done:
            return
        # The rejections of those were published before their offsets were committed: read the
        # rejected topic up to the end it has now, then what is left was applied.
        ends = {p: self._watermarks(p)[1] for p in self._read_to}
        deadline = time.monotonic() + KAFKA_TIMEOUT_S
        while any(self._read_to[p] < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                return  # try again at the next poll
            self._read_rejections(0.1)
        for key in done:
            sent = self._waiting.pop(key, None)
            if sent is not None:
                self._settle(sent, "applied")
