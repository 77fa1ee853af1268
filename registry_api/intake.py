"""The registration intake: `<prefix>.registrations` → Postgres, rejects → `….rejected`.

One loop iteration handles one batch (up to `intake_batch` messages) in this order, which is
what makes a crash at any point lose nothing and apply nothing twice in effect (I5, I7):

    1. decode and validate every message; a bad one becomes a rejection, a good one an `Op`
       carrying its source (partition, offset);
    2. apply all ops in one database transaction (store.apply): per-job order is the topic's
       order, and a job remembers the position of the last message applied to it, so a
       redelivered message is a no-op (`replay`);
    3. publish the rejections (including ops the database refused: unknown job, conflict, a
       stale version) and wait until the broker has acknowledged every one;
    4. only then store the batch's offsets; the consumer commits stored offsets in the
       background (tickwheel/kafka.py), never per message synchronously.

A crash before 4 redelivers the batch: step 2 is then a no-op for what was applied, and step 3
may publish a rejection again (the rejected topic is at-least-once; its `source` position
identifies duplicates). A database or broker that is unavailable makes the loop seek back to
the batch's first offsets and retry with backoff, so nothing is skipped.

A registration is signed with a key of its tenant (tickwheel/signatures.py): a signed one is
applied only if the signature verifies under an active key of the tenant it names, for this
topic; with `intake_require_signature` (the default) an unsigned one is rejected, and so is
one signed in form 1 (the value alone, which can be replayed). A tenant's quotas are decided
in step 2, inside the batch's transaction (store.py, quotas.py): an op over one is rejected
in step 3 like any op the database side refuses, naming the quota.

The keys are read by their prefixes once per batch (cached `KEY_CACHE_TTL_S`, the HTTP keys'
revocation bound). A form 2 signature also
carries a message id and its signing instant: one signed longer ago than the signature window
(or too far ahead of our clock) is rejected as expired, and step 1 ends by remembering the
batch's message ids with their positions (`RegistryStore.remember_message_ids`, its own
statement): an id received before at another position is a replay and is rejected, so a
captured message produced again changes nothing. A redelivery has its own position and goes
on as before; a crash after the ids were remembered redelivers the batch at the same
positions, so nothing is lost.

One message can never stop the loop (I7): every message ends applied or rejected.
- Decoding and validating guard each message: an unforeseen exception rejects that message.
- The tenant lookup of step 1 and the write of step 2 tell "this input" from "this moment"
  (`tickwheel.db.is_data_error`): a batch refused for its data, or failing with an exception
  that is not the database being unavailable, is applied op by op, and the op at fault is
  rejected alone; only an unavailable database or broker retries the batch.
- A rejection always fits in one message (`Rejection.fitted`, sized by the producer's
  `message.max.bytes`): an original too large to quote whole is cut, with its size and digest.
Anything that still escapes the loop (a fatal consumer error, a bug in the loop itself) ends
the part with its traceback; the process runner then stops the process non-zero (I9).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from tickwheel.clock import format_ms
from tickwheel.crash_points import crash_point, fail_point
from tickwheel.db import DB_ERRORS, is_data_error
from tickwheel.domain import RegistrationOp
from tickwheel.envelopes import EnvelopeError, Registration, Rejection
from tickwheel.kafka import (
    PRODUCER_MESSAGE_MAX_BYTES,
    BatchConsumer,
    Outgoing,
    PublishError,
    publish_reports,
    topic_offsets,
    value_room,
)
from tickwheel.registry_api.auth import KEY_CACHE_TTL_S
from tickwheel.registry_api.document import (
    JobValidationError,
    Limits,
    check_version,
    parse_document,
    validate_job,
)
from tickwheel.registry_api.on_demand import (
    TriggerRequest,
    backfill_window,
    checked_idempotency_key,
)
from tickwheel.registry_api.state import Op, Outcome
from tickwheel.registry_api.store import Applied, NewJobsPlan, RegistryStore, SigningKey
from tickwheel.runtime import PartState, awaiting
from tickwheel.signatures import (
    FUTURE_SKEW_MS,
    SIGNATURE_HEADER,
    Signature,
    SignatureError,
    parse,
    verify,
)
from tickwheel.stall import SAMPLE_TIMEOUT_MIN_S, STALL_SAMPLES, Backlog, StallWatch, samples

log = logging.getLogger("tickwheel.registry.intake")

RETRY_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # seconds, then stays at the last
SIGNATURE_WINDOW_S = 86_400  # default: how old a signed registration may be (a setting)
REFUSED = {Outcome.NOT_FOUND: "no such job", Outcome.CONFLICT: "not allowed in the job's status"}
# A key longer than this is replaced by `sha256:<hex>` on the rejected topic: the key must not
# crowd out the reason. Job ids are at most 128 characters, so only garbage is affected.
REJECTION_KEY_MAX_BYTES = 4096
STALL_S = 60.0  # default: how long registrations may wait unread before the part ends
_UNAVAILABLE = (
    *DB_ERRORS,
    TimeoutError,
    PublishError,  # the broker did not acknowledge: retry the batch
    KafkaException,
)


class IntakeStalled(RuntimeError):
    """Registrations wait unread while the intake looks alive: the part ends (I9)."""


def retryable(exc: BaseException) -> bool:
    """The database or the network failing, not the input: retry the batch as it is."""
    return isinstance(exc, _UNAVAILABLE) and not is_data_error(exc)


class RejectKind(StrEnum):
    """Why a registration was rejected, in a word (the metrics' `reason` label; the rejection
    on the topic says it in a sentence)."""

    MALFORMED = "malformed"  # not a registration: bytes, JSON, envelope, signature header
    SIGNATURE = "signature"  # unsigned where required, not verifying, another tenant's, expired
    REPLAYED = "replayed"  # a signed message id received before at another position
    UNKNOWN_TENANT = "unknown_tenant"
    INVALID = "invalid"  # the job document or the operation's fields
    QUOTA = "quota"  # a quota of the tenant (registry_api/quotas.py)
    REFUSED = "refused"  # the job's state: stale version, no such job, conflict, backfill range
    DATABASE = "database"  # the database refused the op's data
    ERROR = "error"  # an unforeseen exception (logged with its traceback)


@dataclass
class BatchReport:
    """What one batch did, for metrics, logs and tests."""

    messages: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # RejectKind -> rejections
    refusals: dict[tuple[str, str], int] = field(default_factory=dict)  # (tenant, quota) -> n
    lag: dict[int, int] = field(default_factory=dict)  # partition -> messages behind its end
    duration_s: float = 0.0  # seconds from the batch's transaction to its offsets stored


@dataclass(frozen=True)
class _Rejected:
    message: Message
    reason: str
    kind: RejectKind


class _Decoded(NamedTuple):
    """A registration that decoded, with its signature header read (None: unsigned)."""

    msg: Message
    reg: Registration
    signature: Signature | None


class _Signed(NamedTuple):
    """A registration whose form 2 signature verified: its message id is to be remembered."""

    msg: Message
    tenant: str
    message_id: str
    signed_at_ms: int


@dataclass
class _Prepared:
    """A decoded, validated batch, ready for the database."""

    messages: list[Message]
    ops: list[Op] = field(default_factory=list)
    op_messages: list[Message] = field(default_factory=list)
    rejected: list[_Rejected] = field(default_factory=list)
    plan: NewJobsPlan | None = None  # the ops folded as if all their jobs were new
    signed: list[_Signed] = field(default_factory=list)


def refusal(applied: Applied) -> str | None:
    """Why the database side refused an op (a rejection's reason), or None if it applied."""
    op = applied.op
    if applied.outcome is Outcome.STALE:
        stored = applied.job.version if applied.job is not None else "?"
        return (
            f"stale: version {op.version} of job {op.job_id!r} is not newer than the stored "
            f"version {stored}"
        )
    if applied.outcome in REFUSED:
        return f"{op.kind} of job {op.job_id!r}: {REFUSED[applied.outcome]}"
    if applied.problem is not None:
        return f"{op.kind} of job {op.job_id!r}: {applied.problem}"
    return None


def _signature_header(msg: Message) -> bytes | None:
    """The value of the message's signature header (the last one, if repeated), or None."""
    found: bytes | None = None
    for header in msg.headers() or []:
        if header[0] == SIGNATURE_HEADER:
            value = header[1]
            found = value if isinstance(value, bytes) else (value or "").encode()
    return found


def _position(msg: Message) -> tuple[int, int]:
    return msg.partition() or 0, msg.offset() or 0


def _replayed(tenant: str, message_id: str, partition: int, offset: int) -> str:
    return (
        f"replayed: message id {message_id!r} of tenant {tenant!r} was received already "
        f"(partition {partition}, offset {offset}); a replay changes nothing"
    )


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class RegistrationIntake:
    """Consumes registrations; owns its consumer and the producer of rejections.

    `health` is this part's record for /healthz: `consuming` (the loop runs and its last batch
    settled), `last_batch_at`, `partitions` (held, as `topic[n]`), `failing` (batches failed in
    a row, retried with backoff) and `last_error`.
    """

    def __init__(
        self,
        store: RegistryStore,
        limits: Limits,
        consumer: Consumer,
        producer: Producer,
        probe: Consumer,
        registrations_topic: str,
        rejected_topic: str,
        batch_size: int,
        *,
        message_max_bytes: int = PRODUCER_MESSAGE_MAX_BYTES,
        health: PartState | None = None,
        require_signature: bool = True,
        signature_window_s: int = SIGNATURE_WINDOW_S,
        stall_s: float = STALL_S,
    ) -> None:
        self.store = store
        self.stall_s = stall_s
        # When the oldest batch the loop fetched and has not settled was fetched (monotonic);
        # None while every fetched batch has settled, or been rewound to retry.
        self._unsettled_since: float | None = None
        self.require_signature = require_signature
        self.signature_window_ms = signature_window_s * 1000
        # From when (unix ms) the deployment's replay memory holds every id (D-048); read in
        # `run`, when this intake's window joins the deployment's.
        self.memory_complete_from_ms: int | None = None
        self.registrations_topic = registrations_topic
        # key prefix -> (its active keys, when the entry expires); only found keys are kept
        self._keys: dict[str, tuple[list[SigningKey], float]] = {}
        self.limits = limits
        self.health = health if health is not None else PartState("intake")
        self.health.report(consuming=False, last_batch_at=None, partitions=[], failing=0)
        self._partitions: set[tuple[str, int]] = set()
        self.source = BatchConsumer(
            consumer,
            [registrations_topic],
            batch_size,
            name="intake",
            on_assign=self._assigned,
            on_revoke=self._revoked,
        )
        self.producer = producer
        self.rejected_topic = rejected_topic
        self.message_max_bytes = message_max_bytes
        self._tenants: set[str] = set()
        self._committing: asyncio.Task[BatchReport] | None = None
        # Called with each settled batch's report (metrics, benchmarks).
        self.on_batch: Callable[[BatchReport], None] | None = None
        self._cpu = ThreadPoolExecutor(max_workers=1, thread_name_prefix="intake-validate")
        # The watch's own client of the group (never subscribed) and its thread: the broker's
        # answers about the topic never wait in the consumer's I/O thread.
        self.probe = probe
        self._probing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="intake-probe")

    # Rebalance callbacks (on the consumer's I/O thread): incremental with cooperative-sticky.

    def _assigned(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        self._partitions |= {(tp.topic, tp.partition) for tp in partitions}
        self._report_partitions()

    def _revoked(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        self._partitions -= {(tp.topic, tp.partition) for tp in partitions}
        self._report_partitions()

    def _report_partitions(self) -> None:
        held = sorted(self._partitions)
        self.health.report(partitions=[f"{topic}[{n}]" for topic, n in held])

    async def run(self, stop: asyncio.Event) -> None:
        """Consume and apply until `stop`; two batches in flight at most.

        While batch N's transaction, rejections and offsets are under way, batch N+1 is
        consumed and validated (pure CPU), so the database's work and ours overlap. Batch N
        always settles (offsets stored, or a rewind) before N+1 is handed to the database, so
        offsets are stored in order and never ahead of the database (I5).

        Beside the loop a watch samples the topic (`_watch`): registrations left unread for
        `stall_s` end the part with `IntakeStalled`, so the process exits for its supervisor
        to restart it instead of lingering half-dead (I9).
        """
        self.memory_complete_from_ms = await self.store.join_replay_memory(
            self.signature_window_ms + FUTURE_SKEW_MS
        )
        self.health.report(consuming=True)
        loop = asyncio.create_task(self._loop(stop), name="intake-loop")
        watch = asyncio.create_task(self._watch(stop, loop), name="intake-watch")
        try:
            await asyncio.wait({loop, watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch.done() and not loop.done():
                watch.result()  # raises IntakeStalled (returns only once `stop` is set)
            await loop
        finally:
            for task in (watch, loop):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            self.health.report(consuming=False)

    async def _watch(self, stop: asyncio.Event, loop: asyncio.Task[None]) -> None:
        """Every `stall_s / STALL_SAMPLES`, raise `IntakeStalled` if registrations have waited
        `stall_s`: fetched by the loop and not settled (the loop waits on a call that does not
        return), or unread on the topic (tickwheel/stall.py: the consumer no longer fetches, or
        holds no partition while its group has messages), or if the consumer's I/O thread has
        not answered a sample for that long. Nothing is judged while the loop backs off from a
        failure it reports (`failing`), nor while the broker does not answer a sample."""
        judge = StallWatch(self.stall_s)
        timeout_s = max(self.stall_s / STALL_SAMPLES, SAMPLE_TIMEOUT_MIN_S)
        answered = time.monotonic()
        async for now in samples(stop, self.stall_s):
            if self.health.detail.get("failing"):
                judge.reset()
                answered = now
                continue
            since = self._unsettled_since
            if since is not None and now - since >= self.stall_s:
                self._stalled(
                    loop,
                    f"a batch of registrations fetched {now - since:.0f} s ago has not settled",
                )
            try:
                held, positions = await asyncio.wait_for(self.source.holding(), timeout_s)
            except TimeoutError:
                if now - answered >= self.stall_s:
                    silent = f"{now - answered:.0f} s"
                    self._stalled(loop, f"the consumer's I/O thread has not answered for {silent}")
                continue
            answered = time.monotonic()
            try:
                starts, ends, committed = await asyncio.get_running_loop().run_in_executor(
                    self._probing,
                    topic_offsets,
                    self.probe,
                    [self.registrations_topic],
                    timeout_s,
                )
            except KafkaException as exc:
                log.warning("could not sample the registrations topic: %s", exc)
                judge.reset()
                continue
            backlog = Backlog.of(held, positions, starts, ends, committed)
            stalls = judge.judge(backlog, time.monotonic())
            if stalls:
                holds = sorted(f"{t}[{n}]" for t, n in held) or "none"
                self._stalled(
                    loop,
                    "; ".join(stall.describe(time.monotonic()) for stall in stalls)
                    + f" (partitions held: {holds})",
                )

    def _stalled(self, loop: asyncio.Task[None], what: str) -> None:
        """Report the stall, log where the loop waits, and end the part."""
        self.health.report(consuming=False, stalled=what)
        log.error("registration intake stalled: %s; the loop waits at:\n%s", what, awaiting(loop))
        raise IntakeStalled(
            f"registration intake stalled: {what}; exiting for the supervisor to restart it"
        )

    async def _loop(self, stop: asyncio.Event) -> None:
        try:
            await self._batches(stop)
        finally:
            # The loop is dying: let the batch under way settle before the consumer closes
            # (its failure changes nothing: what it did not commit is redelivered).
            if self._committing is not None:
                with contextlib.suppress(Exception):
                    await self._committing

    async def _batches(self, stop: asyncio.Event) -> None:
        failures = 0
        inflight: tuple[list[Message], asyncio.Task[BatchReport]] | None = None
        while inflight is not None or not stop.is_set():
            fail_point("intake_loop")
            messages: list[Message] = [] if stop.is_set() else await self.source.batch()
            if messages and self._unsettled_since is None:
                self._unsettled_since = time.monotonic()
            fetched_at = time.monotonic()
            prepared: _Prepared | None = None
            unprepared: BaseException | None = None
            try:
                prepared = await self.prepare(messages) if messages else None
            except Exception as exc:
                if not retryable(exc):
                    raise
                unprepared = exc
            if inflight is not None:
                batch, task = inflight
                inflight = None
                try:
                    report = await task
                except Exception as exc:
                    if not retryable(exc):
                        raise
                    log.exception("registration batch failed; rewinding to retry it")
                    # The batch consumed meanwhile lies after the failed one: drop it too.
                    await self.source.rewind([*batch, *messages])
                    self._unsettled_since = None
                    failures = await self._back_off(failures, exc)
                    continue
                failures = 0
                self._unsettled_since = fetched_at if messages else None
                self.health.report(
                    consuming=True, failing=0, last_error=None, last_batch_at=_now_iso()
                )
                log.info("registrations batch", extra={"batch": report.__dict__})
                if self.on_batch is not None:
                    self.on_batch(report)
            if unprepared is not None:
                log.error(
                    "registration batch could not be prepared; rewinding to retry it",
                    exc_info=unprepared,
                )
                await self.source.rewind(messages)
                self._unsettled_since = None
                failures = await self._back_off(failures, unprepared)
                continue
            if prepared is not None:
                self._committing = asyncio.create_task(self.commit(prepared))
                inflight = (messages, self._committing)

    async def _back_off(self, failures: int, exc: BaseException) -> int:
        self.health.report(
            consuming=False, failing=failures + 1, last_error=f"{type(exc).__name__}: {exc}"
        )
        await asyncio.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S) - 1)])
        return failures + 1

    async def close(self) -> None:
        # close() commits the stored offsets (and only those) and leaves the group.
        await self.source.close()
        self._cpu.shutdown(wait=True)
        self._probing.shutdown(wait=True)
        await asyncio.to_thread(self.probe.close)

    async def prepare(self, messages: Sequence[Message]) -> _Prepared:
        """Step 1: decode and validate; no job is written here (the message ids of signed
        registrations are remembered, to refuse replays).

        The CPU work runs on its own thread: the GIL is free while the previous batch waits
        on Postgres, so validating this batch overlaps with the database writing the last.
        """
        loop = asyncio.get_running_loop()
        prepared, registrations = await loop.run_in_executor(self._cpu, self._decode, messages)
        known = await self._known_tenants({d.reg.tenant for d in registrations})
        keys = await self._signing_keys(
            {d.signature.prefix for d in registrations if d.signature is not None}
        )
        now = self.store.clock()
        await loop.run_in_executor(
            self._cpu, self._validate, prepared, registrations, known, keys, now
        )
        if prepared.signed:
            await self._refuse_replays(prepared)
        return prepared

    @staticmethod
    def _decode(messages: Sequence[Message]) -> tuple[_Prepared, list[_Decoded]]:
        prepared = _Prepared(list(messages))
        registrations: list[_Decoded] = []
        for msg in messages:
            try:
                reg = Registration.decode(msg.value() or b"")
                header = _signature_header(msg)
                signature = None if header is None else parse(header)
                registrations.append(_Decoded(msg, reg, signature))
            except (EnvelopeError, SignatureError) as exc:
                prepared.rejected.append(_Rejected(msg, str(exc), RejectKind.MALFORMED))
            except Exception as exc:  # unforeseen: reject this message, never stall the rest
                log.exception("decoding a registration raised %s", type(exc).__name__)
                reason = f"could not be decoded: {exc!r}"
                prepared.rejected.append(_Rejected(msg, reason, RejectKind.ERROR))
        return prepared, registrations

    def _validate(
        self,
        prepared: _Prepared,
        registrations: list[_Decoded],
        known: set[str],
        keys: dict[str, list[SigningKey]],
        now: int,
    ) -> None:
        for msg, reg, signature in registrations:
            kind = RejectKind.SIGNATURE
            try:
                verified = self._check_signature(msg, reg, signature, keys, now)
                kind = RejectKind.UNKNOWN_TENANT
                if reg.tenant not in known:
                    raise EnvelopeError(f"tenant {reg.tenant!r} does not exist")
                kind = RejectKind.INVALID
                op = self._op(msg, reg, now)
                if verified is not None and verified.message_id is not None:
                    assert verified.signed_at_ms is not None
                    prepared.signed.append(
                        _Signed(msg, reg.tenant, verified.message_id, verified.signed_at_ms)
                    )
                prepared.ops.append(op)
                prepared.op_messages.append(msg)
            except (EnvelopeError, JobValidationError) as exc:
                prepared.rejected.append(_Rejected(msg, str(exc), kind))
            except Exception as exc:  # unforeseen: reject this message, never stall the rest
                log.exception("validating a registration raised %s", type(exc).__name__)
                reason = f"could not be validated: {exc!r}"
                prepared.rejected.append(_Rejected(msg, reason, RejectKind.ERROR))
        # Still on this thread, overlapping the previous batch's transaction: fold the ops as
        # if their jobs were new, so a batch of new jobs skips the fold inside its transaction.
        # A plan that cannot be made costs only the optimisation: the transaction folds the
        # same ops as before (and deals with any op at fault there), so the batch goes on; the
        # failure is still logged with its traceback, since the plan is the same fold.
        try:
            prepared.plan = self.store.plan_new(prepared.ops, now)
        except Exception:
            log.warning(
                "no new-jobs plan for this batch; folding in the transaction", exc_info=True
            )

    async def _known_tenants(self, names: set[str]) -> set[str]:
        """Tenants that exist, from a process-lifetime cache of positive answers (tenants are
        never deleted); only names not seen yet cost a query.

        A name the database cannot even compare (a NUL character) names no tenant: when the
        batch's lookup is refused for its data, each name is looked up alone, and one refused
        so is unknown (its messages are rejected as from an unknown tenant).
        """
        unseen = names - self._tenants
        if not unseen:
            return names & self._tenants
        try:
            self._tenants |= await self.store.existing_tenants(sorted(unseen))
        except Exception as exc:
            if not is_data_error(exc):
                raise
            for name in sorted(unseen):
                try:
                    self._tenants |= await self.store.existing_tenants([name])
                except Exception as one:
                    if not is_data_error(one):
                        raise
        return names & self._tenants

    async def _signing_keys(self, prefixes: set[str]) -> dict[str, list[SigningKey]]:
        """The active keys named by the batch's signatures, by prefix. Found keys are cached
        for `KEY_CACHE_TTL_S`; a prefix with no key is asked again next batch, so a key
        created a moment ago works at once."""
        if not prefixes:
            return {}
        clock = time.monotonic()
        self._keys = {p: hit for p, hit in self._keys.items() if hit[1] > clock}
        unseen = sorted(prefixes - self._keys.keys())
        if unseen:
            found: dict[str, list[SigningKey]] = {}
            for key in await self.store.signing_keys(unseen):
                found.setdefault(key.prefix, []).append(key)
            for prefix, held in found.items():
                self._keys[prefix] = (held, clock + KEY_CACHE_TTL_S)
        return {p: self._keys[p][0] for p in prefixes if p in self._keys}

    def _check_signature(
        self,
        msg: Message,
        reg: Registration,
        signature: Signature | None,
        keys: dict[str, list[SigningKey]],
        now_ms: int,
    ) -> Signature | None:
        """A signed registration must verify under an active key of the tenant it names, for
        this topic, and be signed within the window; an unsigned one passes unless signatures
        are required, a form 1 one too (checked as before). The signature, once verified
        (None: unsigned); EnvelopeError says why not."""
        if signature is None:
            if self.require_signature:
                raise EnvelopeError(
                    f"unsigned: this registry takes only registrations signed with an API "
                    f"key of their tenant (header {SIGNATURE_HEADER!r})"
                )
            return None
        if signature.replayable and self.require_signature:
            raise EnvelopeError(
                "signed in form 1 (the value alone), which can be replayed: this registry "
                "takes only form 2 signatures, which bind the topic, a message id and the "
                "signing instant (tickwheel.signatures.sign(value, api_key, topic=…))"
            )
        value = msg.value() or b""
        topic = msg.topic() or ""
        for key in keys.get(signature.prefix, ()):
            if verify(signature, value, topic, key.key_hash):
                if key.tenant != reg.tenant:
                    raise EnvelopeError(
                        f"signed with an API key of another tenant than {reg.tenant!r}"
                    )
                break
        else:
            raise EnvelopeError(
                f"signature does not verify: no active API key {signature.prefix!r}… signed "
                "this message for this topic"
            )
        if signature.signed_at_ms is not None:
            self._check_signed_at(signature.signed_at_ms, now_ms)
        return signature

    def _check_signed_at(self, signed_at_ms: int, now_ms: int) -> None:
        """EnvelopeError for a signing instant outside [now - window, now + skew]."""
        if now_ms - signed_at_ms > self.signature_window_ms:
            raise EnvelopeError(
                f"expired: signed at {format_ms(signed_at_ms)}, more than "
                f"{self.signature_window_ms // 1000} s before the registry's clock "
                "(TICKWHEEL_INTAKE_SIGNATURE_WINDOW_S); sign it again to send it again"
            )
        if (since := self.memory_complete_from_ms) is not None and signed_at_ms < since:
            # A registry of this deployment with a wider window started lately: ids signed
            # before this instant may have been forgotten by the narrower memory (D-048).
            raise EnvelopeError(
                f"signed at {format_ms(signed_at_ms)}, before {format_ms(since)}, from when "
                "this deployment's memory of message ids is complete (a registry with a wider "
                "signature window started since); sign it again to send it again"
            )
        if signed_at_ms - now_ms > FUTURE_SKEW_MS:
            raise EnvelopeError(
                f"signed at {format_ms(signed_at_ms)}, more than {FUTURE_SKEW_MS // 1000} s "
                "ahead of the registry's clock"
            )

    async def _refuse_replays(self, prepared: _Prepared) -> None:
        """Remember the batch's message ids; reject each op whose id was received before at
        another position (or earlier in this batch): a replay."""
        first: dict[tuple[str, str], _Signed] = {}
        replays: dict[tuple[int, int], str] = {}
        for item in prepared.signed:
            key = (item.tenant, item.message_id)
            if key in first:
                replays[_position(item.msg)] = _replayed(*key, *_position(first[key].msg))
            else:
                first[key] = item
        keep_ms = self.signature_window_ms + FUTURE_SKEW_MS
        received = await self.store.remember_message_ids(
            self.registrations_topic,
            [(*key, *_position(item.msg), item.signed_at_ms) for key, item in first.items()],
            keep_ms,
        )
        for key, item in first.items():
            topic, partition, offset = received[key]
            if (topic, partition, offset) != (self.registrations_topic, *_position(item.msg)):
                replays[_position(item.msg)] = _replayed(*key, partition, offset)
        if not replays:
            return
        ops, messages = [], []
        for op, msg in zip(prepared.ops, prepared.op_messages, strict=True):
            reason = replays.get(_position(msg))
            if reason is None:
                ops.append(op)
                messages.append(msg)
            else:
                prepared.rejected.append(_Rejected(msg, reason, RejectKind.REPLAYED))
        prepared.ops, prepared.op_messages = ops, messages
        prepared.plan = None  # made for the ops before: the transaction folds instead

    async def commit(self, prepared: _Prepared) -> BatchReport:
        """Steps 2 to 4: apply, publish rejections, store offsets."""
        started = time.perf_counter()
        report = BatchReport(messages=len(prepared.messages))
        ops, op_messages, rejected = prepared.ops, prepared.op_messages, prepared.rejected
        if ops:
            try:
                results: list[Applied | None] = list(await self.store.apply(ops, prepared.plan))
            except Exception as exc:
                if retryable(exc):
                    raise
                log.warning(
                    "batch refused (%s); applying op by op", type(exc).__name__, exc_info=True
                )
                results = await self._apply_singly(ops, op_messages, rejected)
            for msg, applied in zip(op_messages, results, strict=True):
                if applied is None:
                    continue
                outcome = applied.outcome
                report.outcomes[outcome.value] = report.outcomes.get(outcome.value, 0) + 1
                if applied.quota is not None:
                    refused = (applied.op.tenant, applied.quota.quota.value)
                    report.refusals[refused] = report.refusals.get(refused, 0) + 1
                    rejected.append(_Rejected(msg, applied.quota.detail, RejectKind.QUOTA))
                elif (reason := refusal(applied)) is not None:
                    rejected.append(_Rejected(msg, reason, RejectKind.REFUSED))
        crash_point("intake_after_db")
        if rejected:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._publish_rejections, rejected)
            report.rejected = len(rejected)
            for item in rejected:
                report.reasons[item.kind] = report.reasons.get(item.kind, 0) + 1
        crash_point("intake_before_offsets")
        await self.source.store_offsets(prepared.messages)
        report.duration_s = time.perf_counter() - started
        report.lag = await self.source.call(self._lag, prepared.messages)
        return report

    def _lag(self, messages: Sequence[Message]) -> dict[int, int]:
        """Per partition of the batch: messages between the batch's end and the partition's
        end, by the consumer's cached high watermarks (no broker round trip)."""
        ends: dict[int, int] = {}
        for msg in messages:
            partition, offset = _position(msg)
            ends[partition] = max(ends.get(partition, -1), offset + 1)
        lag = {}
        for partition, end in ends.items():
            tp = TopicPartition(self.registrations_topic, partition)
            try:
                _low, high = self.source.consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            if high >= 0:
                lag[partition] = max(0, high - end)
        return lag

    async def _apply_singly(
        self, ops: list[Op], messages: list[Message], rejected: list[_Rejected]
    ) -> list[Applied | None]:
        """Apply ops one transaction each; one the database refuses (or that raises anything
        but unavailability) rejects its message alone (I7)."""
        results: list[Applied | None] = []
        for op, msg in zip(ops, messages, strict=True):
            try:
                results.extend(await self.store.apply([op]))
            except Exception as exc:
                if retryable(exc):
                    raise
                if is_data_error(exc):
                    reason, kind = f"the database refused it: {exc}", RejectKind.DATABASE
                else:
                    log.exception("applying a registration raised %s", type(exc).__name__)
                    reason = f"could not be applied: {type(exc).__name__}: {exc}"
                    kind = RejectKind.ERROR
                rejected.append(_Rejected(msg, reason, kind))
                results.append(None)
        return results

    def _op(self, msg: Message, reg: Registration, now_ms: int) -> Op:
        check_version(reg.version)
        source = (msg.partition() or 0, msg.offset() or 0)
        if reg.op == RegistrationOp.UPSERT:
            doc = parse_document(reg.job)
            spec = validate_job(reg.tenant, doc, self.limits, now_ms)
            return Op(
                RegistrationOp.UPSERT,
                reg.tenant,
                spec.job_id,
                spec=spec,
                version=reg.version,
                source=source,
            )
        assert reg.id is not None
        if reg.op == RegistrationOp.TRIGGER:
            # Without an explicit key the message's position is the key: a redelivered
            # trigger finds the run its first delivery started (on_demand.py).
            given = checked_idempotency_key(reg.idempotency_key, "idempotency_key")
            key = given or f"kafka:{source[0]}:{source[1]}"
            return Op(reg.op, reg.tenant, reg.id, source=source, request=TriggerRequest(key))
        if reg.op == RegistrationOp.BACKFILL:
            window = backfill_window({"from": reg.window_from, "to": reg.window_to})
            return Op(reg.op, reg.tenant, reg.id, source=source, request=window)
        return Op(reg.op, reg.tenant, reg.id, version=reg.version, source=source)

    # Kafka side ------------------------------------------------------------------------------

    def _rejection_key(self, message: Message) -> bytes | None:
        key = message.key()
        if isinstance(key, str):
            key = key.encode()
        if key is not None and len(key) > REJECTION_KEY_MAX_BYTES:
            return b"sha256:" + hashlib.sha256(key).hexdigest().encode()
        return key

    def _outgoing(self, item: _Rejected, max_bytes: int) -> Outgoing:
        key = self._rejection_key(item.message)
        rejection = Rejection.fitted(
            item.reason,
            item.message.partition() or 0,
            item.message.offset() or 0,
            item.message.value() or b"",
            value_room(max_bytes, key),
        )
        return Outgoing(self.rejected_topic, key=key, value=rejection.encode())

    def _publish_rejections(self, rejected: list[_Rejected]) -> None:
        failed = publish_reports(self.producer, rejected, self._outgoing, self.message_max_bytes)
        if failed:
            raise PublishError(failed)
