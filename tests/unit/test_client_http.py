"""`tickwheel.client.Client` / `AsyncClient` against scripted answers (httpx's MockTransport):
which calls are retried on what, Retry-After, errors as exceptions with their fields, and lists
that follow the cursors. (Against the real registry: tests/integration/test_client.py.)"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tickwheel.client import (
    AsyncClient,
    CalendarDocument,
    CalendarInUse,
    Client,
    Conflict,
    InvalidRequest,
    JobDocument,
    NotFound,
    RateLimited,
    RetryPolicy,
    Unavailable,
)
from tickwheel.client.calls import Call, decide_failure, lenient
from tickwheel.wire.responses import Job

pytestmark = pytest.mark.unit

NO_WAIT = RetryPolicy(attempts=4, jitter=lambda: 0.0)
JOB = {
    "id": "nightly",
    "schedule": "0 3 * * *",
    "at": None,
    "timezone": "UTC",
    "handler": "reports.build",
    "target": None,
    "payload": {},
    "priority": "normal",
    "max_attempts": 5,
    "backoff": {"base_ms": 10000, "cap_ms": 600000},
    "timeout_ms": 300000,
    "misfire": {"policy": "run_once", "grace_ms": 60000, "max_catchup": 10},
    "overlap": "allow",
    "dst": {"gap": "shift", "overlap": "first"},
    "next_run_at": "2026-12-02T03:00:00.000Z",
    "status": "active",
    "version": 1,
    "created_at": "2026-12-01T10:00:00.000Z",
    "updated_at": "2026-12-01T10:00:00.000Z",
}
Answer = httpx.Response | Exception


class Script:
    """Answers the requests in order, and remembers them."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def ok(body: Any, status: int = 200, **headers: str) -> httpx.Response:
    return httpx.Response(status, content=orjson.dumps(body), headers=headers)


def error(status: int, slug: str, detail: Any = "no", **headers: str) -> httpx.Response:
    return ok({"error": slug, "detail": detail}, status, **headers)


def client(script: Script, policy: RetryPolicy = NO_WAIT) -> Client:
    return Client(
        "http://registry.test", "tw_key", retry=policy, transport=httpx.MockTransport(script)
    )


def test_a_job_document_is_sent_as_given_and_the_answer_typed() -> None:
    """create sends the fields the caller set (the registry fills in the rest) with the bearer
    key, and returns the stored job as a `Job`."""
    script = Script(ok(JOB, 201))
    job = client(script).create(
        JobDocument(id="nightly", schedule="0 3 * * *", handler="reports.build")
    )
    assert isinstance(job, Job) and job.next_run_at == "2026-12-02T03:00:00.000Z"
    [sent] = script.requests
    assert (sent.method, sent.url.path) == ("POST", "/v1/jobs")
    assert sent.headers["Authorization"] == "Bearer tw_key"
    assert orjson.loads(sent.content) == {
        "id": "nightly",
        "schedule": "0 3 * * *",
        "handler": "reports.build",
    }


def test_fields_a_newer_registry_adds_are_ignored() -> None:
    """An answer with a top-level field this version does not know still parses."""
    assert client(Script(ok({**JOB, "shard": 7}))).get("nightly").id == "nightly"


def test_an_idempotent_call_is_retried_on_503_and_5xx_and_timeouts() -> None:
    """GET after a 503, a 500 and a read timeout: four tries, the fourth's answer."""
    script = Script(
        error(503, "unavailable"),
        error(500, "error"),
        httpx.ReadTimeout("slow"),
        ok(JOB),
    )
    assert client(script).get("nightly").version == 1
    assert len(script.requests) == 4


def test_the_attempts_are_bounded() -> None:
    """An idempotent call that keeps failing raises Unavailable after `attempts` tries."""
    script = Script(*[error(503, "unavailable")] * 4)
    with pytest.raises(Unavailable):
        client(script).pause("nightly")
    assert len(script.requests) == 4


def test_a_trigger_without_a_key_is_not_retried_once_sent() -> None:
    """Each keyless trigger starts a run: a 503 or a read timeout after sending raises at
    once; a trigger with an idempotency key is retried and sends the same key."""
    for failure in (error(503, "unavailable"), httpx.ReadTimeout("slow")):
        script = Script(failure)
        with pytest.raises(Unavailable):
            client(script).trigger("nightly")
        assert len(script.requests) == 1
    keyed = Script(error(503, "unavailable"), ok({"run_key": "acme/nightly@5"}, 202))
    assert client(keyed).trigger("nightly", idempotency_key="k1").run_key == "acme/nightly@5"
    assert [r.headers["Idempotency-Key"] for r in keyed.requests] == ["k1", "k1"]


def test_any_call_is_retried_when_no_connection_was_made() -> None:
    """A refused connection sent nothing: even a keyless trigger tries again."""
    script = Script(httpx.ConnectError("refused"), ok({"run_key": "acme/nightly@5"}, 202))
    assert client(script).trigger("nightly").run_key == "acme/nightly@5"


def test_retry_after_is_honoured_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 429 waits the Retry-After it names (any call: the registry refused it unread) and
    tries again; one longer than the policy's bound raises RateLimited carrying it."""
    waits: list[float] = []
    monkeypatch.setattr("tickwheel.client.http.time.sleep", waits.append)
    policy = RetryPolicy(attempts=3, jitter=lambda: 0.0, max_retry_after_s=10)
    script = Script(
        error(429, "too_many_requests", **{"Retry-After": "2"}),
        ok({"run_key": "acme/nightly@5"}, 202),
    )
    assert client(script, policy).trigger("nightly").run_key == "acme/nightly@5"
    assert waits == [2.0]
    too_long = Script(error(429, "too_many_requests", **{"Retry-After": "30"}))
    with pytest.raises(RateLimited) as raised:
        client(too_long, policy).get("x")
    assert raised.value.retry_after_s == 30
    assert len(too_long.requests) == 1


def test_a_job_quota_refusal_is_reported_at_once_naming_the_quota() -> None:
    """The registry's 429 for max_jobs (Retry-After 300, above the wait bound) raises
    RateLimited at once, carrying the quota the body names; nothing is sent twice."""
    body = {
        "error": "quota_exceeded",
        "quota": "max_jobs",
        "detail": "quota max_jobs exceeded: …",
        "retry_after_s": 300,
    }
    script = Script(ok(body, 429, **{"Retry-After": "300"}))
    with pytest.raises(RateLimited) as raised:
        client(script, RetryPolicy(attempts=3, jitter=lambda: 0.0)).pause("nightly")
    assert raised.value.quota == "max_jobs"
    assert raised.value.retry_after_s == 300
    assert len(script.requests) == 1


def test_a_422_carries_every_field_at_fault() -> None:
    """InvalidRequest has the slug and each field with its message; it is never retried."""
    detail = [
        {"field": "priority", "message": "Input should be 'high', 'normal' or 'low'"},
        {"field": "colour", "message": "is not a field of the job document"},
    ]
    script = Script(error(422, "invalid_job", detail))
    with pytest.raises(InvalidRequest) as raised:
        client(script).create({"id": "x", "priority": "urgent", "colour": "blue"})
    assert raised.value.error == "invalid_job"
    assert [(f.field, f.message) for f in raised.value.fields] == [
        (d["field"], d["message"]) for d in detail
    ]
    assert "priority: Input should be" in str(raised.value)
    assert len(script.requests) == 1


def test_a_retried_delete_that_finds_the_job_gone_is_done() -> None:
    """DELETE whose first answer was lost (503) and whose retry is a 404: deleted; a 404 on the
    first try is NotFound."""
    client(Script(error(503, "unavailable"), error(404, "not_found"))).delete("nightly")
    with pytest.raises(NotFound):
        client(Script(error(404, "not_found", "there is no job with id 'x'"))).delete("x")


CALENDAR = {
    "name": "holidays",
    "timezone": "Europe/Berlin",
    "dates": ["2026-12-25"],
    "weekdays": [],
    "daily": [],
    "cron": [],
    "version": 1,
    "updated_at": "2026-12-01T10:00:00.000Z",
}


def test_a_calendar_is_put_as_given_and_retried_as_idempotent() -> None:
    """PUT /v1/calendars/{name} sends only what the caller set, is retried on a 503 (the same
    document again changes nothing), and answers a typed Calendar"""
    script = Script(error(503, "unavailable"), ok(CALENDAR, 201))
    doc = CalendarDocument(timezone="Europe/Berlin", dates=["2026-12-25"])
    stored = client(script).put_calendar("holidays", doc)
    assert stored.version == 1 and stored.dates == ["2026-12-25"]
    assert [(r.method, r.url.path) for r in script.requests] == [
        ("PUT", "/v1/calendars/holidays")
    ] * 2
    assert orjson.loads(script.requests[0].content) == {
        "timezone": "Europe/Berlin", "dates": ["2026-12-25"]
    }  # fmt: skip


def test_the_calendars_are_listed_and_read() -> None:
    """GET /v1/calendars answers a list of Calendar, GET /v1/calendars/{name} one"""
    script = Script(ok({"items": [CALENDAR]}), ok(CALENDAR))
    tw = client(script)
    assert [c.name for c in tw.calendars()] == ["holidays"]
    assert tw.get_calendar("holidays").timezone == "Europe/Berlin"
    assert [r.url.path for r in script.requests] == ["/v1/calendars", "/v1/calendars/holidays"]


def test_a_calendar_in_use_is_an_exception_carrying_the_jobs() -> None:
    """a 409 calendar_in_use is CalendarInUse (a Conflict) with the jobs and more_jobs, and is
    not retried; force=true is a query parameter; a retried delete finding it gone is done"""
    refused = ok(
        {"error": "calendar_in_use", "detail": "jobs still name this calendar: 'a'",
         "jobs": ["a", "b"], "more_jobs": True},
        409,
    )  # fmt: skip
    script = Script(refused)
    with pytest.raises(CalendarInUse) as in_use:
        client(script).delete_calendar("holidays")
    assert isinstance(in_use.value, Conflict) and in_use.value.status == 409
    assert (in_use.value.jobs, in_use.value.more_jobs) == (["a", "b"], True)
    assert len(script.requests) == 1
    forced = Script(error(503, "unavailable"), error(404, "not_found"))
    client(forced).delete_calendar("holidays", force=True)
    assert [r.url.params.get("force") for r in forced.requests] == ["true", "true"]
    with pytest.raises(NotFound):
        client(Script(error(404, "not_found"))).delete_calendar("ghost")


def test_the_lists_follow_the_cursors() -> None:
    """jobs() yields every item of every page, passing each page's `next` as the cursor."""
    second = {**JOB, "id": "second"}
    script = Script(
        ok({"items": [JOB], "next": "c1"}),
        ok({"items": [second], "next": None}),
    )
    assert [j.id for j in client(script).jobs(status="active", page_size=1)] == [
        "nightly",
        "second",
    ]
    first, then = script.requests
    assert dict(first.url.params) == {"limit": "1", "status": "active"}
    assert dict(then.url.params) == {"limit": "1", "cursor": "c1", "status": "active"}


def test_patch_is_a_merge_patch() -> None:
    """patch sends the changes as application/merge-patch+json to the job's path."""
    script = Script(ok(JOB))
    client(script).patch("a/b", {"priority": None})
    [sent] = script.requests
    assert sent.headers["Content-Type"] == "application/merge-patch+json"
    assert sent.url.raw_path == b"/v1/jobs/a%2Fb"
    assert orjson.loads(sent.content) == {"priority": None}


async def test_the_async_client_retries_and_iterates_alike() -> None:
    """AsyncClient: the same retry decisions (503 then success) and cursor-following lists."""
    script = Script(
        error(503, "unavailable"),
        ok({"items": [JOB], "next": "c1"}),
        ok({"items": [], "next": None}),
        error(503, "unavailable"),
    )
    async with AsyncClient(
        "http://registry.test", "tw_key", retry=NO_WAIT, transport=httpx.MockTransport(script)
    ) as tw:
        assert [j.id async for j in tw.jobs()] == ["nightly"]
        with pytest.raises(Unavailable):
            await tw.trigger("nightly")
    assert len(script.requests) == 4


@pytest.mark.parametrize(
    ("idempotent", "sent", "retried"),
    [(True, True, True), (True, False, True), (False, False, True), (False, True, False)],
)
def test_a_failure_is_retried_only_if_safe(idempotent: bool, sent: bool, retried: bool) -> None:
    """No answer: retried when the call is idempotent or nothing was sent, else Unavailable."""
    call = Call("POST", "/x", idempotent, lenient(Job))
    if retried:
        assert decide_failure(call, NO_WAIT, 1, OSError("x"), sent).delay_s == 0.0
    else:
        with pytest.raises(Unavailable):
            decide_failure(call, NO_WAIT, 1, OSError("x"), sent)
