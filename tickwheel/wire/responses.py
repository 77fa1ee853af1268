"""The HTTP API's answers (docs/API.md): stored jobs, runs, pages, accepted triggers and
backfills, health, and the two error bodies.

The registry describes its OpenAPI document with these (it renders bodies itself, in
`registry_api/render.py`); `tickwheel.client` parses answers into them. A stored job is the
document with every default filled in plus the registry's fields, so `Job` extends
`JobDocument`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from tickwheel.domain import JobKind, JobStatus, Quota, RunOrigin, RunStatus, literal_of
from tickwheel.wire.job import VERSION_MAX, JobDocument

# The statuses a job can be seen in (a deleted job is not found), a run's, a job's kinds.
if TYPE_CHECKING:
    VisibleStatus: TypeAlias = str
    RunStatusValue: TypeAlias = str
    KindValue: TypeAlias = str
    OriginValue: TypeAlias = str
    QuotaValue: TypeAlias = str
else:
    VisibleStatus = literal_of((JobStatus.ACTIVE, JobStatus.PAUSED, JobStatus.COMPLETED))
    RunStatusValue = literal_of(RunStatus)
    KindValue = literal_of(JobKind)
    OriginValue = literal_of(RunOrigin)
    QuotaValue = literal_of(Quota)


class PauseNote(BaseModel):
    by: str = Field(..., description="the tenant and its API key's prefix, the operator's key "
                    "name, or 'tickwheel (pause_after_dead_runs)'")  # fmt: skip
    why: str
    at: str = Field(..., description="ISO-8601 UTC")


class Job(JobDocument):
    """A stored job: the document with every default filled in, plus the registry's fields."""

    next_run_at: str | None = Field(
        ..., description="next scheduled instant, ISO-8601 UTC; null when nothing is due"
    )
    status: VisibleStatus
    version: int = Field(
        ...,
        ge=1,
        description=(
            "starts at 1 and is bumped by every change; an explicit version (Kafka "
            f"registrations) is an integer from 1 to {VERSION_MAX} (2^53 - 1)"
        ),
    )
    created_at: str = Field(..., description="ISO-8601 UTC")
    updated_at: str = Field(..., description="ISO-8601 UTC")
    pause_note: PauseNote | None = Field(
        None, description="who paused the job and why, when paused with a note (null: none)"
    )


class JobPage(BaseModel):
    items: list[Job]
    next: str | None = Field(..., description="cursor of the next page; null on the last page")


class Run(BaseModel):
    run_key: str = Field(..., description="<tenant>/<job id>@<unix ms>")
    scheduled_at: str = Field(..., description="ISO-8601 UTC")
    status: RunStatusValue
    attempt: int
    started_at: str | None
    finished_at: str | None
    last_error: str | None = Field(..., description="the last error, or why the run was skipped")
    origin: OriginValue = Field(
        ...,
        description="how the run came to be: its schedule, a trigger, a backfill, or an "
        "operator's replay of a dead run",
    )


class TriggerAccepted(BaseModel):
    run_key: str = Field(..., description="<tenant>/<job id>@<unix ms>: the triggered run")


class BackfillBody(BaseModel):
    """The range of a backfill: every occurrence of the job's schedule in [from, to)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    from_: str = Field(
        ...,
        alias="from",
        max_length=64,
        description="ISO-8601 instant with Z or an offset; included",
        examples=["2026-11-01T00:00:00Z"],
    )
    to: str = Field(
        ...,
        max_length=64,
        description="ISO-8601 instant with Z or an offset; excluded; not after now",
        examples=["2026-11-04T00:00:00Z"],
    )


class BackfillAccepted(BaseModel):
    runs: int = Field(..., description="runs this request created (0: every occurrence has one)")
    occurrences: int = Field(..., description="occurrences of the schedule in [from, to)")
    existing: int = Field(
        ..., description="occurrences that already had a run, which are not run again"
    )
    first: str | None = Field(..., description="run key of the first run created, or null")
    last: str | None = Field(..., description="run key of the last run created, or null")
    rate_per_s: float = Field(..., description="runs per second the backfill is released at")


class RunPage(BaseModel):
    items: list[Run]
    next: str | None = Field(..., description="cursor of the next page; null on the last page")


class ErrorBody(BaseModel):
    error: str = Field(..., description="machine-readable slug, e.g. not_found")
    detail: str = Field(..., description="one sentence for people")


class QuotaErrorBody(BaseModel):
    """429: one of the tenant's quotas refused the request (nothing of the tenant changed)."""

    error: Literal["quota_exceeded"]
    quota: QuotaValue = Field(..., description="the quota that refused it (docs/API.md)")
    detail: str = Field(..., description="one sentence for people")
    retry_after_s: int = Field(..., description="as the Retry-After header: seconds to wait")


class FieldError(BaseModel):
    field: str = Field(..., description="dotted path in the job document, or a parameter name")
    message: str


class ValidationErrorBody(BaseModel):
    error: Literal["invalid_job", "invalid_request"]
    detail: list[FieldError]


class PartHealth(BaseModel):
    alive: bool
    error: str | None = Field(None, description="why the part died")
    updated_at: str = Field(..., description="ISO-8601 UTC of the part's last report")
    detail: dict[str, Any] = Field(
        default_factory=dict,
        description="the part's own state; the intake: consuming, last_batch_at, partitions, "
        "failing, last_error, and stalled once its watch has ended it",
    )


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    detail: str | None = None
    parts: dict[str, PartHealth] = Field(
        default_factory=dict, description="each long-running part of the process"
    )


class PreviewReason(BaseModel):
    rule: str = Field(
        ...,
        description="the rule as the job document names it: 'dst.gap shift', 'dst.gap skip', "
        "'dst.overlap first|last|both', 'interval', 'H', 'start_at', 'end_at', 'max_runs', "
        "'calendars', 'jitter_ms'",
    )
    text: str = Field(..., description="one sentence for people")


class PreviewJitter(BaseModel):
    offset_ms: int = Field(
        ..., description="how long after its instant it runs: in [0, jitter_ms), below the next"
    )
    runs_at: str = Field(..., description="the instant it runs at, ISO-8601 UTC (milliseconds)")


class PreviewOccurrence(BaseModel):
    at: str = Field(..., description="the instant, ISO-8601 UTC")
    local: str = Field(..., description="the wall time in the job's zone, without offset")
    offset: str = Field(..., description="the zone's UTC offset then, e.g. +02:00")
    abbreviation: str = Field(..., description="the zone's name for that offset, e.g. CEST")
    reasons: list[PreviewReason] = Field(
        ..., description="the DST and H rules that put it there (empty: its wall time as such)"
    )
    excluded: str | None = Field(
        None,
        description="the calendar and rule that exclude it: it is recorded skipped, not run "
        "(null: it runs)",
    )
    jitter: PreviewJitter | None = Field(
        ...,
        description="the job's jitter applied to it (null: no jitter_ms); the run keeps 'at' "
        "as its scheduled instant",
    )


class PreviewSpan(BaseModel):
    from_: str = Field(..., alias="from", description="ISO-8601 UTC, included")
    to: str = Field(..., description="ISO-8601 UTC, excluded")


class PreviewMisfire(BaseModel):
    rule: str = Field(..., description="'misfire.grace_ms' or 'misfire.policy <policy>'")
    text: str = Field(..., description="what a claim now would do, for people")
    now: str = Field(..., description="the instant the claim is imagined at (the registry's now)")
    due: str = Field(..., description="the next due occurrence")
    run: list[str] = Field(..., description="the occurrences such a claim would run")
    skipped: int = Field(..., description="occurrences it would record skipped one by one")
    skipped_span: PreviewSpan | None = Field(
        ..., description="occurrences it would record skipped as one entry"
    )
    next_run_at: str | None = Field(..., description="the job's next occurrence after the claim")


class HashedField(BaseModel):
    field: str = Field(..., description="the cron field, e.g. minute")
    item: str = Field(..., description="the H item as written, e.g. H(0-5)")
    values: list[int] = Field(..., description="the values the job's key resolves it to")


class PreviewWindow(BaseModel):
    start_at: str | None = Field(..., description="no occurrence before it (ISO-8601 UTC)")
    end_at: str | None = Field(..., description="no occurrence after it (ISO-8601 UTC)")
    after_end: Literal["complete", "delete"] = Field(
        ..., description="what becomes of the job after its last occurrence"
    )


class PreviewRuns(BaseModel):
    max_runs: int = Field(..., description="the job's max_runs")
    done: int = Field(..., description="its scheduled runs so far (skipped ones not counted)")
    left: int = Field(..., description="runs left before the job completes")


class PreviewCalendar(BaseModel):
    name: str
    exists: bool = Field(
        ..., description="false: deleted with force; the job runs as if it excluded nothing"
    )


class JobPreview(BaseModel):
    """The next occurrences of a job, each with why it is there (`GET /v1/jobs/{id}/preview`)."""

    id: str
    status: VisibleStatus
    schedule: str | None = Field(..., description="the cron expression; null for a one-off")
    resolved: str | None = Field(..., description="the expression with its H items resolved")
    timezone: str
    style: Literal["fixed-hour", "interval"] | None = Field(
        ...,
        description="interval: the hour field is *, */n or H/n, so the schedule follows "
        "elapsed time and the DST policies do not apply",
    )
    dst: dict[str, str] | None = Field(..., description="the job's DST policies (cron jobs)")
    key: str | None = Field(..., description="the key H items hash: <tenant>/<job id>")
    hashed: list[HashedField]
    occurrences: list[PreviewOccurrence]
    misfire: PreviewMisfire | None = Field(
        ..., description="what a claim now would do with the first occurrence and those after it"
    )
    window: PreviewWindow | None = Field(
        ..., description="the job's active window (null: none; cron jobs only)"
    )
    runs: PreviewRuns | None = Field(
        ..., description="the job's limited runs (null: no max_runs); occurrences stop at the last"
    )
    calendars: list[PreviewCalendar] | None = Field(
        None, description="the exclusion calendars the job names (null: none)"
    )
    jitter_ms: int | None = Field(
        ..., description="the job's jitter_ms (null: none); each occurrence says its offset"
    )
