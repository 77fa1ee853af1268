"""What a call of `tickwheel.client` raises: one exception per answer of the registry
(docs/API.md, *Errors*), each carrying the status, the `error` slug and the sentence; a 422
carries every field at fault."""

from __future__ import annotations

from tickwheel.wire.responses import FieldError

__all__ = [
    "CalendarInUse",
    "Conflict",
    "FieldError",
    "InvalidRequest",
    "NotFound",
    "RateLimited",
    "ServerError",
    "TickwheelError",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
]


class TickwheelError(Exception):
    """An answer other than success (or no answer at all: `Unavailable`)."""

    def __init__(self, status: int | None, error: str, detail: str) -> None:
        super().__init__(detail if status is None else f"{status} {error}: {detail}")
        self.status = status
        self.error = error  # the registry's slug: not_found, conflict, invalid_job, …
        self.detail = detail


class InvalidRequest(TickwheelError):
    """422: bad input. `fields` names every problem as a dotted path in the job document (or a
    parameter) with what is allowed; `""` is the body as a whole."""

    def __init__(self, error: str, fields: list[FieldError]) -> None:
        self.fields = fields
        detail = "; ".join(f"{f.field}: {f.message}" if f.field else f.message for f in fields)
        super().__init__(422, error, detail)


class Unauthorized(TickwheelError):
    """401: missing, malformed, unknown or revoked API key."""


class NotFound(TickwheelError):
    """404: this tenant has no such job or calendar (another tenant's answers the same)."""


class Conflict(TickwheelError):
    """409: the job's state does not allow it (a completed one-off), or a PATCH kept racing;
    a tenant's last calendar taken (`too_many_calendars`); `CalendarInUse`."""


class CalendarInUse(Conflict):
    """409 `calendar_in_use`: a calendar's delete refused while jobs name it. `jobs` are the
    first jobs found naming it (at most 100), `more_jobs` whether there are others; delete with
    `force=True` to delete it anyway (those jobs then run as if it excluded nothing)."""

    def __init__(self, detail: str, jobs: list[str], more_jobs: bool) -> None:
        super().__init__(409, "calendar_in_use", detail)
        self.jobs = jobs
        self.more_jobs = more_jobs


class TooLarge(TickwheelError):
    """413: the request body is larger than the registry accepts."""


class RateLimited(TickwheelError):
    """429 whose Retry-After the client would not wait for (longer than its policy allows, or
    the attempts are spent); `retry_after_s` is what the registry asked for, `quota` the
    tenant's quota that refused the request (`max_jobs`, `max_registrations_per_s`)."""

    def __init__(
        self, error: str, detail: str, retry_after_s: float | None, quota: str | None = None
    ) -> None:
        super().__init__(429, error, detail)
        self.retry_after_s = retry_after_s
        self.quota = quota


class Unavailable(TickwheelError):
    """503, or no answer (connection refused, timed out), after the retries the call allows."""


class ServerError(TickwheelError):
    """Any other 5xx: a bug in tickwheel (docs/API.md asks for a report with the request)."""
