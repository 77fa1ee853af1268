"""Admission: which registrations of a batch become operations, and why the others are rejected.

This is step 1 of the intake's loop (intake.py, whose docstring has the steps and why a crash at
any of them loses nothing): a batch of messages in, a `Prepared` batch out — an `Op` for each
message admitted, carrying its source (partition, offset), and a `Rejected` for each other one
(why in a word, `RejectKind`, and in a sentence). No job is written here. A message is admitted
when it decodes as a registration, its signature verifies, its tenant exists, its job document
or operation is valid and it is no replay; the ops are then folded ahead as if all their jobs
were new (`RegistryStore.plan_new`), while the previous batch is in the database.

A registration is signed with a key of its tenant (tickwheel/signatures.py): a signed one is
applied only if the signature verifies under an active key of the tenant it names, for this
topic; with `intake_require_signature` (the default) an unsigned one is rejected, and so is
one signed in form 1 (the value alone, which can be replayed).

The keys are read by their prefixes once per batch (cached `KEY_CACHE_TTL_S`, the HTTP keys'
revocation bound). A form 2 signature also carries a message id and its signing instant: one
signed longer ago than the signature window (or too far ahead of our clock) is rejected as
expired, and admission ends by remembering the batch's message ids with their positions
(`RegistryStore.remember_message_ids`, its own statement): an id received before at another
position is a replay and is rejected, so a captured message produced again changes nothing.

The calendar ops (`put_calendar`, `delete_calendar`) are admitted the same way — the same
signature check binds them to the tenant they name, so a message touches only its own
tenant's calendars — and become `CalendarOp`s beside the jobs' ops, the calendar checked whole
here (`calendars.check_calendar`, its fields named as the message's: `calendar.<field>`).

The database side refuses ops too, in the intake's step 2 (a stale version, no such job, a
conflict, a backfill range, a tenant's quota: store.py, quotas.py; a calendar still named, not
found, or one too many: calendars.py); `refusal` and `calendar_refusal` word them, and
`RejectKind` names every kind of rejection.

One message never stops the batch (I7): decoding and validating guard each message, and an
unforeseen exception rejects that message alone (`RejectKind.ERROR`). The tenant lookup tells
"this input" from "this moment" (`tickwheel.db.is_data_error`): a name the database refuses
for its data names no tenant.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple, TypeVar

from confluent_kafka import Message

from tickwheel.clock import format_ms
from tickwheel.db import is_data_error
from tickwheel.domain import CALENDAR_OPS, RegistrationOp
from tickwheel.envelopes.parsing import EnvelopeError
from tickwheel.envelopes.registrations import Registration
from tickwheel.registry_api.auth import KEY_CACHE_TTL_S
from tickwheel.registry_api.calendars import (
    CalendarOp,
    CalendarOutcome,
    CalendarResult,
    check_calendar,
    check_name,
)
from tickwheel.registry_api.document import (
    FieldProblem,
    JobValidationError,
    Limits,
    check_pause_note,
    check_version,
    parse_document,
    validate_job,
)
from tickwheel.registry_api.on_demand import (
    TriggerRequest,
    backfill_window,
    checked_idempotency_key,
)
from tickwheel.registry_api.rows import SigningKey
from tickwheel.registry_api.state import Op, Outcome
from tickwheel.registry_api.store import Applied, NewJobsPlan, RegistryStore
from tickwheel.signatures import (
    FUTURE_SKEW_MS,
    SIGNATURE_HEADER,
    Signature,
    SignatureError,
    parse,
    verify,
)

# The intake's logger: admission is its step 1.
log = logging.getLogger("tickwheel.registry.intake")

SIGNATURE_WINDOW_S = 86_400  # default: how old a signed registration may be (a setting)
REFUSED = {Outcome.NOT_FOUND: "no such job", Outcome.CONFLICT: "not allowed in the job's status"}


class RejectKind(StrEnum):
    """Why a registration was rejected, in a word (the metrics' `reason` label; the rejection
    on the topic says it in a sentence)."""

    MALFORMED = "malformed"  # not a registration: bytes, JSON, envelope, signature header
    SIGNATURE = "signature"  # unsigned where required, not verifying, another tenant's, expired
    REPLAYED = "replayed"  # a signed message id received before at another position
    UNKNOWN_TENANT = "unknown_tenant"
    INVALID = "invalid"  # the job document or the operation's fields
    QUOTA = "quota"  # a quota of the tenant (registry_api/quotas.py)
    # the job's state (stale version, no such job, conflict, backfill range) or the calendar's
    # (still named by jobs, no such calendar, the tenant's last one taken)
    REFUSED = "refused"
    DATABASE = "database"  # the database refused the op's data
    ERROR = "error"  # an unforeseen exception (logged with its traceback)


@dataclass(frozen=True)
class Rejected:
    """A message that is not applied: why, in a sentence (on the rejected topic) and a word."""

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
class Prepared:
    """A decoded, validated batch, ready for the database."""

    messages: list[Message]
    ops: list[Op] = field(default_factory=list)
    op_messages: list[Message] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    plan: NewJobsPlan | None = None  # the ops folded as if all their jobs were new
    signed: list[_Signed] = field(default_factory=list)
    # Calendar ops, in batch order: the intake applies them between the jobs' ops around them.
    calendar_ops: list[CalendarOp] = field(default_factory=list)
    calendar_messages: list[Message] = field(default_factory=list)


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


CALENDAR_REFUSED = {
    CalendarOutcome.NOT_FOUND: "no such calendar",
    CalendarOutcome.IN_USE: None,  # the result's detail names the jobs
    CalendarOutcome.OVER_LIMIT: None,  # the result's detail names the limit
}


def calendar_refusal(op: CalendarOp, result: CalendarResult) -> str | None:
    """Why the database side refused a calendar op (a rejection's reason), or None if it
    applied (or was a replay)."""
    if result.outcome not in CALENDAR_REFUSED:
        return None
    why = CALENDAR_REFUSED[result.outcome] or result.detail
    return f"{op.kind} of calendar {op.name!r}: {why}"


def _signature_header(msg: Message) -> bytes | None:
    """The value of the message's signature header (the last one, if repeated), or None."""
    found: bytes | None = None
    for header in msg.headers() or []:
        if header[0] == SIGNATURE_HEADER:
            value = header[1]
            found = value if isinstance(value, bytes) else (value or "").encode()
    return found


def position(msg: Message) -> tuple[int, int]:
    """Where the message was received: (partition, offset)."""
    return msg.partition() or 0, msg.offset() or 0


def _replayed(tenant: str, message_id: str, partition: int, offset: int) -> str:
    return (
        f"replayed: message id {message_id!r} of tenant {tenant!r} was received already "
        f"(partition {partition}, offset {offset}); a replay changes nothing"
    )


class Admission:
    """Step 1 of one intake: a batch of messages in, a `Prepared` batch out.

    It keeps what it learns between batches: the tenants that exist and the signing keys found
    by prefix. Its CPU work runs on a thread of its own, which `close` ends.
    """

    def __init__(
        self,
        store: RegistryStore,
        limits: Limits,
        registrations_topic: str,
        *,
        require_signature: bool = True,
        signature_window_s: int = SIGNATURE_WINDOW_S,
    ) -> None:
        self.store = store
        self.require_signature = require_signature
        self.signature_window_ms = signature_window_s * 1000
        # From when (unix ms) the deployment's replay memory holds every id (D-048); read by
        # `join_replay_memory`, when the intake starts and its window joins the deployment's.
        self.memory_complete_from_ms: int | None = None
        self.registrations_topic = registrations_topic
        # key prefix -> (its active keys, when the entry expires); only found keys are kept
        self._keys: dict[str, tuple[list[SigningKey], float]] = {}
        self.limits = limits
        self._tenants: set[str] = set()
        self._cpu = ThreadPoolExecutor(max_workers=1, thread_name_prefix="intake-validate")

    async def join_replay_memory(self) -> None:
        """Join this intake's signature window to the deployment's memory of message ids."""
        self.memory_complete_from_ms = await self.store.join_replay_memory(
            self.signature_window_ms + FUTURE_SKEW_MS
        )

    def close(self) -> None:
        self._cpu.shutdown(wait=True)

    async def prepare(self, messages: Sequence[Message]) -> Prepared:
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
    def _decode(messages: Sequence[Message]) -> tuple[Prepared, list[_Decoded]]:
        prepared = Prepared(list(messages))
        registrations: list[_Decoded] = []
        for msg in messages:
            try:
                reg = Registration.decode(msg.value() or b"")
                header = _signature_header(msg)
                signature = None if header is None else parse(header)
                registrations.append(_Decoded(msg, reg, signature))
            except (EnvelopeError, SignatureError) as exc:
                prepared.rejected.append(Rejected(msg, str(exc), RejectKind.MALFORMED))
            except Exception as exc:  # unforeseen: reject this message, never stall the rest
                log.exception("decoding a registration raised %s", type(exc).__name__)
                reason = f"could not be decoded: {exc!r}"
                prepared.rejected.append(Rejected(msg, reason, RejectKind.ERROR))
        return prepared, registrations

    def _validate(
        self,
        prepared: Prepared,
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
                if reg.op in CALENDAR_OPS:
                    prepared.calendar_ops.append(self._calendar_op(msg, reg))
                    prepared.calendar_messages.append(msg)
                else:
                    prepared.ops.append(self._op(msg, reg, now))
                    prepared.op_messages.append(msg)
                if verified is not None and verified.message_id is not None:
                    assert verified.signed_at_ms is not None
                    prepared.signed.append(
                        _Signed(msg, reg.tenant, verified.message_id, verified.signed_at_ms)
                    )
            except (EnvelopeError, JobValidationError) as exc:
                prepared.rejected.append(Rejected(msg, str(exc), kind))
            except Exception as exc:  # unforeseen: reject this message, never stall the rest
                log.exception("validating a registration raised %s", type(exc).__name__)
                reason = f"could not be validated: {exc!r}"
                prepared.rejected.append(Rejected(msg, reason, RejectKind.ERROR))
        # Still on this thread, overlapping the previous batch's transaction: fold the ops as
        # if their jobs were new, so a batch of new jobs skips the fold inside its transaction.
        # A plan that cannot be made costs only the optimisation: the transaction folds the
        # same ops as before (and deals with any op at fault there), so the batch goes on; the
        # failure is still logged with its traceback, since the plan is the same fold. A batch
        # with calendar ops is applied in segments around them, with no plan.
        if prepared.calendar_ops:
            return
        try:
            prepared.plan = self.store.plan_new(prepared.ops, now)
        except Exception:
            log.warning(
                "no new-jobs plan for this batch; folding in the transaction", exc_info=True
            )

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
        note = None
        if reg.note is not None:  # a pause's why; who is the tenant, over Kafka
            note = (f"{reg.tenant} (Kafka registration)", check_pause_note(reg.note, "note"))
        return Op(reg.op, reg.tenant, reg.id, version=reg.version, source=source, note=note)

    @staticmethod
    def _calendar_op(msg: Message, reg: Registration) -> CalendarOp:
        """The calendar op of a registration; JobValidationError naming the message's field."""
        assert reg.name is not None  # the decoder requires it
        source = position(msg)
        if reg.op == RegistrationOp.DELETE_CALENDAR:
            check_name(reg.name)
            return CalendarOp(reg.op, reg.tenant, reg.name, source, force=bool(reg.force))
        try:
            document = check_calendar(reg.name, reg.calendar)
        except JobValidationError as exc:
            # check_calendar names the document's fields; the message holds it in `calendar`
            raise JobValidationError(
                [
                    p if p.field == "name" else FieldProblem(f"calendar.{p.field}", p.message)
                    for p in exc.problems
                ]
            ) from None
        return CalendarOp(reg.op, reg.tenant, reg.name, source, document=document)

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

    async def _refuse_replays(self, prepared: Prepared) -> None:
        """Remember the batch's message ids; reject each op whose id was received before at
        another position (or earlier in this batch): a replay."""
        first: dict[tuple[str, str], _Signed] = {}
        replays: dict[tuple[int, int], str] = {}
        for item in prepared.signed:
            key = (item.tenant, item.message_id)
            if key in first:
                replays[position(item.msg)] = _replayed(*key, *position(first[key].msg))
            else:
                first[key] = item
        keep_ms = self.signature_window_ms + FUTURE_SKEW_MS
        received = await self.store.remember_message_ids(
            self.registrations_topic,
            [(*key, *position(item.msg), item.signed_at_ms) for key, item in first.items()],
            keep_ms,
        )
        for key, item in first.items():
            topic, partition, offset = received[key]
            if (topic, partition, offset) != (self.registrations_topic, *position(item.msg)):
                replays[position(item.msg)] = _replayed(*key, partition, offset)
        if not replays:
            return
        prepared.calendar_ops, prepared.calendar_messages = _without_replays(
            prepared.calendar_ops, prepared.calendar_messages, replays, prepared.rejected
        )
        prepared.ops, prepared.op_messages = _without_replays(
            prepared.ops, prepared.op_messages, replays, prepared.rejected
        )
        prepared.plan = None  # made for the ops before: the transaction folds instead


T = TypeVar("T")


def _without_replays(
    ops: list[T],
    messages: list[Message],
    replays: dict[tuple[int, int], str],
    rejected: list[Rejected],
) -> tuple[list[T], list[Message]]:
    """`ops` and their messages but the replayed ones, which go to `rejected` with the reason."""
    kept_ops, kept_messages = [], []
    for op, msg in zip(ops, messages, strict=True):
        reason = replays.get(position(msg))
        if reason is None:
            kept_ops.append(op)
            kept_messages.append(msg)
        else:
            rejected.append(Rejected(msg, reason, RejectKind.REPLAYED))
    return kept_ops, kept_messages
