"""The registration topics (DESIGN §5): `Registration`, a message on `registrations` (an
upsert, pause, resume, delete, trigger or backfill of a job; a put_calendar or delete_calendar
of a tenant's exclusion calendar), and `Rejection`, what the intake puts on
`registrations.rejected` for one it could not apply, built to fit one message (`fitted`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from tickwheel.domain import CALENDAR_OPS, RegistrationOp
from tickwheel.envelopes.parsing import EnvelopeError, loads_object, take
from tickwheel.envelopes.reports import (
    TEXT_MAX_CHARS,
    cut_text,
    fit_original,
    quote_original,
    unquote_original,
)

REGISTRATION_OPS = tuple(op.value for op in RegistrationOp)
REJECTION_REASON_MAX_CHARS = TEXT_MAX_CHARS  # its name where rejections are concerned


@dataclass(frozen=True)
class Registration:
    """A message on `registrations`: upsert carries a job document, the other job ops an id.

    `trigger` may carry an `idempotency_key` (without one, the message's source position is
    its key, so a redelivery starts nothing); `backfill` carries `from` and `to` (ISO-8601
    instants, checked by the registry). Neither takes a `version`: they change no job.

    The calendar ops name a calendar (`name`) and carry nothing of a job: `put_calendar`
    carries the calendar document (`calendar`, checked by the registry), `delete_calendar`
    may carry `force` (delete even while jobs name it). Neither takes a `version`: a
    calendar's registrations keep their order by their key (`calendar_key`).
    """

    op: str
    tenant: str
    job: dict[str, Any] | None = None
    id: str | None = None
    version: int | None = None
    idempotency_key: str | None = None  # trigger only
    window_from: str | None = None  # backfill only: the message's "from"
    window_to: str | None = None  # backfill only: the message's "to"
    note: str | None = None  # pause only: why (the registry checks its length and characters)
    name: str | None = None  # calendar ops only: the calendar's name
    calendar: dict[str, Any] | None = None  # put_calendar only: the calendar document
    force: bool | None = None  # delete_calendar only: even while jobs name it

    def __post_init__(self) -> None:
        if self.op not in REGISTRATION_OPS:
            raise EnvelopeError(f"field 'op' must be one of {', '.join(REGISTRATION_OPS)}")
        if self.op in CALENDAR_OPS:
            self._check_calendar_op()
            return
        calendar_fields = (
            ("name", self.name, "ops 'put_calendar' and 'delete_calendar'"),
            ("calendar", self.calendar, "op 'put_calendar'"),
            ("force", self.force, "op 'delete_calendar'"),
        )
        for name, value, ops in calendar_fields:
            if value is not None:
                raise EnvelopeError(f"field {name!r} applies to {ops} only")
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
        if self.note is not None and self.op != RegistrationOp.PAUSE:
            raise EnvelopeError("field 'note' applies to op 'pause' only")

    def _check_calendar_op(self) -> None:
        if self.name is None:
            raise EnvelopeError(f"field 'name' is missing (op {self.op!r} names a calendar)")
        job_fields = (
            ("job", self.job),
            ("id", self.id),
            ("version", self.version),
            ("idempotency_key", self.idempotency_key),
            ("from", self.window_from),
            ("to", self.window_to),
            ("note", self.note),
        )
        for name, value in job_fields:
            if value is not None:
                raise EnvelopeError(f"field {name!r} does not apply to op {self.op!r}")
        if self.op == RegistrationOp.PUT_CALENDAR:
            if self.calendar is None:
                raise EnvelopeError(
                    "field 'calendar' is missing (op 'put_calendar' carries the calendar document)"
                )
            if self.force is not None:
                raise EnvelopeError("field 'force' applies to op 'delete_calendar' only")
        elif self.calendar is not None:
            raise EnvelopeError("field 'calendar' applies to op 'put_calendar' only")

    @property
    def calendar_key(self) -> str:
        """The Kafka key of a calendar op: one calendar's registrations stay in order, and no
        job id can take this form (a job id has no '/')."""
        return f"calendar/{self.name}"

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
        if self.note is not None:
            body["note"] = self.note
        if self.name is not None:
            body["name"] = self.name
        if self.calendar is not None:
            body["calendar"] = self.calendar
        if self.force is not None:
            body["force"] = self.force
        return orjson.dumps(body)

    @classmethod
    def decode(cls, raw: bytes) -> Registration:
        obj = loads_object(raw)
        return cls(
            op=take(obj, "op", str),
            tenant=take(obj, "tenant", str),
            job=take(obj, "job", dict, optional=True),
            id=take(obj, "id", str, optional=True),
            version=take(obj, "version", int, optional=True),
            idempotency_key=take(obj, "idempotency_key", str, optional=True),
            window_from=take(obj, "from", str, optional=True),
            window_to=take(obj, "to", str, optional=True),
            note=take(obj, "note", str, optional=True),
            name=take(obj, "name", str, optional=True),
            calendar=take(obj, "calendar", dict, optional=True),
            force=take(obj, "force", bool, optional=True),
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
        return fit_original(
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
        quote_original(body, self.original, self.original_size, self.original_sha256)
        return orjson.dumps(body)

    @classmethod
    def decode(cls, raw: bytes) -> Rejection:
        obj = loads_object(raw)
        source = take(obj, "source", dict)
        original, size, digest, truncated = unquote_original(obj)
        return cls(
            reason=take(obj, "reason", str),
            partition=take(source, "partition", int),
            offset=take(source, "offset", int),
            original=original,
            original_size=size,
            original_sha256=digest,
            truncated=truncated,
        )
