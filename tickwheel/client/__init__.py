"""`tickwheel.client`: the supported way for a Python service to talk to tickwheel (docs/CLIENT.md).

- `Client` / `AsyncClient`: the registry's HTTP API over the job document's own models —
  create, get, patch, pause, resume, delete, trigger, backfill, preview, and the job and run
  lists with their cursors followed for the caller; the tenant's exclusion calendars (put, get,
  list, delete); errors as exceptions (`errors.py`), retries only where a call is idempotent
  (`calls.py`).
- `Registrar`: registrations over Kafka (`<prefix>.registrations`), keyed by job id (a calendar's
  by `calendar/<name>`), signed with the tenant's key, versioned when asked, each one's outcome
  — applied, or rejected with the reason read back from `<prefix>.registrations.rejected` —
  reported to a callback.

Ground code: it imports the wire models (`tickwheel.wire`) and never the registry itself.
"""

from __future__ import annotations

from tickwheel.client.calls import NO_RETRIES, RetryPolicy
from tickwheel.client.errors import (
    CalendarInUse,
    Conflict,
    FieldError,
    InvalidRequest,
    NotFound,
    RateLimited,
    ServerError,
    TickwheelError,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from tickwheel.client.http import AsyncClient, Client
from tickwheel.client.registrar import Outcome, Registrar
from tickwheel.wire.calendar import Calendar, CalendarDocument, DailyRange
from tickwheel.wire.job import Backoff, Dst, JobDocument, Misfire, Target
from tickwheel.wire.responses import (
    BackfillAccepted,
    Job,
    JobPreview,
    Run,
    TriggerAccepted,
)

__all__ = [
    "NO_RETRIES",
    "AsyncClient",
    "BackfillAccepted",
    "Backoff",
    "Calendar",
    "CalendarDocument",
    "CalendarInUse",
    "Client",
    "Conflict",
    "DailyRange",
    "Dst",
    "FieldError",
    "InvalidRequest",
    "Job",
    "JobDocument",
    "JobPreview",
    "Misfire",
    "NotFound",
    "Outcome",
    "RateLimited",
    "Registrar",
    "RetryPolicy",
    "Run",
    "ServerError",
    "Target",
    "TickwheelError",
    "TooLarge",
    "TriggerAccepted",
    "Unauthorized",
    "Unavailable",
]
