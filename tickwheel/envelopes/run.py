"""The run envelope (DESIGN §5): what a shard leader publishes to `runs.<priority>` for one
run, and its headers (`run_key`, `epoch`; `again` on a run sent again).

Every run envelope carries `"v": 1`; the decoder refuses versions it does not know and any
missing or mistyped field with an `EnvelopeError` naming the field. Its identity and numbers
must also be values the run ledger can hold (the tenant and job id forms, instants of the years
1900-8999, attempts within an int32): a message naming anything else is refused here, never by
Postgres in the middle of a worker's batch claim.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import orjson

from tickwheel import domain
from tickwheel.domain import (
    ATTEMPT_MAX,
    INSTANT_MAX_MS,
    INSTANT_MIN_MS,
    JOB_ID_FORM,
    PRIORITIES,
    TENANT_FORM,
    RunOrigin,
)
from tickwheel.envelopes.parsing import (
    EnvelopeError,
    loads_object,
    take,
    take_choice,
    take_form,
    take_int,
)

RUN_ENVELOPE_VERSION = 1
INT64_MAX = 2**63 - 1
RUN_ORIGINS = tuple(o.value for o in RunOrigin)


def parse_run_key(key: str) -> tuple[str, str, int]:
    """`domain.parse_run_key`, failing as a malformed message does here: EnvelopeError."""
    try:
        return domain.parse_run_key(key)
    except domain.RunKeyError as exc:
        raise EnvelopeError(str(exc)) from None


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
    # unix ms: the instant the run was due, after `scheduled_at` by its job's jitter (D-287);
    # None when it was due at its scheduled instant (and in envelopes of older leaders).
    due: int | None = None

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
        if self.due is not None:
            body["due"] = self.due
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
        priority, due = get("priority"), get("due")
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
            and (due is None or (type(due) is int and INSTANT_MIN_MS <= due < INSTANT_MAX_MS))
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
                get("payload"), timeout, handler, target, origin, due,
            )  # fmt: skip
        return cls._checked(obj)

    @classmethod
    def _checked(cls, obj: dict[str, Any]) -> RunEnvelope:
        version = take(obj, "v", int)
        if version != RUN_ENVELOPE_VERSION:
            raise EnvelopeError(f"unknown run envelope version {version}")
        env = cls(
            run_key=take(obj, "run_key", str),
            tenant=take_form(obj, "tenant", TENANT_FORM, "a tenant name: [A-Za-z0-9._-]{1,64}"),
            job_id=take_form(obj, "job_id", JOB_ID_FORM, "a job id: [A-Za-z0-9._:-]{1,128}"),
            scheduled_at=take_int(obj, "scheduled_at", INSTANT_MIN_MS, INSTANT_MAX_MS - 1),
            attempt=take_int(obj, "attempt", 1, ATTEMPT_MAX),
            epoch=take_int(obj, "epoch", 0, INT64_MAX),
            priority=take_choice(obj, "priority", PRIORITIES),
            payload=obj.get("payload"),
            timeout_ms=take_int(obj, "timeout_ms", 1, INT64_MAX),
            handler=take(obj, "handler", str, optional=True),
            target=take(obj, "target", dict, optional=True),
            origin=take_choice(obj, "origin", RUN_ORIGINS, optional=True),
            due=take_int(obj, "due", INSTANT_MIN_MS, INSTANT_MAX_MS - 1, optional=True),
        )
        if (env.handler is None) == (env.target is None):
            raise EnvelopeError("exactly one of 'handler' and 'target' must be set")
        if parse_run_key(env.run_key) != (env.tenant, env.job_id, env.scheduled_at):
            raise EnvelopeError("field 'run_key' does not match tenant, job_id and scheduled_at")
        return env

    @classmethod
    def decode(cls, raw: bytes) -> RunEnvelope:
        return cls.from_dict(loads_object(raw))


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
    due: int | None = None,
) -> bytes:
    """The bytes of the run envelope a leader publishes, from a claimed row's values: `key` its
    run key (`domain.run_key`, which the caller puts in the header too), the payload and the
    target as the JSON texts Postgres returned (`payload_json`, `target_json`); `due` the
    instant a jittered run was due at (None: its scheduled instant).

    Written out in one format string rather than built as a `RunEnvelope` and encoded: a
    leader encodes every run of a hot second, and the object, its dict and the generic encoder
    were a large part of what publishing a run cost in Python (D-140). The same JSON value
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
            due=due,
        ).encode()
    content = f'"handler":"{handler}"' if target_json is None else f'"target":{target_json}'
    end = "}" if due is None else f',"due":{due}}}'
    return (
        f'{{"v":{RUN_ENVELOPE_VERSION},"run_key":"{key}",'
        f'"tenant":"{tenant}","job_id":"{job_id}","scheduled_at":{scheduled_at},'
        f'"attempt":{attempt},"epoch":{epoch},"priority":"{priority}",'
        f'"payload":{payload_json},"timeout_ms":{timeout_ms},{content},"origin":"{origin}"{end}'
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
