"""`Client` and `AsyncClient`: the registry's HTTP API (docs/API.md) over its own typed models.

Both speak through `httpx` and share everything but the sending: `_Requests` says what each
method sends and what its answer becomes (`calls.py` decides retries), `Client` sends it
blocking, `AsyncClient` awaiting. Lists come back as iterators that follow the cursors, so a
caller sees every job or run once without handling pages.

    with Client("http://127.0.0.1:8080", api_key) as tw:
        tw.create(JobDocument(id="nightly", schedule="0 3 * * *", handler="reports.build"))
        for run in tw.runs("nightly"):
            ...
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from tickwheel.client.calls import (
    MERGE_PATCH,
    Call,
    Retry,
    RetryPolicy,
    decide_answer,
    decide_failure,
    lenient,
    nothing,
)
from tickwheel.clock import datetime_to_ms, format_ms
from tickwheel.wire.calendar import Calendar, CalendarDocument, CalendarPage
from tickwheel.wire.job import JobDocument
from tickwheel.wire.responses import (
    BackfillAccepted,
    Job,
    JobPage,
    JobPreview,
    Run,
    RunPage,
    TriggerAccepted,
)

__all__ = ["DEFAULT_TIMEOUT_S", "AsyncClient", "Client"]

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 10.0  # seconds per request
PAGE_SIZE = 100  # items per page the iterators ask for (the registry allows 1..500)
_SENT_BEFORE_FAILING = (httpx.ReadTimeout, httpx.WriteTimeout, httpx.RemoteProtocolError)


def _instant(value: str | datetime) -> str:
    return value if isinstance(value, str) else format_ms(datetime_to_ms(value))


def _job_path(job_id: str, tail: str = "") -> str:
    return f"/v1/jobs/{quote(job_id, safe='')}{tail}"


def _calendar_path(name: str) -> str:
    return f"/v1/calendars/{quote(name, safe='')}"


def _document(job: JobDocument | CalendarDocument | Mapping[str, Any]) -> Any:
    # Only what the caller set: the registry fills in the defaults, and compares with them.
    if isinstance(job, JobDocument | CalendarDocument):
        return job.model_dump(mode="json", exclude_unset=True)
    return dict(job)


def _calendar_items(page: CalendarPage) -> list[Calendar]:
    return page.items


class _Requests:
    """What each method of the clients sends, and what its answer becomes."""

    def _create(self, job: JobDocument | Mapping[str, Any]) -> Call:
        return Call("POST", "/v1/jobs", True, lenient(Job), json=_document(job))

    def _get(self, job_id: str) -> Call:
        return Call("GET", _job_path(job_id), True, lenient(Job))

    def _patch(self, job_id: str, changes: Mapping[str, Any]) -> Call:
        return Call(
            "PATCH",
            _job_path(job_id),
            True,
            lenient(Job),
            json=dict(changes),
            content_type=MERGE_PATCH,
        )

    def _delete(self, job_id: str) -> Call:
        return Call("DELETE", _job_path(job_id), True, nothing, not_found_on_retry_is_done=True)

    def _pause(self, job_id: str) -> Call:
        return Call("POST", _job_path(job_id, "/pause"), True, lenient(Job))

    def _resume(self, job_id: str) -> Call:
        return Call("POST", _job_path(job_id, "/resume"), True, lenient(Job))

    def _trigger(self, job_id: str, idempotency_key: str | None) -> Call:
        headers = None if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        return Call(
            "POST",
            _job_path(job_id, "/trigger"),
            idempotency_key is not None,
            lenient(TriggerAccepted),
            headers=headers,
        )

    def _backfill(self, job_id: str, start: str | datetime, end: str | datetime) -> Call:
        body = {"from": _instant(start), "to": _instant(end)}
        return Call(
            "POST", _job_path(job_id, "/backfill"), True, lenient(BackfillAccepted), json=body
        )

    def _preview(self, job_id: str, count: int) -> Call:
        return Call(
            "GET", _job_path(job_id, "/preview"), True, lenient(JobPreview), params={"count": count}
        )

    def _put_calendar(self, name: str, calendar: CalendarDocument | Mapping[str, Any]) -> Call:
        return Call("PUT", _calendar_path(name), True, lenient(Calendar), json=_document(calendar))

    def _get_calendar(self, name: str) -> Call:
        return Call("GET", _calendar_path(name), True, lenient(Calendar))

    def _calendars(self) -> Call:
        parse = lenient(CalendarPage)
        return Call("GET", "/v1/calendars", True, lambda body: _calendar_items(parse(body)))

    def _delete_calendar(self, name: str, force: bool) -> Call:
        return Call(
            "DELETE",
            _calendar_path(name),
            True,
            nothing,
            params={"force": "true"} if force else None,
            not_found_on_retry_is_done=True,
        )

    def _job_page(
        self,
        cursor: str | None,
        limit: int,
        status: str | None,
        priority: str | None,
        kind: str | None,
    ) -> Call:
        params: dict[str, str | int] = {"limit": limit}
        for name, value in (
            ("cursor", cursor),
            ("status", status),
            ("priority", priority),
            ("kind", kind),
        ):
            if value is not None:
                params[name] = value
        return Call("GET", "/v1/jobs", True, lenient(JobPage), params=params)

    def _run_page(self, job_id: str, cursor: str | None, limit: int) -> Call:
        params: dict[str, str | int] = {"limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        return Call("GET", _job_path(job_id, "/runs"), True, lenient(RunPage), params=params)


def _headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}


def _request(client: httpx.Client | httpx.AsyncClient, call: Call) -> httpx.Request:
    headers = dict(call.headers or {})
    if call.content_type is not None:
        headers["Content-Type"] = call.content_type
    return client.build_request(
        call.method, call.path, json=call.json, params=call.params, headers=headers
    )


def _settle(
    call: Call, policy: RetryPolicy, attempt: int, got: httpx.Response | httpx.TransportError
) -> Any:
    """Try `attempt`'s answer (or failure) as the call's result, a `Retry`, or an exception."""
    if isinstance(got, httpx.TransportError):
        # A refused or unmade connection sent nothing; a timeout after sending may have run.
        sent = isinstance(got, _SENT_BEFORE_FAILING)
        return decide_failure(call, policy, attempt, got, sent)
    retry_after = got.headers.get("Retry-After")
    return decide_answer(call, policy, attempt, got.status_code, got.content, retry_after)


class Client(_Requests):
    """The registry's HTTP API for one tenant (the tenant of `api_key`), blocking.

    Each method raises a `tickwheel.client.errors` exception for an answer other than success;
    retries follow `retry` (`calls.py` says which calls are retried on what). `transport` is
    httpx's (tests pass one). Use it as a context manager, or call `close()`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.Client(
            base_url=base_url, headers=_headers(api_key), timeout=timeout_s, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _run(self, call: Call) -> Any:
        attempt = 0
        while True:
            attempt += 1
            try:
                answer = self._http.send(_request(self._http, call))
                outcome = _settle(call, self.retry, attempt, answer)
            except httpx.TransportError as exc:
                outcome = _settle(call, self.retry, attempt, exc)
            if not isinstance(outcome, Retry):
                return outcome
            time.sleep(outcome.delay_s)

    def create(self, job: JobDocument | Mapping[str, Any]) -> Job:
        """Create or replace a job (`POST /v1/jobs`): the same document again changes nothing."""
        result: Job = self._run(self._create(job))
        return result

    def get(self, job_id: str) -> Job:
        result: Job = self._run(self._get(job_id))
        return result

    def patch(self, job_id: str, changes: Mapping[str, Any]) -> Job:
        """Change a job with a JSON merge patch: keys merge, `None` restores a default."""
        result: Job = self._run(self._patch(job_id, changes))
        return result

    def delete(self, job_id: str) -> None:
        self._run(self._delete(job_id))

    def pause(self, job_id: str) -> Job:
        result: Job = self._run(self._pause(job_id))
        return result

    def resume(self, job_id: str) -> Job:
        result: Job = self._run(self._resume(job_id))
        return result

    def trigger(self, job_id: str, idempotency_key: str | None = None) -> TriggerAccepted:
        """One run now. With `idempotency_key`, the same key within 24 h starts nothing new
        (and only then is the call retried on a 5xx or a timeout)."""
        result: TriggerAccepted = self._run(self._trigger(job_id, idempotency_key))
        return result

    def backfill(self, job_id: str, start: str | datetime, end: str | datetime) -> BackfillAccepted:
        """One run per past occurrence in [start, end) that has none (aware datetimes or
        ISO-8601 instants with an offset)."""
        result: BackfillAccepted = self._run(self._backfill(job_id, start, end))
        return result

    def preview(self, job_id: str, count: int = 5) -> JobPreview:
        """The job's next `count` occurrences, each with the rule that put it there."""
        result: JobPreview = self._run(self._preview(job_id, count))
        return result

    def put_calendar(self, name: str, calendar: CalendarDocument | Mapping[str, Any]) -> Calendar:
        """Create or replace the tenant's calendar `name`: the same document again changes
        nothing (its version stays)."""
        result: Calendar = self._run(self._put_calendar(name, calendar))
        return result

    def get_calendar(self, name: str) -> Calendar:
        result: Calendar = self._run(self._get_calendar(name))
        return result

    def calendars(self) -> list[Calendar]:
        """Every calendar of the tenant, by name (at most 100: one answer)."""
        result: list[Calendar] = self._run(self._calendars())
        return result

    def delete_calendar(self, name: str, *, force: bool = False) -> None:
        """Delete a calendar; `CalendarInUse` (with the jobs) while jobs name it, unless
        `force` (they then run as if it excluded nothing)."""
        self._run(self._delete_calendar(name, force))

    def jobs(
        self,
        *,
        status: str | None = None,
        priority: str | None = None,
        kind: str | None = None,
        page_size: int = PAGE_SIZE,
    ) -> Iterator[Job]:
        """Every job of the tenant (by id), fetched a page at a time as the caller iterates."""
        cursor: str | None = None
        while True:
            page: JobPage = self._run(self._job_page(cursor, page_size, status, priority, kind))
            yield from page.items
            if page.next is None:
                return
            cursor = page.next

    def runs(self, job_id: str, *, page_size: int = PAGE_SIZE) -> Iterator[Run]:
        """The job's runs, newest first, fetched a page at a time as the caller iterates."""
        cursor: str | None = None
        while True:
            page: RunPage = self._run(self._run_page(job_id, cursor, page_size))
            yield from page.items
            if page.next is None:
                return
            cursor = page.next


class AsyncClient(_Requests):
    """`Client` for asyncio code: the same methods, awaited; the lists are async iterators."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(api_key), timeout=timeout_s, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _run(self, call: Call) -> Any:
        attempt = 0
        while True:
            attempt += 1
            try:
                answer = await self._http.send(_request(self._http, call))
                outcome = _settle(call, self.retry, attempt, answer)
            except httpx.TransportError as exc:
                outcome = _settle(call, self.retry, attempt, exc)
            if not isinstance(outcome, Retry):
                return outcome
            await asyncio.sleep(outcome.delay_s)

    async def create(self, job: JobDocument | Mapping[str, Any]) -> Job:
        """Create or replace a job (`POST /v1/jobs`): the same document again changes nothing."""
        result: Job = await self._run(self._create(job))
        return result

    async def get(self, job_id: str) -> Job:
        result: Job = await self._run(self._get(job_id))
        return result

    async def patch(self, job_id: str, changes: Mapping[str, Any]) -> Job:
        """Change a job with a JSON merge patch: keys merge, `None` restores a default."""
        result: Job = await self._run(self._patch(job_id, changes))
        return result

    async def delete(self, job_id: str) -> None:
        await self._run(self._delete(job_id))

    async def pause(self, job_id: str) -> Job:
        result: Job = await self._run(self._pause(job_id))
        return result

    async def resume(self, job_id: str) -> Job:
        result: Job = await self._run(self._resume(job_id))
        return result

    async def trigger(self, job_id: str, idempotency_key: str | None = None) -> TriggerAccepted:
        """One run now; see `Client.trigger`."""
        result: TriggerAccepted = await self._run(self._trigger(job_id, idempotency_key))
        return result

    async def backfill(
        self, job_id: str, start: str | datetime, end: str | datetime
    ) -> BackfillAccepted:
        """One run per past occurrence in [start, end) that has none."""
        result: BackfillAccepted = await self._run(self._backfill(job_id, start, end))
        return result

    async def preview(self, job_id: str, count: int = 5) -> JobPreview:
        result: JobPreview = await self._run(self._preview(job_id, count))
        return result

    async def put_calendar(
        self, name: str, calendar: CalendarDocument | Mapping[str, Any]
    ) -> Calendar:
        """Create or replace a calendar; see `Client.put_calendar`."""
        result: Calendar = await self._run(self._put_calendar(name, calendar))
        return result

    async def get_calendar(self, name: str) -> Calendar:
        result: Calendar = await self._run(self._get_calendar(name))
        return result

    async def calendars(self) -> list[Calendar]:
        """Every calendar of the tenant, by name."""
        result: list[Calendar] = await self._run(self._calendars())
        return result

    async def delete_calendar(self, name: str, *, force: bool = False) -> None:
        """Delete a calendar; see `Client.delete_calendar`."""
        await self._run(self._delete_calendar(name, force))

    async def jobs(
        self,
        *,
        status: str | None = None,
        priority: str | None = None,
        kind: str | None = None,
        page_size: int = PAGE_SIZE,
    ) -> AsyncIterator[Job]:
        """Every job of the tenant (by id), a page at a time as the caller iterates."""
        cursor: str | None = None
        while True:
            call = self._job_page(cursor, page_size, status, priority, kind)
            page: JobPage = await self._run(call)
            for job in page.items:
                yield job
            if page.next is None:
                return
            cursor = page.next

    async def runs(self, job_id: str, *, page_size: int = PAGE_SIZE) -> AsyncIterator[Run]:
        """The job's runs, newest first, a page at a time as the caller iterates."""
        cursor: str | None = None
        while True:
            page: RunPage = await self._run(self._run_page(job_id, cursor, page_size))
            for run in page.items:
                yield run
            if page.next is None:
                return
            cursor = page.next
