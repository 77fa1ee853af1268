"""The words of the domain, written once: statuses, priorities, ops, origins, identities.

Every module that spells a status, a priority or a run key imports it from here (the policy
values of schedules live in `tickwheel.schedule`, re-exported below). Values are `StrEnum`s, so
they compare equal to the strings stored in Postgres and carried in JSON.

A run's life (the `job_runs` row). The scheduler (shards/) owns the transitions marked L,
the workers (workers/) those marked W, operators (`tickwheel dlq replay`) the one marked O,
the registry (trigger and backfill requests) the one marked R:

    from        to          by  when
    (due)       pending     L   the fenced claim creates the row (attempt 1) with a publish lease
    (due)       skipped     L   misfire or overlap policy; `skip_reason` says which
    (due)       pending     L   overlap buffer_one: held WITHOUT a lease and not published; the
                                sweeper gives it a lease and publishes it once the job has no
                                other run in flight
    pending     pending     L   a publish the broker refused: published again at the next sweep;
                                a new leader's takeover: an earlier epoch's pending runs are
                                adopted and published again; the safety net: not started when
                                the publish lease (5 min) lapsed. Same attempt each time
    pending,    running     W   a worker's claim, WHERE attempt = the envelope's attempt (I4); it
    published                   records `published_at` from the delivery's record timestamp
    running     succeeded   W   the handler returned
    running     retrying    W   a retryable failure while attempt < max_attempts (`retry_at`)
    running     dead        W   PermanentError, or a failure with the attempts spent (then DLQ)
    running     pending     L   the worker's lease lapsed (it died): attempt + 1, re-published;
    running     dead        L   … or dead (and DLQ) when attempt = max_attempts
    retrying    pending     L   retry_at reached: re-claimed through the wheel, attempt + 1 (I6)
    dead        retrying    O   replay: due now, max_attempts = attempt + the fresh budget
    (request)   retrying    R   trigger / backfill (registry_api/on_demand.py): a new row with
                                attempt 0, origin trigger|backfill, retry_at = when it may go out
    retrying    skipped     L   … attempt 0 only: overlap `skip` while the job has a run in flight
    retrying    pending     L   … attempt 0 only: overlap `buffer_one`, held without a lease

- `published` is still a valid status, written by releases before issue 14 (the leader marked
  each acknowledged run, a second write of every run that docs/DECISIONS.md D-134 removed).
  A run now stays `pending` until a worker claims it, and its `published_at` is the instant
  the leader produced its envelope.
- `attempt` counts dispatches: the first dispatch is attempt 1. Every envelope carries the
  attempt it dispatches; a worker claims a run only `WHERE attempt = <envelope attempt> AND
  status IN ('pending', 'published')` (I4), and writes its result only `WHERE attempt =
  <claimed attempt> AND status = 'running'`, so a stale or duplicate delivery changes nothing.
- A `retrying` row at attempt 0 has never been dispatched (a trigger or backfill waiting for
  its `retry_at`): it does not occupy its job for the overlap policies until its first
  dispatch, which applies them as for a scheduled occurrence.
- Terminal: `succeeded`, `dead`, `skipped`. Only an operator's replay moves `dead` back to
  `retrying` (with a fresh attempt budget), under the same run key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Literal

from tickwheel.schedule import AfterEnd, DstGap, DstOverlap, MisfirePolicy, OverlapPolicy
from tickwheel.schedule.zones import MAX_INSTANT_S, MIN_INSTANT_S

__all__ = [
    "ATTEMPT_MAX",
    "CALENDAR_OPS",
    "INSTANT_MAX_MS",
    "INSTANT_MIN_MS",
    "IN_FLIGHT",
    "JOB_ID_FORM",
    "JOB_ID_PATTERN",
    "PRIORITIES",
    "TENANT_FORM",
    "TENANT_PATTERN",
    "TERMINAL",
    "AfterEnd",
    "DstGap",
    "DstOverlap",
    "JobKind",
    "JobStatus",
    "MisfirePolicy",
    "OverlapPolicy",
    "Priority",
    "RegistrationOp",
    "RunKeyError",
    "RunOrigin",
    "RunStatus",
    "job_key",
    "literal_of",
    "parse_run_key",
    "run_key",
]


class JobStatus(StrEnum):
    """`jobs.status`: the job state machine lives in registry_api/state.py."""

    ACTIVE = "active"
    PAUSED = "paused"
    COMPLETED = "completed"  # a one-off claimed, or a schedule whose window ended
    DELETED = "deleted"


class JobKind(StrEnum):
    CRON = "cron"
    ONCE = "once"


class RunStatus(StrEnum):
    """`job_runs.status`: the run lifecycle in this module's docstring."""

    PENDING = "pending"
    PUBLISHED = "published"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    RETRYING = "retrying"
    DEAD = "dead"
    SKIPPED = "skipped"


TERMINAL = frozenset({RunStatus.SUCCEEDED, RunStatus.DEAD, RunStatus.SKIPPED})
# A run that still occupies its job for the overlap policies.
IN_FLIGHT = frozenset(
    {RunStatus.PENDING, RunStatus.PUBLISHED, RunStatus.RUNNING, RunStatus.RETRYING}
)


class Priority(StrEnum):
    """A job's priority: which `runs.<priority>` topic its runs go to."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


PRIORITIES: tuple[str, ...] = tuple(p.value for p in Priority)


class RegistrationOp(StrEnum):
    """The `op` of a message on the registrations topic."""

    UPSERT = "upsert"
    DELETE = "delete"
    PAUSE = "pause"
    RESUME = "resume"
    TRIGGER = "trigger"  # one run now, outside the schedule (registry_api/on_demand.py)
    BACKFILL = "backfill"  # one run per occurrence of a past range
    # A tenant's exclusion calendars (registry_api/calendars.py, D-286): these name a calendar,
    # not a job, and never reach the jobs' fold (registry_api/state.py).
    PUT_CALENDAR = "put_calendar"
    DELETE_CALENDAR = "delete_calendar"


# The ops that change a calendar rather than a job.
CALENDAR_OPS = frozenset({RegistrationOp.PUT_CALENDAR, RegistrationOp.DELETE_CALENDAR})


class RunOrigin(StrEnum):
    """How a run came to be (`job_runs.origin`)."""

    SCHEDULE = "schedule"
    TRIGGER = "trigger"
    BACKFILL = "backfill"
    REPLAY = "replay"


class Quota(StrEnum):
    """A tenant's quota on registrations (`tenants.<name>`; registry_api/quotas.py)."""

    MAX_JOBS = "max_jobs"  # jobs registered at once
    MAX_REGISTRATIONS_PER_S = "max_registrations_per_s"  # registrations per second (+ burst)


def literal_of(members: Iterable[StrEnum]) -> Any:
    """`Literal["a", "b", …]` of these members' values, for pydantic models and FastAPI
    parameters: the OpenAPI schema and the error messages stay those of a literal (an enum
    type would become a `$ref` and refuse plain strings in strict models), while the values
    keep their one home in the enum. Type checkers see the alias as `str` (see its users)."""
    return Literal[tuple(member.value for member in members)]


# --- identities ----------------------------------------------------------------------------


class RunKeyError(ValueError):
    """A string that is not a run key."""


# The forms of a run's identity parts, as the database's CHECK constraints hold them
# (`tenants_name_form`, `jobs_id_form`): a tenant name and a job id. Anything a message names
# is checked against these before it reaches a statement, so a NUL or an endless string is
# refused while decoding, not by Postgres in the middle of a batch.
TENANT_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
JOB_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
TENANT_FORM = re.compile(TENANT_PATTERN)
JOB_ID_FORM = re.compile(JOB_ID_PATTERN)
# The instants a run can be scheduled at (UTC unix ms, [min, max)): those a schedule or a
# one-off instant can name (years 1900 to 8999).
INSTANT_MIN_MS = MIN_INSTANT_S * 1000
INSTANT_MAX_MS = MAX_INSTANT_S * 1000
ATTEMPT_MAX = 2**31 - 1  # `job_runs.attempt` is an integer (int32)

# At most 19 digits: a longer number is no instant a run can have (and Python's int() of
# thousands of digits is refused by the interpreter, not by this form).
_RUN_KEY_FORM = re.compile(r"^(?P<tenant>[^/@]+)/(?P<job_id>[^/@]+)@(?P<ms>-?\d{1,19})$")


def job_key(tenant: str, job_id: str) -> str:
    """`<tenant>/<job_id>`: a job's identity across tenants (hashing, sharding, wheel keys)."""
    return f"{tenant}/{job_id}"


def run_key(tenant: str, job_id: str, scheduled_ms: int) -> str:
    """`<tenant>/<job_id>@<unix_ms>`: the identity of one run everywhere (DESIGN §3)."""
    return f"{tenant}/{job_id}@{scheduled_ms}"


def parse_run_key(key: str) -> tuple[str, str, int]:
    """(tenant, job_id, scheduled unix ms) of a run key, or RunKeyError naming the form."""
    match = _RUN_KEY_FORM.match(key)
    if not match:
        raise RunKeyError(f"run_key must look like <tenant>/<job_id>@<unix_ms>, not {key!r}")
    return match["tenant"], match["job_id"], int(match["ms"])
