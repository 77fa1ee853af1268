"""The Kafka message shapes of DESIGN §5, encoded as JSON with orjson.

Every run envelope carries `"v": 1`; a decoder refuses versions it does not know and any
missing or mistyped field with an `EnvelopeError` naming the field, so a consumer can route the
message (dead-letter, rejection topic) instead of crashing on it. A run envelope's identity and
numbers must also be values the run ledger can hold (the tenant and job id forms, instants of
the years 1900-8999, attempts within an int32): a message naming anything else is refused
here, never by Postgres in the middle of a worker's batch claim.

What a consumer writes back about a message it could not use (a rejection, an unreadable run,
a dead letter) always fits in one Kafka message: `fitted` cuts the quoted original (keeping its
size and SHA-256) and the free text, so a huge message cannot make its own report unsendable.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import orjson

from tickwheel import domain
from tickwheel.domain import (
    ATTEMPT_MAX,
    INSTANT_MAX_MS,
    INSTANT_MIN_MS,
    JOB_ID_FORM,
    PRIORITIES,
    TENANT_FORM,
    RegistrationOp,
    RunOrigin,
    run_key,
)

__all__ = [
    "DeadLetter",
    "EnvelopeError",
    "Registration",
    "Rejection",
    "RunEnvelope",
    "parse_run_key",
    "run_key",
]

RUN_ENVELOPE_VERSION = 1
REGISTRATION_OPS = tuple(op.value for op in RegistrationOp)
INT64_MAX = 2**63 - 1
RUN_ORIGINS = tuple(o.value for o in RunOrigin)


class EnvelopeError(ValueError):
    """A message that does not have the shape of its topic; names the field."""


def parse_run_key(key: str) -> tuple[str, str, int]:
    """`domain.parse_run_key`, failing as a malformed message does here: EnvelopeError."""
    try:
        return domain.parse_run_key(key)
    except domain.RunKeyError as exc:
        raise EnvelopeError(str(exc)) from None


# A run of 19+ digits may be an integer beyond 64 bits, which orjson silently turns into a
# float; the stdlib parser keeps it exact so that validation can refuse it instead. The run is
# found by mapping every ASCII digit to "0" and anything else to " " and looking for 19 zeros:
# a fifth of what the regex `\d{19,}` costs on a run envelope (~1.4 against ~6.9 µs), and a
# worker decodes one envelope per delivery.
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 19


def has_long_digit_run(raw: bytes | str) -> bool:
    """Whether `raw` holds 19 or more ASCII digits in a row."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    return _LONG_RUN in data.translate(_DIGITS_AS_ZEROS)


def loads_exact(raw: bytes | str) -> Any:
    """Any JSON value; integers of any size kept exact. Malformed: EnvelopeError."""
    try:
        value = orjson.loads(raw)
        if has_long_digit_run(raw):
            value = json.loads(raw)
    except (orjson.JSONDecodeError, ValueError) as exc:
        raise EnvelopeError(f"value is not JSON: {exc}") from None
    except RecursionError:  # the stdlib fallback gives up before orjson's depth limit
        raise EnvelopeError("value nests too deeply to decode") from None
    return value


def _loads(raw: bytes) -> dict[str, Any]:
    value = loads_exact(raw)
    if not isinstance(value, dict):
        raise EnvelopeError("value must be a JSON object")
    return value


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise EnvelopeError("field 'original' is not base64") from None


def _take(
    obj: dict[str, Any], name: str, kind: type | tuple[type, ...], optional: bool = False
) -> Any:
    if name not in obj or obj[name] is None:
        if optional:
            return None
        raise EnvelopeError(f"field {name!r} is missing")
    value = obj[name]
    # bool is an int in Python; a flag where a number belongs is still a wrong type.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise EnvelopeError(f"field {name!r} has the wrong type")
    return value


def _take_int(obj: dict[str, Any], name: str, low: int, high: int, optional: bool = False) -> Any:
    """An integer field within [low, high]."""
    value = _take(obj, name, int, optional)
    if value is not None and not low <= value <= high:
        raise EnvelopeError(f"field {name!r} must be an integer from {low} to {high}")
    return value


def _take_form(obj: dict[str, Any], name: str, form: re.Pattern[str], what: str) -> str:
    value: str = _take(obj, name, str)
    if not form.fullmatch(value):
        raise EnvelopeError(f"field {name!r} must be {what}")
    return value


def _take_choice(
    obj: dict[str, Any], name: str, choices: tuple[str, ...], optional: bool = False
) -> Any:
    value = _take(obj, name, str, optional)
    if value is not None and value not in choices:
        raise EnvelopeError(f"field {name!r} must be one of {', '.join(choices)}")
    return value


class RunEnvelope(NamedTuple):
    """One run, as a shard leader publishes it to `runs.{priority}` (immutable).

    A named tuple rather than a frozen dataclass: a worker decodes, and a leader builds, one per
    run, and a frozen dataclass costs a guarded attribute write per field to construct (6 µs of
    the 18 µs a decode took, measured). Build one through `decode`/`from_dict` (which check every
    field) or with exactly one of `handler` and `target`.
    """

    run_key: str
    tenant: str
    job_id: str
    scheduled_at: int  # unix milliseconds, UTC
    attempt: int
    epoch: int
    priority: str
    payload: Any
    timeout_ms: int
    handler: str | None = None
    target: dict[str, Any] | None = None
    # How the run came to be (domain.RunOrigin); None in envelopes of leaders before it existed.
    origin: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # Written out rather than a generic conversion, which would copy the payload: a shard
        # leader encodes up to hundreds of thousands of envelopes in a hot second.
        body: dict[str, Any] = {
            "v": RUN_ENVELOPE_VERSION,
            "run_key": self.run_key,
            "tenant": self.tenant,
            "job_id": self.job_id,
            "scheduled_at": self.scheduled_at,
            "attempt": self.attempt,
            "epoch": self.epoch,
            "priority": self.priority,
            "payload": self.payload,
            "timeout_ms": self.timeout_ms,
        }
        if self.handler is None:
            body["target"] = self.target
        else:
            body["handler"] = self.handler
        if self.origin is not None:
            body["origin"] = self.origin
        return body

    def encode(self) -> bytes:
        return orjson.dumps(self.to_dict())

    def headers(self) -> list[tuple[str, bytes]]:
        return run_headers(self.run_key, str(self.epoch).encode())

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> RunEnvelope:
        """The envelope `obj` describes, every field checked; else EnvelopeError naming one.

        The common case — a leader's envelope — passes one run of cheap checks; anything that
        fails one of them is looked at again field by field, which names what is wrong (and is
        the rule: the quick checks only ever accept what it accepts)."""
        get = obj.get
        tenant, job_id, ms = get("tenant"), get("job_id"), get("scheduled_at")
        attempt, epoch, timeout = get("attempt"), get("epoch"), get("timeout_ms")
        handler, target, origin = get("handler"), get("target"), get("origin")
        priority = get("priority")
        if (
            get("v") == RUN_ENVELOPE_VERSION
            and type(ms) is int  # a bool is no int here
            and type(attempt) is int
            and type(epoch) is int
            and type(timeout) is int
            and type(tenant) is str
            and type(job_id) is str
            and INSTANT_MIN_MS <= ms < INSTANT_MAX_MS
            and 1 <= attempt <= ATTEMPT_MAX
            and 0 <= epoch <= INT64_MAX
            and 1 <= timeout <= INT64_MAX
            and type(priority) is str  # before a set lookup: a list there is unhashable
            and priority in _PRIORITY_SET
            and (origin is None or (type(origin) is str and origin in _ORIGIN_SET))
            and (
                (type(handler) is str and target is None)
                or (handler is None and type(target) is dict)
            )
            and get("run_key") == f"{tenant}/{job_id}@{ms}"
            and (tenant in _TENANTS_SEEN or _tenant_ok(tenant))
            and JOB_ID_FORM.fullmatch(job_id)
        ):
            return cls(
                obj["run_key"], tenant, job_id, ms, attempt, epoch, priority,
                get("payload"), timeout, handler, target, origin,
            )  # fmt: skip
        return cls._checked(obj)

    @classmethod
    def _checked(cls, obj: dict[str, Any]) -> RunEnvelope:
        version = _take(obj, "v", int)
        if version != RUN_ENVELOPE_VERSION:
            raise EnvelopeError(f"unknown run envelope version {version}")
        env = cls(
            run_key=_take(obj, "run_key", str),
            tenant=_take_form(obj, "tenant", TENANT_FORM, "a tenant name: [A-Za-z0-9._-]{1,64}"),
            job_id=_take_form(obj, "job_id", JOB_ID_FORM, "a job id: [A-Za-z0-9._:-]{1,128}"),
            scheduled_at=_take_int(obj, "scheduled_at", INSTANT_MIN_MS, INSTANT_MAX_MS - 1),
            attempt=_take_int(obj, "attempt", 1, ATTEMPT_MAX),
            epoch=_take_int(obj, "epoch", 0, INT64_MAX),
            priority=_take_choice(obj, "priority", PRIORITIES),
            payload=obj.get("payload"),
            timeout_ms=_take_int(obj, "timeout_ms", 1, INT64_MAX),
            handler=_take(obj, "handler", str, optional=True),
            target=_take(obj, "target", dict, optional=True),
            origin=_take_choice(obj, "origin", RUN_ORIGINS, optional=True),
        )
        if (env.handler is None) == (env.target is None):
            raise EnvelopeError("exactly one of 'handler' and 'target' must be set")
        if parse_run_key(env.run_key) != (env.tenant, env.job_id, env.scheduled_at):
            raise EnvelopeError("field 'run_key' does not match tenant, job_id and scheduled_at")
        return env

    @classmethod
    def decode(cls, raw: bytes) -> RunEnvelope:
        return cls.from_dict(_loads(raw))


# A run message a leader sent again — not acknowledged, adopted at a takeover, or its lease
# lapsed — which a worker therefore claims before it runs it (I4).
AGAIN_HEADER = "again"


def run_headers(key: str, epoch: bytes) -> list[tuple[str, bytes]]:
    """A run message's headers (DESIGN §5): its run key, and the epoch that dispatched it (the
    number's digits, which a leader encodes once per batch)."""
    return [("run_key", key.encode()), ("epoch", epoch)]


# A character that a JSON string cannot hold as it is: a control character, a quote, a backslash.
_JSON_ESCAPE = re.compile(r'[\x00-\x1f"\\]')


def encode_run(
    key: str,
    tenant: str,
    job_id: str,
    scheduled_at: int,
    attempt: int,
    epoch: int,
    priority: str,
    payload_json: str,
    timeout_ms: int,
    handler: str | None,
    target_json: str | None,
    origin: str,
) -> bytes:
    """The bytes of the run envelope a leader publishes, from a claimed row's values: `key` its
    run key (`domain.run_key`, which the caller puts in the header too), the payload and the
    target as the JSON texts Postgres returned (`payload_json`, `target_json`).

    Written out in one format string rather than built as a `RunEnvelope` and encoded: a
    leader encodes every run of a hot second, and the object, its dict and the generic encoder
    were half of what publishing a run cost in Python (docs/BENCHMARKS.md). The same JSON value
    as `RunEnvelope.encode` (a property test holds them equal); a string the format would have
    to escape — never one of the forms the registry accepts — takes the generic encoder."""
    if _JSON_ESCAPE.search(f"{tenant}{job_id}{handler or ''}{priority}{origin}"):
        return RunEnvelope(
            run_key=key,
            tenant=tenant,
            job_id=job_id,
            scheduled_at=scheduled_at,
            attempt=attempt,
            epoch=epoch,
            priority=priority,
            payload=orjson.Fragment(payload_json),
            timeout_ms=timeout_ms,
            handler=handler,
            target=None if target_json is None else orjson.Fragment(target_json),  # type: ignore[arg-type]
            origin=origin,
        ).encode()
    content = f'"handler":"{handler}"' if target_json is None else f'"target":{target_json}'
    return (
        f'{{"v":{RUN_ENVELOPE_VERSION},"run_key":"{key}",'
        f'"tenant":"{tenant}","job_id":"{job_id}","scheduled_at":{scheduled_at},'
        f'"attempt":{attempt},"epoch":{epoch},"priority":"{priority}",'
        f'"payload":{payload_json},"timeout_ms":{timeout_ms},{content},"origin":"{origin}"}}'
    ).encode()


_PRIORITY_SET = frozenset(PRIORITIES)
_ORIGIN_SET = frozenset(RUN_ORIGINS)
# Tenant names already checked against the form: a worker sees the same few over and over.
_TENANTS_SEEN: set[str] = set()
_TENANTS_SEEN_MAX = 10_000


def _tenant_ok(tenant: str) -> bool:
    if not TENANT_FORM.fullmatch(tenant):
        return False
    if len(_TENANTS_SEEN) >= _TENANTS_SEEN_MAX:
        _TENANTS_SEEN.clear()
    _TENANTS_SEEN.add(tenant)
    return True


# Free text quoted in a report (a rejection's reason, a run's error) longer than this is cut,
# with "…": it may quote input (a field path, a key, an exception's message), and input can be
# as large as the message itself.
TEXT_MAX_CHARS = 2000
REJECTION_REASON_MAX_CHARS = TEXT_MAX_CHARS  # its name where rejections are concerned


def cut_text(text: str, max_chars: int = TEXT_MAX_CHARS) -> str:
    """`text`, or its first characters and "…" when it is longer than `max_chars`."""
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


_Fitted = TypeVar("_Fitted", "Rejection", "UnreadableRun")


def _fit_original(
    build: Callable[[bytes, int | None, str | None], _Fitted], original: bytes, max_bytes: int
) -> _Fitted:
    """`build(original, size, sha256)` with the whole original if its encoding fits in
    `max_bytes`, else with as much of the original's start as fits beside its size and digest."""
    # base64 makes 4 bytes of 3: skip encoding what cannot fit anyway.
    if len(original) // 3 * 4 < max_bytes:
        whole = build(original, None, None)
        if len(whole.encode()) <= max_bytes:
            return whole
    digest = hashlib.sha256(original).hexdigest()
    room = max_bytes - len(build(b"", len(original), digest).encode())
    if room < 0:
        raise ValueError(f"a report of this message cannot fit in {max_bytes} bytes")
    return build(original[: room // 4 * 3], len(original), digest)


def _quote(body: dict[str, Any], original: bytes, size: int | None, sha256: str | None) -> None:
    """The quoted original, and when it was cut, its whole size and digest."""
    body["original"] = base64.b64encode(original).decode()
    if size is not None:
        body["truncated"] = True
        body["original_size"] = size
        body["original_sha256"] = sha256


def _unquote(obj: dict[str, Any]) -> tuple[bytes, int | None, str | None, bool]:
    truncated = _take(obj, "truncated", bool, optional=True) or False
    return (
        _b64(_take(obj, "original", str)),
        _take(obj, "original_size", int, optional=not truncated),
        _take(obj, "original_sha256", str, optional=not truncated),
        truncated,
    )


@dataclass(frozen=True)
class DeadLetter:
    """A run that exhausted its attempts (or failed permanently), for `runs.dlq`.

    `payload_omitted` is set (`{"size", "sha256"}` of the payload's JSON) when the payload
    was left out so that the letter fits one message (`fitted`); the job's row keeps it.
    """

    run: RunEnvelope
    error: str
    attempts: int
    dead_at: int  # unix milliseconds, UTC
    worker: str | None = None  # the worker that recorded the last attempt, when one did
    payload_omitted: dict[str, Any] | None = None

    def encode(self) -> bytes:
        body = {
            **self.run.to_dict(),
            "error": self.error,
            "attempts": self.attempts,
            "dead_at": self.dead_at,
        }
        if self.worker is not None:
            body["worker"] = self.worker
        if self.payload_omitted is not None:
            body["payload_omitted"] = self.payload_omitted
        return orjson.dumps(body)

    def fitted(self, max_bytes: int) -> DeadLetter:
        """This letter with its error cut to TEXT_MAX_CHARS and, if it still does not fit in
        `max_bytes`, without its payload (size and digest kept)."""
        letter = dataclasses.replace(self, error=cut_text(self.error))
        if len(letter.encode()) <= max_bytes:
            return letter
        payload = orjson.dumps(self.run.payload)
        letter = dataclasses.replace(
            letter,
            run=self.run._replace(payload=None),
            payload_omitted={"size": len(payload), "sha256": hashlib.sha256(payload).hexdigest()},
        )
        if len(letter.encode()) > max_bytes:
            raise ValueError(f"a dead letter cannot fit in {max_bytes} bytes")
        return letter

    @classmethod
    def decode(cls, raw: bytes) -> DeadLetter:
        obj = _loads(raw)
        return cls(
            run=RunEnvelope.from_dict(obj),
            error=_take(obj, "error", str),
            attempts=_take(obj, "attempts", int),
            dead_at=_take(obj, "dead_at", int),
            worker=_take(obj, "worker", str, optional=True),
            payload_omitted=_take(obj, "payload_omitted", dict, optional=True),
        )


@dataclass(frozen=True)
class UnreadableRun:
    """A message on a run topic that is no run envelope, as a worker puts it on `runs.dlq`.

    `{"kind": "unreadable", "error": reason, "source": {"topic", "partition", "offset"},
    "original": <base64 of the exact bytes>, "worker": id, "dead_at": unix ms}`: no run fields,
    since none could be trusted; `kind` tells it apart from a `DeadLetter`. As on the rejected
    topic, an original too large to quote whole beside the rest is cut (`fitted`):
    `"truncated": true`, `original_size` and `original_sha256` then describe the whole message.
    """

    error: str
    topic: str
    partition: int
    offset: int
    original: bytes = field(repr=False)
    worker: str = ""
    dead_at: int = 0  # unix milliseconds, UTC
    original_size: int | None = None  # bytes of the whole message; set when truncated
    original_sha256: str | None = None  # hex SHA-256 of the whole message; set when truncated
    truncated: bool = False

    KIND = "unreadable"

    def fitted(self, max_bytes: int) -> UnreadableRun:
        """This record, its reason cut to TEXT_MAX_CHARS and its original cut (with size and
        digest) if need be, so that its encoding is at most `max_bytes`."""
        error = cut_text(self.error)
        return _fit_original(
            lambda original, size, digest: dataclasses.replace(
                self,
                error=error,
                original=original,
                original_size=size,
                original_sha256=digest,
                truncated=size is not None,
            ),
            self.original,
            max_bytes,
        )

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "kind": self.KIND,
            "error": self.error,
            "source": {"topic": self.topic, "partition": self.partition, "offset": self.offset},
            "worker": self.worker,
            "dead_at": self.dead_at,
        }
        _quote(body, self.original, self.original_size, self.original_sha256)
        return orjson.dumps(body)

    @classmethod
    def decode(cls, raw: bytes) -> UnreadableRun:
        obj = _loads(raw)
        if obj.get("kind") != cls.KIND:
            raise EnvelopeError(f"field 'kind' must be {cls.KIND!r}")
        source = _take(obj, "source", dict)
        original, size, digest, truncated = _unquote(obj)
        return cls(
            error=_take(obj, "error", str),
            topic=_take(source, "topic", str),
            partition=_take(source, "partition", int),
            offset=_take(source, "offset", int),
            original=original,
            worker=_take(obj, "worker", str),
            dead_at=_take(obj, "dead_at", int),
            original_size=size,
            original_sha256=digest,
            truncated=truncated,
        )


@dataclass(frozen=True)
class Registration:
    """A message on `registrations`: upsert carries a job document, the others an id.

    `trigger` may carry an `idempotency_key` (without one, the message's source position is
    its key, so a redelivery starts nothing); `backfill` carries `from` and `to` (ISO-8601
    instants, checked by the registry). Neither takes a `version`: they change no job.
    """

    op: str
    tenant: str
    job: dict[str, Any] | None = None
    id: str | None = None
    version: int | None = None
    idempotency_key: str | None = None  # trigger only
    window_from: str | None = None  # backfill only: the message's "from"
    window_to: str | None = None  # backfill only: the message's "to"

    def __post_init__(self) -> None:
        if self.op not in REGISTRATION_OPS:
            raise EnvelopeError(f"field 'op' must be one of {', '.join(REGISTRATION_OPS)}")
        if self.op == RegistrationOp.UPSERT and self.job is None:
            raise EnvelopeError("field 'job' is missing (op 'upsert' carries the job document)")
        if self.op != RegistrationOp.UPSERT and self.id is None:
            raise EnvelopeError(f"field 'id' is missing (op {self.op!r} names a job by id)")
        on_demand = self.op in (RegistrationOp.TRIGGER, RegistrationOp.BACKFILL)
        if on_demand and self.version is not None:
            raise EnvelopeError(f"field 'version' does not apply to op {self.op!r}")
        if self.idempotency_key is not None and self.op != RegistrationOp.TRIGGER:
            raise EnvelopeError("field 'idempotency_key' applies to op 'trigger' only")
        if self.op == RegistrationOp.BACKFILL:
            for name, value in (("from", self.window_from), ("to", self.window_to)):
                if value is None:
                    raise EnvelopeError(
                        f"field {name!r} is missing (op 'backfill' carries the range "
                        "[from, to) as ISO-8601 instants)"
                    )
        elif self.window_from is not None or self.window_to is not None:
            raise EnvelopeError("fields 'from' and 'to' apply to op 'backfill' only")

    @property
    def job_id(self) -> str | None:
        if self.job is not None:
            ident = self.job.get("id")
            return ident if isinstance(ident, str) else None
        return self.id

    def encode(self) -> bytes:
        body: dict[str, Any] = {"op": self.op, "tenant": self.tenant}
        if self.job is not None:
            body["job"] = self.job
        if self.id is not None:
            body["id"] = self.id
        if self.version is not None:
            body["version"] = self.version
        if self.idempotency_key is not None:
            body["idempotency_key"] = self.idempotency_key
        if self.window_from is not None:
            body["from"] = self.window_from
        if self.window_to is not None:
            body["to"] = self.window_to
        return orjson.dumps(body)

    @classmethod
    def decode(cls, raw: bytes) -> Registration:
        obj = _loads(raw)
        return cls(
            op=_take(obj, "op", str),
            tenant=_take(obj, "tenant", str),
            job=_take(obj, "job", dict, optional=True),
            id=_take(obj, "id", str, optional=True),
            version=_take(obj, "version", int, optional=True),
            idempotency_key=_take(obj, "idempotency_key", str, optional=True),
            window_from=_take(obj, "from", str, optional=True),
            window_to=_take(obj, "to", str, optional=True),
        )


@dataclass(frozen=True)
class Rejection:
    """What `registrations.rejected` holds: the reason, where it came from, the original bytes.

    `original` is the message exactly as received, unless it would not fit in one message
    beside the reason: then it is the message's first bytes, `truncated` is true, and
    `original_size` (bytes) and `original_sha256` (hex) describe the whole message. `fitted`
    builds a rejection that always fits (DESIGN I7).
    """

    reason: str
    partition: int
    offset: int
    original: bytes = field(repr=False)
    original_size: int | None = None  # bytes of the whole message; set when truncated
    original_sha256: str | None = None  # hex SHA-256 of the whole message; set when truncated
    truncated: bool = False

    @classmethod
    def fitted(
        cls, reason: str, partition: int, offset: int, original: bytes, max_bytes: int
    ) -> Rejection:
        """A rejection whose encoding is at most `max_bytes`: the reason cut to
        REJECTION_REASON_MAX_CHARS, the original cut (with its size and digest) if need be."""
        reason = cut_text(reason, REJECTION_REASON_MAX_CHARS)
        return _fit_original(
            lambda cut, size, digest: cls(
                reason, partition, offset, cut, size, digest, truncated=size is not None
            ),
            original,
            max_bytes,
        )

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "reason": self.reason,
            "source": {"partition": self.partition, "offset": self.offset},
        }
        _quote(body, self.original, self.original_size, self.original_sha256)
        return orjson.dumps(body)

    @classmethod
    def decode(cls, raw: bytes) -> Rejection:
        obj = _loads(raw)
        source = _take(obj, "source", dict)
        original, size, digest, truncated = _unquote(obj)
        return cls(
            reason=_take(obj, "reason", str),
            partition=_take(source, "partition", int),
            offset=_take(source, "offset", int),
            original=original,
            original_size=size,
            original_sha256=digest,
            truncated=truncated,
        )
