"""The Kafka messages of DESIGN §5 as JSON Schema models: what a producer in any language may
check a message against before it produces it (`docs/schemas/`, written by `schemas.py`).

These models describe; they do not decode. The codecs that run per message are hand-written
in `tickwheel.envelopes` (a shard leader encodes and a worker decodes every run envelope, where
a pydantic pass would cost microseconds per run). The two are held together by tests instead
(tests/unit/test_wire_schemas.py): every message the codecs produce validates against its
schema, every message the schema admits the decoder accepts (on generated samples), and every
message on a test's topics validates when the test ends (tests/conftest.py).

Where a decoder is more lenient than its schema — it ignores unknown fields, takes a missing
`payload` as null and a `null` optional field as absent, leaves a registration's job document
and a run's handler and target to the registry and the job's row — the schema is the contract:
what a producer must send. The bounds both check have one home, `tickwheel.domain` (tenant and
job id forms, instants of 1900-8999, attempts within an int32) and `tickwheel.envelopes` (the
length of a report's free text). Rules JSON Schema cannot state are in the
descriptions: a run key names its own tenant, job id and instant; a truncated original is a
prefix of the bytes its size and digest describe.

Each schema carries an `x-kafka` annotation (topic, key, headers), which validators ignore:
the signature header of a registration is described there.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, RootModel

from tickwheel.domain import ATTEMPT_MAX, INSTANT_MAX_MS, INSTANT_MIN_MS, TENANT_PATTERN
from tickwheel.envelopes.reports import TEXT_MAX_CHARS
from tickwheel.envelopes.run import INT64_MAX
from tickwheel.signatures import FORM_2, PREFIX_CHARS, SIGNATURE_HEADER
from tickwheel.wire.calendar import CALENDAR_NAME_PATTERN, CalendarDocument
from tickwheel.wire.job import (
    HANDLER_PATTERN,
    JOB_ID_PATTERN,
    TIMEOUT_LIMIT_MS,
    VERSION_MAX,
    VERSION_MIN,
    JobDocument,
    PriorityValue,
    RunTarget,
    StrictModel,
)
from tickwheel.wire.responses import OriginValue

__all__ = [
    "MESSAGES",
    "DeadLetterMessage",
    "RegistrationMessage",
    "RejectionMessage",
    "RunEnvelopeMessage",
]

RUN_KEY_PATTERN = r"^[A-Za-z0-9._-]{1,64}/[A-Za-z0-9._:-]{1,128}@-?[0-9]+$"
IDEMPOTENCY_KEY_MAX_CHARS = 255  # as the HTTP trigger's Idempotency-Key header
INSTANT_MAX_CHARS = 64  # an ISO-8601 instant of a backfill's range, as the HTTP body's
REASON_MAX_CHARS = TEXT_MAX_CHARS  # a report's free text is cut to this (reports.cut_text)
SHA256_HEX = r"^[0-9a-f]{64}$"
# Canonical base64 with padding (RFC 4648 §3.5: the unused bits of the last character are zero),
# as every standard encoder writes it: one byte string has exactly one form.
BASE64 = (
    r"^(?:[A-Za-z0-9+/]{4})*"
    r"(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
)
# Form 2 (what sign() makes: bound to the topic, a message id and the signing instant) or the
# replayable form 1 (the value alone), which a registry requiring signatures refuses.
SIGNATURE_PATTERN = (
    rf"^(?:{FORM_2}:[A-Za-z0-9_-]{{{PREFIX_CHARS}}}:[A-Za-z0-9_-]{{16,64}}:[0-9]{{1,13}}:"
    rf"|[A-Za-z0-9_-]{{{PREFIX_CHARS}}}:)[0-9a-fA-F]{{64}}$"
)

Tenant = Annotated[str, Field(pattern=TENANT_PATTERN, description="the tenant's name")]
JobId = Annotated[str, Field(pattern=JOB_ID_PATTERN, description="the job's id")]
Version = Annotated[
    int | None,
    Field(
        ge=VERSION_MIN,
        le=VERSION_MAX,
        description="optional: an increasing version; a registration whose version is not "
        "newer than the stored job's is rejected as stale",
    ),
]
UnixMs = Annotated[
    int,
    Field(
        ge=INSTANT_MIN_MS,
        lt=INSTANT_MAX_MS,
        description="unix milliseconds, UTC, of the years 1900 to 8999",
    ),
]
Base64Bytes = Annotated[
    str,
    Field(
        pattern=BASE64,
        description="the bytes, base64 (RFC 4648, with padding)",
        json_schema_extra={"contentEncoding": "base64"},
    ),
]


def _kafka(topic: str, key: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    note: dict[str, Any] = {"topic": topic, "key": key, "value": "this schema, as UTF-8 JSON"}
    if headers:
        note["headers"] = headers
    return {"x-kafka": note}


# --- <prefix>.registrations ---------------------------------------------------------------


class Upsert(StrictModel):
    """Create or replace a job (the job document, as over HTTP)."""

    op: Literal["upsert"]
    tenant: Tenant
    job: JobDocument
    version: Version = None


class Delete(StrictModel):
    """Delete a job."""

    op: Literal["delete"]
    tenant: Tenant
    id: JobId
    version: Version = None


class Pause(StrictModel):
    """Stop scheduling a job (idempotent)."""

    op: Literal["pause"]
    tenant: Tenant
    id: JobId
    version: Version = None
    note: str | None = Field(
        None,
        min_length=1,
        max_length=500,
        description="why, kept beside the paused job until it is resumed (by: the tenant, "
        "via Kafka)",
    )


class Resume(StrictModel):
    """Schedule a paused job again, from now on."""

    op: Literal["resume"]
    tenant: Tenant
    id: JobId
    version: Version = None


class Trigger(StrictModel):
    """One run of the job now, outside its schedule; never versioned."""

    op: Literal["trigger"]
    tenant: Tenant
    id: JobId
    idempotency_key: str | None = Field(
        None,
        min_length=1,
        max_length=IDEMPOTENCY_KEY_MAX_CHARS,
        description="optional: the same key for the same job within 24 h starts nothing new; "
        "without one, the message's own position is its key",
    )


class Backfill(StrictModel):
    """One run per past occurrence of the job's schedule in [from, to) that has none."""

    model_config = StrictModel.model_config | {"populate_by_name": True}

    op: Literal["backfill"]
    tenant: Tenant
    id: JobId
    from_: str = Field(
        ...,
        alias="from",
        max_length=INSTANT_MAX_CHARS,
        description="ISO-8601 instant with Z or an offset; included",
    )
    to: str = Field(
        ...,
        max_length=INSTANT_MAX_CHARS,
        description="ISO-8601 instant with Z or an offset; excluded; not after now",
    )


CalendarName = Annotated[
    str,
    Field(
        pattern=CALENDAR_NAME_PATTERN,
        description="the calendar's name: 1-64 of A-Z a-z 0-9 . _ -, not starting with a dot",
    ),
]


class PutCalendar(StrictModel):
    """Create or replace one of the tenant's exclusion calendars (the document, as over HTTP);
    never versioned: a calendar's registrations keep their order by their key."""

    op: Literal["put_calendar"]
    tenant: Tenant
    name: CalendarName
    calendar: CalendarDocument


class DeleteCalendar(StrictModel):
    """Delete one of the tenant's calendars; refused while jobs name it, unless `force`."""

    op: Literal["delete_calendar"]
    tenant: Tenant
    name: CalendarName
    force: bool | None = Field(
        None,
        description="optional: delete even while jobs name it (they then run as if it excluded "
        "nothing); without it, such a delete is rejected naming the jobs",
    )


class RegistrationMessage(
    RootModel[
        Annotated[
            Upsert | Delete | Pause | Resume | Trigger | Backfill | PutCalendar | DeleteCalendar,
            Field(discriminator="op"),
        ]
    ]
):
    """A message on `<prefix>.registrations`, keyed by the job id (a calendar op by
    `calendar/<name>`). Every one ends applied or on `<prefix>.registrations.rejected` with its
    reason."""

    model_config = {
        "json_schema_extra": _kafka(
            "<prefix>.registrations",
            "the job id (UTF-8): keeps one job's registrations in order; a calendar op's key is "
            "'calendar/<name>'. Registrations on different partitions have no order: a job "
            "naming a new calendar is sent once the put_calendar is applied, or on its "
            "partition",
            {
                SIGNATURE_HEADER: {
                    "required": "yes, by default (TICKWHEEL_INTAKE_REQUIRE_SIGNATURE=true); only "
                    "a deployment that sets it false takes unsigned messages, and a message "
                    "that carries it is always checked",
                    "pattern": SIGNATURE_PATTERN,
                    "description": f"'{FORM_2}:<the API key's first {PREFIX_CHARS} "
                    "characters>:<a message id unique per message, [A-Za-z0-9_-]{16,64}>:<the "
                    "signing instant, unix ms>:<HMAC-SHA256, hex, of 'tickwheel-registration-"
                    "v2', the topic, the message id, the instant and the exact value bytes, "
                    "joined by newlines>', the MAC's secret being SHA-256 of an API key of the "
                    "tenant the message names (the key itself never travels). The registry "
                    "rejects an instant outside its signature window and a message id it saw "
                    "before at another position (a replay); the older form '<prefix>:<HMAC of "
                    "the value alone>' is refused when signatures are required. "
                    "tickwheel.signatures.sign makes it",
                }
            },
        )
    }


# --- <prefix>.registrations.rejected ---------------------------------------------------------


class Source(StrictModel):
    partition: int = Field(..., ge=0, description="partition of the rejected registration")
    offset: int = Field(..., ge=0, description="its offset: with the partition, its identity")


class WholeRejection(StrictModel):
    """A rejection quoting the registration's bytes whole."""

    reason: str = Field(..., max_length=REASON_MAX_CHARS, description="why, for people")
    source: Source
    original: Base64Bytes


class CutRejection(StrictModel):
    """A rejection of a registration too large to quote beside its reason: its first bytes,
    its size and its digest."""

    reason: str = Field(..., max_length=REASON_MAX_CHARS, description="why, for people")
    source: Source
    original: Base64Bytes = Field(..., description="a prefix of the bytes received, base64")
    truncated: Literal[True]
    original_size: int = Field(..., ge=0, description="bytes of the whole registration")
    original_sha256: str = Field(
        ..., pattern=SHA256_HEX, description="SHA-256 of the whole registration, hex"
    )


class RejectionMessage(RootModel[WholeRejection | CutRejection]):
    """A message on `<prefix>.registrations.rejected`: a registration that was not applied, at
    least once (`source` tells duplicates apart)."""

    model_config = {
        "json_schema_extra": _kafka(
            "<prefix>.registrations.rejected", "the rejected registration's key, as received"
        )
    }


# --- <prefix>.runs.{high,normal,low} ---------------------------------------------------------


class RunFields(StrictModel):
    """The fields of every run envelope."""

    v: Literal[1] = Field(..., description="the envelope's version; a reader refuses others")
    run_key: str = Field(
        ...,
        pattern=RUN_KEY_PATTERN,
        description="<tenant>/<job_id>@<scheduled_at>: must name this message's tenant, job_id "
        "and scheduled_at",
    )
    tenant: Tenant
    job_id: JobId
    scheduled_at: UnixMs
    attempt: int = Field(
        ..., ge=1, le=ATTEMPT_MAX, description="the dispatch this message is: 1 the first"
    )
    epoch: int = Field(
        ..., ge=0, le=INT64_MAX, description="the shard leader's epoch that dispatched it"
    )
    priority: PriorityValue
    payload: Any = Field(
        ...,
        description="a copy of the job's payload (any JSON; null in a dead letter that had to "
        "leave it out, see payload_omitted)",
    )
    timeout_ms: int = Field(..., ge=1, le=TIMEOUT_LIMIT_MS)
    origin: OriginValue | None = Field(
        None, description="how the run came to be; absent in envelopes of older leaders"
    )
    due: UnixMs | None = Field(
        None,
        description="the instant the run was due: scheduled_at delayed by its job's jitter_ms "
        "(a worker measures its start lateness from it); absent: due at scheduled_at",
    )


class HandlerRun(RunFields):
    """The run of a job with a handler."""

    handler: str = Field(..., pattern=HANDLER_PATTERN, max_length=256)


class TargetRun(RunFields):
    """The run of a job with an HTTP target."""

    target: RunTarget


_RUN_KAFKA = _kafka(
    "<prefix>.runs.high | <prefix>.runs.normal | <prefix>.runs.low (the job's priority)",
    "the job id (UTF-8): keeps one job's runs in order on one partition",
    {
        "run_key": {"description": "the run key again, UTF-8"},
        "epoch": {"description": "the epoch again, as decimal digits"},
        "seal": {
            "description": (
                "a shard leader's seal of the value: 16 bytes, keyed BLAKE2b (person"
                " 'tickwheel-run') under the deployment's run-seal key; absent or not opening:"
                " the worker runs the job's row, not this content"
            )
        },
    },
)


class RunEnvelopeMessage(RootModel[HandlerRun | TargetRun]):
    """One run, as a shard leader publishes it: it names the run and carries what to run, read
    from the job's row by the claim that created the run. A worker runs this content when the
    `seal` header opens under the deployment's key, else what the job's row holds when it
    claims the run."""

    model_config = {"json_schema_extra": _RUN_KAFKA}


# --- <prefix>.runs.dlq -----------------------------------------------------------------------


class OmittedPayload(StrictModel):
    size: int = Field(..., ge=0, description="bytes of the payload's JSON")
    sha256: str = Field(..., pattern=SHA256_HEX, description="SHA-256 of the payload's JSON, hex")


class Dead(StrictModel):
    """What a dead letter adds to a run's envelope."""

    error: str = Field(
        ..., max_length=TEXT_MAX_CHARS, description="the last attempt's error (cut with …)"
    )
    attempts: int = Field(..., ge=1, le=ATTEMPT_MAX, description="attempts the run had")
    dead_at: UnixMs
    worker: str | None = Field(None, description="the worker that recorded the last attempt")
    payload_omitted: OmittedPayload | None = Field(
        None,
        description="set when the payload was left out (null) so that the letter fits one "
        "message; the job's row keeps it",
    )


class DeadHandlerRun(HandlerRun, Dead):
    """A dead run of a handler job: its envelope plus why it died."""


class DeadTargetRun(TargetRun, Dead):
    """A dead run of an HTTP-target job: its envelope plus why it died."""


class DlqSource(StrictModel):
    topic: str = Field(..., description="the run topic the message came from")
    partition: int = Field(..., ge=0)
    offset: int = Field(..., ge=0)


class Unreadable(StrictModel):
    """The fields of every unreadable-message dead letter."""

    kind: Literal["unreadable"]
    error: str = Field(..., max_length=TEXT_MAX_CHARS, description="why it is no run envelope")
    source: DlqSource
    worker: str = Field(..., description="the worker that read it")
    dead_at: UnixMs


class WholeUnreadable(Unreadable):
    """A message on a run topic that is no run envelope, quoted whole."""

    original: Base64Bytes


class CutUnreadable(Unreadable):
    """… too large to quote: its first bytes, its size and its digest."""

    original: Base64Bytes = Field(..., description="a prefix of the bytes read, base64")
    truncated: Literal[True]
    original_size: int = Field(..., ge=0, description="bytes of the whole message")
    original_sha256: str = Field(
        ..., pattern=SHA256_HEX, description="SHA-256 of the whole message, hex"
    )


class DeadLetterMessage(
    RootModel[DeadHandlerRun | DeadTargetRun | WholeUnreadable | CutUnreadable]
):
    """A message on `<prefix>.runs.dlq`: a run that exhausted its attempts or failed
    permanently (its envelope, error, attempts), or (`"kind": "unreadable"`) a message a worker
    could not read as a run envelope, with its bytes."""

    model_config = {
        "json_schema_extra": _kafka("<prefix>.runs.dlq", "the job id, or the unreadable key")
    }


# file name under docs/schemas/ → model
MESSAGES: dict[str, type[RootModel[Any]]] = {
    "registration": RegistrationMessage,
    "rejection": RejectionMessage,
    "run-envelope": RunEnvelopeMessage,
    "dead-letter": DeadLetterMessage,
}
