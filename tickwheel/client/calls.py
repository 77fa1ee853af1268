"""The client's calls without I/O: what each request is, whether it may be repeated, what an
answer becomes, and when to try again. The sync and the async client (`http.py`) only send.

Retries, per call (`Call.idempotent`):

    answer                    idempotent call              other calls
    2xx                       the result                   the result
    429 with Retry-After      wait, retry                  wait, retry (refused before it ran)
    503, other 5xx, timeout   back off, retry              raise (it may have been applied)
    no connection made        back off, retry              back off, retry (nothing was sent)
    other 4xx                 raise                        raise

Idempotent: every GET; POST /v1/jobs (the id is the identity: the same document again changes
nothing); PUT /v1/calendars/{name} (likewise, the name); PATCH (a JSON merge patch applied twice
gives what it gave once); DELETE of a job or a calendar (a retry that finds it gone answers as
the delete did); pause and resume; a backfill (its runs are keyed by their occurrences: a
repeat creates none, and says so); a trigger with an idempotency key.
Not idempotent: a trigger without one (each request starts a run).

Back-off is full jitter: a random wait up to `base_s * 2^(attempt-1)`, capped at `cap_s`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel

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

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a call is tried again (see the module's table)."""

    attempts: int = 5  # tries in all, the first included
    base_s: float = 0.2  # seconds: the first back-off's upper bound
    cap_s: float = 5.0  # seconds: no back-off waits longer
    max_retry_after_s: float = 60.0  # seconds: a longer Retry-After raises RateLimited at once
    jitter: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def backoff_s(self, attempt: int) -> float:
        """The wait before try `attempt + 1`, after `attempt` tries failed."""
        bound: float = min(self.cap_s, self.base_s * 2.0 ** (attempt - 1))
        return self.jitter() * bound


NO_RETRIES = RetryPolicy(attempts=1)


@dataclass(frozen=True)
class Call:
    """One request: what to send, and what a 2xx answer becomes (`parse` of its JSON body)."""

    method: str
    path: str
    idempotent: bool
    parse: Callable[[Any], Any]
    json: Any = None
    params: Mapping[str, str | int] | None = None
    headers: Mapping[str, str] | None = None
    content_type: str | None = None
    # A retried DELETE that finds the job gone: the first try did the work.
    not_found_on_retry_is_done: bool = False


@dataclass(frozen=True)
class Retry:
    """Try again after `delay_s` seconds."""

    delay_s: float


def _body(content: bytes) -> Any:
    try:
        return orjson.loads(content) if content else None
    except orjson.JSONDecodeError:
        return None


def error_of(status: int, content: bytes) -> TickwheelError:
    """The exception an answer other than 2xx stands for (its body is the registry's shape)."""
    body = _body(content)
    slug = body.get("error") if isinstance(body, dict) else None
    detail = body.get("detail") if isinstance(body, dict) else None
    error = slug if isinstance(slug, str) else f"http_{status}"
    if status == 422 and isinstance(detail, list):
        fields = [FieldError.model_validate(item) for item in detail if isinstance(item, dict)]
        return InvalidRequest(error, fields)
    sentence = detail if isinstance(detail, str) else content[:200].decode("utf-8", "replace")
    if status == 409 and error == "calendar_in_use" and isinstance(body, dict):
        jobs = body.get("jobs")
        named = [j for j in jobs if isinstance(j, str)] if isinstance(jobs, list) else []
        return CalendarInUse(sentence, named, body.get("more_jobs") is True)
    kind: type[TickwheelError] = {
        401: Unauthorized,
        404: NotFound,
        409: Conflict,
        413: TooLarge,
        503: Unavailable,
    }.get(status, ServerError if status >= 500 else TickwheelError)
    return kind(status, error, sentence)


def retry_after_s(value: str | None) -> float | None:
    """Seconds of a Retry-After header given in seconds (the registry's form); None otherwise."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def decide_answer(
    call: Call,
    policy: RetryPolicy,
    attempt: int,
    status: int,
    content: bytes,
    retry_after: str | None,
) -> Any:
    """After try `attempt` (1 the first) got `status`: the result, a `Retry`, or raise."""
    if 200 <= status < 300:
        return call.parse(_body(content))
    if status == 404 and attempt > 1 and call.not_found_on_retry_is_done:
        return call.parse(None)
    error = error_of(status, content)
    more = attempt < policy.attempts
    if status == 429:
        wait = retry_after_s(retry_after)
        if more and wait is not None and wait <= policy.max_retry_after_s:
            return Retry(wait)
        body = _body(content)
        quota = body.get("quota") if isinstance(body, dict) else None
        quota = quota if isinstance(quota, str) else None
        raise RateLimited(error.error, error.detail, wait, quota) from None
    if status >= 500 and call.idempotent and more:
        return Retry(policy.backoff_s(attempt))
    raise error


def decide_failure(
    call: Call, policy: RetryPolicy, attempt: int, exc: Exception, sent: bool
) -> Retry:
    """After try `attempt` got no answer: a `Retry`, or raise `Unavailable`. `sent`: the
    request may have reached the server (not a refused or unmade connection)."""
    if attempt < policy.attempts and (call.idempotent or not sent):
        return Retry(policy.backoff_s(attempt))
    raise Unavailable(None, "unavailable", f"no answer from the registry: {exc}") from exc


# --- what 2xx bodies become -------------------------------------------------------------------


def lenient(model: type[M]) -> Callable[[Any], M]:
    """`model` from a JSON body, ignoring top-level fields this version does not know: a
    registry newer than its clients may answer with more."""

    def parse(body: Any) -> M:
        known = {k: v for k, v in body.items() if k in model.model_fields}
        return model.model_validate(known)

    return parse


def nothing(_: Any) -> None:
    return None
