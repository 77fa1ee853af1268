"""The job document (DESIGN §7): one shape over HTTP and in Kafka registrations.

`JobDocument` is strict (no extra fields, no type coercion: `5`, never `"5"` or `5.0`), so the
same model checks a registration in the registry and builds one in a client. What needs context
to check — the schedule in its zone, the payload size limit, the target allowlist — is the
registry's (`registry_api/document.py`, `validate_job`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from tickwheel.domain import (
    JOB_ID_PATTERN,
    AfterEnd,
    DstGap,
    DstOverlap,
    MisfirePolicy,
    OverlapPolicy,
    Priority,
    literal_of,
)
from tickwheel.schedule import (
    DEFAULT_GRACE_MS,
    DEFAULT_MAX_CATCHUP,
    JITTER_MAX_MS,
    MAX_CATCHUP_LIMIT,
    MAX_CATCHUP_MIN,
)
from tickwheel.schedule.calendars import CALENDAR_NAME_PATTERN, MAX_JOB_CALENDARS

__all__ = [
    "BACKOFF_LIMIT_MS",
    "HANDLER_PATTERN",
    "JOB_ID_PATTERN",
    "MAX_ATTEMPTS_LIMIT",
    "MAX_RUNS_LIMIT",
    "PAUSE_AFTER_DEAD_RUNS_MAX",
    "TIMEOUT_LIMIT_MS",
    "VERSION_MAX",
    "VERSION_MIN",
    "AfterEndValue",
    "Backoff",
    "Dst",
    "DstGapValue",
    "DstOverlapValue",
    "IdempotencyKeyRule",
    "JobDocument",
    "Misfire",
    "MisfireValue",
    "OverlapValue",
    "PriorityValue",
    "RunTarget",
    "StrictModel",
    "Target",
    "TargetLimit",
]

HANDLER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
MAX_ATTEMPTS_LIMIT = 100
TIMEOUT_LIMIT_MS = 24 * 3600 * 1000  # one day
BACKOFF_LIMIT_MS = 7 * 24 * 3600 * 1000  # one week

# An explicit version (a Kafka registration's `version`) is an integer from VERSION_MIN to
# VERSION_MAX. 2^53 - 1 is the largest integer every JSON reader holds exactly (JavaScript's
# Number.MAX_SAFE_INTEGER), and it leaves the stored bigint (up to 2^63 - 1) room for more
# than 9 * 10^18 bumps after it, so no job's version can ever overflow.
VERSION_MIN = 1
PAUSE_AFTER_DEAD_RUNS_MAX = 100
MAX_RUNS_LIMIT = 1_000_000_000
VERSION_MAX = 2**53 - 1

# The document's closed vocabularies, as literals of the domain's enums (see literal_of).
if TYPE_CHECKING:
    PriorityValue: TypeAlias = str
    MisfireValue: TypeAlias = str
    OverlapValue: TypeAlias = str
    DstGapValue: TypeAlias = str
    DstOverlapValue: TypeAlias = str
    AfterEndValue: TypeAlias = str
else:
    PriorityValue = literal_of(Priority)
    MisfireValue = literal_of(MisfirePolicy)
    OverlapValue = literal_of(OverlapPolicy)
    DstGapValue = literal_of(DstGap)
    DstOverlapValue = literal_of(DstOverlap)
    AfterEndValue = literal_of(AfterEnd)


CalendarName = Annotated[str, Field(pattern=CALENDAR_NAME_PATTERN)]


class StrictModel(BaseModel):
    """No field beyond those declared, and no coercion between JSON types."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Backoff(StrictModel):
    base_ms: int = Field(10_000, ge=0, le=BACKOFF_LIMIT_MS)
    cap_ms: int = Field(600_000, ge=0, le=BACKOFF_LIMIT_MS)

    @field_validator("cap_ms")
    @classmethod
    def _cap_not_below_base(cls, cap_ms: int, info: ValidationInfo) -> int:
        # A field validator, so the error's path is backoff.cap_ms (base_ms is validated first).
        base_ms = info.data.get("base_ms")
        if base_ms is not None and cap_ms < base_ms:
            raise ValueError(f"must be at least base_ms ({base_ms})")
        return cap_ms


class Misfire(StrictModel):
    policy: MisfireValue = MisfirePolicy.RUN_ONCE.value
    grace_ms: int = Field(DEFAULT_GRACE_MS, ge=0, le=BACKOFF_LIMIT_MS)
    max_catchup: int = Field(DEFAULT_MAX_CATCHUP, ge=MAX_CATCHUP_MIN, le=MAX_CATCHUP_LIMIT)


class Dst(StrictModel):
    gap: DstGapValue = DstGap.SHIFT.value
    overlap: DstOverlapValue = DstOverlap.FIRST.value


RATE_LIMIT_MAX = 1_000_000  # requests per second, and a burst, at most


class TargetLimit(StrictModel):
    """A rate for calls to a target: a deployment's per host (TICKWHEEL_TARGET_LIMITS), or a
    job's own share (`target.limit`), which only ever lowers what the job sends: its calls
    wait for the job's rate AND then for the host's (workers/host_limits.py)."""

    rate_per_s: float = Field(..., gt=0, le=RATE_LIMIT_MAX, description="calls per second")
    burst: int = Field(1, ge=1, le=RATE_LIMIT_MAX, description="calls at once")


class Target(StrictModel):
    url: str = Field(..., min_length=1, max_length=2048)
    method: Literal["POST", "PUT", "PATCH"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    limit: TargetLimit | None = Field(
        None,
        # Left out of the stored document when absent: jobs without one keep their rows.
        exclude_if=lambda limit: limit is None,
        description="this job's own rate for its calls, for all workers together; the "
        "deployment's limit of the host still holds (a job cannot raise it)",
    )


class IdempotencyKeyRule(StrictModel):
    """How a worker makes an HTTP target's Idempotency-Key (`tickwheel.idempotency_keys`): the
    job's `idempotency_key_template` and its zone, put in the run's target by the registry."""

    template: str = Field(..., min_length=1, max_length=200)
    timezone: str = Field(..., max_length=64, description="the job's IANA zone")


class RunTarget(Target):
    """A run's HTTP target, as envelopes carry it: the job's `target`, and the rule of its
    Idempotency-Key when the job has a template (absent: the run key)."""

    idempotency_key: IdempotencyKeyRule | None = Field(None, exclude_if=lambda v: v is None)


class JobDocument(StrictModel):
    """A job as users write it: identical over HTTP and in Kafka registrations."""

    id: str = Field(
        ...,
        pattern=JOB_ID_PATTERN,
        description="unique per tenant; not '.' or '..'",
        json_schema_extra={"not": {"enum": [".", ".."]}},
    )
    schedule: str | None = Field(None, max_length=256, description="cron expression")
    at: str | None = Field(None, max_length=64, description="one-off ISO-8601 instant")
    timezone: str = Field("UTC", max_length=64, description="IANA zone name")
    handler: str | None = Field(None, pattern=HANDLER_PATTERN, max_length=256)
    target: Target | None = None
    payload: Any = Field(
        default_factory=dict,
        description="any JSON value but null, at most the registry's payload limit",
        json_schema_extra={"not": {"type": "null"}},
    )
    priority: PriorityValue = Priority.NORMAL.value
    max_attempts: int = Field(5, ge=1, le=MAX_ATTEMPTS_LIMIT)
    backoff: Backoff = Field(default_factory=Backoff)  # type: ignore[arg-type]
    timeout_ms: int = Field(300_000, ge=1, le=TIMEOUT_LIMIT_MS)
    misfire: Misfire = Field(default_factory=Misfire)  # type: ignore[arg-type]
    overlap: OverlapValue = OverlapPolicy.ALLOW.value
    dst: Dst = Field(default_factory=Dst)
    # The active window of a cron schedule (absent: unbounded). Left out of the stored
    # document when absent, so the jobs written before these fields keep their documents.
    start_at: str | None = Field(
        None,
        max_length=64,
        exclude_if=lambda v: v is None,
        description="ISO-8601 instant: no occurrence of the schedule before it (inclusive)",
    )
    end_at: str | None = Field(
        None,
        max_length=64,
        exclude_if=lambda v: v is None,
        description="ISO-8601 instant: no occurrence after it (inclusive); after the last "
        "one the job completes, or is deleted with after_end 'delete'",
    )
    idempotency_key_template: str | None = Field(
        None,
        max_length=200,
        exclude_if=lambda v: v is None,
        description="HTTP targets: the Idempotency-Key each call sends, from {tenant}, {job}, "
        "{scheduled} and {scheduled:FORMAT} (strftime, in the job's zone); absent: the run key",
    )
    max_runs: int | None = Field(
        None,
        ge=1,
        le=MAX_RUNS_LIMIT,
        exclude_if=lambda v: v is None,
        description="cron jobs: the job completes after this many scheduled runs (skipped "
        "occurrences, triggers, backfills and replays are not counted); absent: no limit",
    )
    jitter_ms: int | None = Field(
        None,
        ge=0,
        le=JITTER_MAX_MS,
        exclude_if=lambda v: v is None,
        description="cron jobs: each occurrence runs up to this many ms after its scheduled "
        "instant, by an offset its job and instant decide (the same in every preview); below "
        "the schedule's shortest gap between occurrences; the run keeps its scheduled "
        "instant; absent or 0: none",
    )
    pause_after_dead_runs: int | None = Field(
        None,
        ge=1,
        le=PAUSE_AFTER_DEAD_RUNS_MAX,
        exclude_if=lambda v: v is None,
        description="cron jobs: the registry pauses the job after this many consecutive dead "
        "runs (counted from its last change), with a note saying so; absent: never",
    )
    calendars: list[CalendarName] | None = Field(
        None,
        max_length=MAX_JOB_CALENDARS,
        exclude_if=lambda v: v is None,
        description="cron jobs: the tenant's exclusion calendars (`/v1/calendars`); an "
        "occurrence any of them excludes is recorded skipped, naming the calendar and its rule",
    )
    after_end: AfterEndValue | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="what becomes of the job after its window's last occurrence: "
        "'complete' (absent: the same) or 'delete'; needs end_at",
    )

    @field_validator("id")
    @classmethod
    def _addressable(cls, job_id: str) -> str:
        # A URL path segment `.` or `..` is resolved away by HTTP clients (RFC 3986 §5.2.4)
        # and proxies: /v1/jobs/.. would be /v1, so such a job could never be read, changed
        # or deleted over HTTP. Jobs stored before this rule keep running (the ledger's form
        # still allows them) and stay reachable through `tickwheel jobs`.
        if job_id in (".", ".."):
            raise ValueError("must not be '.' or '..' (a URL cannot address such a job)")
        return job_id

    @field_validator("calendars")
    @classmethod
    def _named_once(cls, names: list[str] | None) -> list[str] | None:
        if names is not None and len(set(names)) != len(names):
            raise ValueError("names a calendar more than once")
        return names
