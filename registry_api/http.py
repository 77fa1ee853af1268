"""The registry's HTTP API (DESIGN §7; user contract in docs/API.md): `create_app(store, limits)`.

Every job endpoint is scoped to the tenant of the request's bearer key: another tenant's job is
indistinguishable from a job that does not exist (404 either way). Writes go through the same
`validate_job` and `RegistryStore.apply` as the Kafka intake, one transaction per request.

Error bodies have two shapes, both with an `error` slug:
  422 (any bad input):  {"error": "invalid_job" | "invalid_request",
                         "detail": [{"field": "backoff.cap_ms", "message": "…"}, …]}
  401/404/409/413/503:  {"error": "not_found", "detail": "one sentence"}
`field` is a dotted path in the job document (or the name of a query parameter); "" means the
body as a whole.

Instants in responses are ISO-8601 UTC with milliseconds and `Z` (`2026-12-01T09:00:00.000Z`).
List cursors are opaque: unpadded base64url of a tagged position (`j:<last id>` for jobs,
`r:<scheduled_at ms of the last run>` for runs), so a cursor of one list is refused by the other.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal
from urllib.parse import quote

import asyncpg
import orjson
from fastapi import Body, Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tickwheel.queries import QUERIES
from tickwheel.registry_api.auth import AuthProblem, KeyCache, authenticate
from tickwheel.registry_api.body import authenticated_first
from tickwheel.registry_api.document import (
    JOB_ID_PATTERN,
    VERSION_MAX,
    Backoff,
    Dst,
    FieldProblem,
    JobDocument,
    JobValidationError,
    Limits,
    Misfire,
    Target,
    ms_to_datetime,
    parse_document,
    storable_problems,
    validate_job,
)
from tickwheel.registry_api.state import Op, Outcome
from tickwheel.registry_api.store import PAGE_LIMIT_MAX, JobView, RegistryStore, RunView, now_ms
from tickwheel.runtime import PartState
from tickwheel.schedule.cron import MAX_AFTER_MS, MIN_AFTER_MS

log = logging.getLogger(__name__)

PAGE_LIMIT_DEFAULT = 100
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
PATCH_RETRIES = 5  # read-merge-write rounds before a PATCH gives up on a busy job
HEALTH_TIMEOUT_S = 2.0  # seconds /healthz waits for the database
# A body may be twice the payload limit (pretty-printed JSON) plus room for the other fields.
BODY_OVERHEAD_BYTES = 64 * 1024
BODY_MIN_BYTES = 1 << 20  # bytes; the body limit never drops below this
CURSOR_MAX_CHARS = 400

_JOB_ID = re.compile(JOB_ID_PATTERN)
_CURSOR_TEXT = re.compile(r"^[A-Za-z0-9_-]+$")
_FIELD_ORDER = tuple(JobDocument.model_fields)
_NESTED_ORDER = {
    name: tuple(model.model_fields)
    for name, model in (
        ("backoff", Backoff),
        ("misfire", Misfire),
        ("dst", Dst),
        ("target", Target),
    )
}
_DB_UNAVAILABLE = (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError)

# --- response models: what the OpenAPI schema promises ----------------------------------------

JobStatus = Literal["active", "paused", "completed"]


class Job(JobDocument):
    """A stored job: the document with every default filled in, plus the registry's fields."""

    next_run_at: str | None = Field(
        ..., description="next scheduled instant, ISO-8601 UTC; null when nothing is due"
    )
    status: JobStatus
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


class JobPage(BaseModel):
    items: list[Job]
    next: str | None = Field(..., description="cursor of the next page; null on the last page")


class Run(BaseModel):
    run_key: str = Field(..., description="<tenant>/<job id>@<unix ms>")
    scheduled_at: str = Field(..., description="ISO-8601 UTC")
    status: Literal["pending", "published", "running", "succeeded", "retrying", "dead", "skipped"]
    attempt: int
    started_at: str | None
    finished_at: str | None
    last_error: str | None = Field(..., description="the last error, or why the run was skipped")


class RunPage(BaseModel):
    items: list[Run]
    next: str | None = Field(..., description="cursor of the next page; null on the last page")


class ErrorBody(BaseModel):
    error: str = Field(..., description="machine-readable slug, e.g. not_found")
    detail: str = Field(..., description="one sentence for people")


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
        "failing, last_error",
    )


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    detail: str | None = None
    parts: dict[str, PartHealth] = Field(
        default_factory=dict, description="each long-running part of the process"
    )


def parts_body(parts: Mapping[str, PartState]) -> dict[str, Any]:
    return {
        name: {
            "alive": part.alive,
            "error": part.error,
            "updated_at": iso_ms(int(part.updated_at * 1000)),
            "detail": dict(part.detail),
        }
        for name, part in parts.items()
    }


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    described: dict[int, dict[str, Any]] = {
        401: {"model": ErrorBody, "description": "missing, malformed or unknown API key"},
        404: {"model": ErrorBody, "description": "no such job for this tenant"},
        409: {"model": ErrorBody, "description": "the job's state does not allow this"},
        413: {"model": ErrorBody, "description": "request body too large"},
        422: {"model": ValidationErrorBody, "description": "invalid input, field by field"},
        503: {"model": ErrorBody, "description": "the database is unavailable"},
    }
    return {code: described[code] for code in codes}


# --- pure helpers -------------------------------------------------------------------------------


def iso_ms(instant_ms: int | None) -> str | None:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ` for UTC milliseconds (None stays None)."""
    moment = ms_to_datetime(instant_ms)
    return None if moment is None else _iso(moment)


def iso_dt(moment: dt.datetime | None) -> str | None:
    return None if moment is None else _iso(moment)


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class CursorError(ValueError):
    """A cursor this API did not issue (or issued for another list)."""


def encode_cursor(tag: str, position: str) -> str:
    return base64.urlsafe_b64encode(f"{tag}:{position}".encode()).rstrip(b"=").decode()


def decode_cursor(cursor: str, tag: str) -> str:
    """The position inside `cursor`, which must carry `tag`; CursorError otherwise."""
    if len(cursor) > CURSOR_MAX_CHARS or not _CURSOR_TEXT.match(cursor) or len(cursor) % 4 == 1:
        raise CursorError(cursor)
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        text = raw.decode()
    except (binascii.Error, UnicodeDecodeError):
        raise CursorError(cursor) from None
    found, sep, position = text.partition(":")
    if found != tag or not sep:
        raise CursorError(cursor)
    return position


def jobs_cursor(last_id: str) -> str:
    return encode_cursor("j", last_id)


def jobs_after(cursor: str) -> str:
    after = decode_cursor(cursor, "j")
    if not _JOB_ID.match(after):
        raise CursorError(cursor)
    return after


def runs_cursor(before_ms: int) -> str:
    return encode_cursor("r", str(before_ms))


def runs_before(cursor: str) -> int:
    text = decode_cursor(cursor, "r")
    if not re.fullmatch(r"-?[0-9]{1,16}", text) or not (MIN_AFTER_MS <= int(text) < MAX_AFTER_MS):
        raise CursorError(cursor)  # out of range would overflow Postgres timestamps: a 500
    return int(text)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def request_problems(errors: list[Mapping[str, Any]]) -> tuple[str, list[FieldProblem]]:
    """FastAPI's validation errors as (error slug, problems) with job-document field paths."""
    problems = []
    in_body = False
    for err in errors:
        loc = tuple(err.get("loc", ()))
        kind = err.get("type", "")
        where, rest = (loc[0], loc[1:]) if loc else ("body", ())
        in_body = in_body or where == "body"
        message = str(err.get("msg", "is invalid")).removeprefix("Value error, ")
        if kind == "json_invalid":
            reason = (err.get("ctx") or {}).get("error", "it does not parse")
            position = f" at character {rest[0]}" if rest else ""
            problems.append(
                FieldProblem("", f"the request body is not valid JSON: {reason}{position}")
            )
            continue
        if where == "body" and not rest:
            if kind == "missing":
                message = "the request body is required: a JSON object"
            else:
                message = (
                    "the request body must be a JSON object sent with "
                    "'Content-Type: application/json'"
                )
        elif kind == "extra_forbidden":
            message = "is not a field of the job document"
        elif kind == "missing":
            message = "is required"
        problems.append(FieldProblem(_field(rest), message))
    return ("invalid_job" if in_body else "invalid_request"), problems


# --- errors -------------------------------------------------------------------------------------


class ApiError(Exception):
    """An answer other than success: status, slug and one sentence."""

    def __init__(
        self, status: int, error: str, detail: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail
        self.headers = dict(headers or {})


class JsonResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def _invalid(error: str, problems: list[FieldProblem]) -> JsonResponse:
    return JsonResponse(
        {"error": error, "detail": [{"field": p.field, "message": p.message} for p in problems]},
        status_code=422,
    )


_SLUGS = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
}


def _not_found(job_id: str) -> ApiError:
    return ApiError(404, "not_found", f"there is no job with id {job_id!r}")


def _conflict(job_id: str, action: str) -> ApiError:
    return ApiError(
        409,
        "conflict",
        (
            f"job {job_id!r} is completed (a one-off job that has run), so it cannot be {action}; "
            "POST it again with a new 'at' to schedule it anew"
        ),
    )


# --- rendering ----------------------------------------------------------------------------------


def _in_order(value: Any, order: tuple[str, ...]) -> Any:
    if not isinstance(value, dict):
        return value
    return {name: value[name] for name in order if name in value} | value


def job_body(view: JobView) -> dict[str, Any]:
    doc = view.document
    # jsonb returns keys ordered by length; give them back in the document's own order.
    body = {
        name: _in_order(doc[name], _NESTED_ORDER.get(name, ()))
        for name in _FIELD_ORDER
        if name in doc
    }
    body.update(
        {
            "next_run_at": iso_ms(view.next_run_at),
            "status": view.status,
            "version": view.version,
            "created_at": iso_dt(view.created_at),
            "updated_at": iso_dt(view.updated_at),
        }
    )
    return body


def run_body(run: RunView) -> dict[str, Any]:
    return {
        "run_key": run.run_key,
        "scheduled_at": iso_ms(run.scheduled_at),
        "status": run.status,
        "attempt": run.attempt,
        "started_at": iso_dt(run.started_at),
        "finished_at": iso_dt(run.finished_at),
        "last_error": run.last_error,
    }


# --- metrics and request log --------------------------------------------------------------------

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """This app's Prometheus collectors, in a registry of its own (one per app, not global)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "tickwheel_http_requests",
            "HTTP requests by route template and status",
            ("method", "route", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "tickwheel_http_request_duration_seconds",
            "HTTP request latency, seconds",
            ("method", "route", "status"),
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.job_changes = Counter(
            "tickwheel_registry_job_changes",
            "Jobs changed over HTTP, by outcome (created, updated, deleted, paused, resumed)",
            ("outcome",),
            registry=self.registry,
        )
        for outcome in ("created", "updated", "deleted", "paused", "resumed"):
            self.job_changes.labels(outcome)  # exported as 0 before the first change

    def changed(self, outcome: Outcome) -> None:
        if outcome.changed:
            self.job_changes.labels(outcome.value).inc()


class Observe:
    """ASGI middleware: count and time each request by route template; log one JSON line.

    It also bounds request bodies: a declared Content-Length over `max_body_bytes` is refused
    before the app runs, and a chunked body is cut off as soon as it grows past it.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics, max_body_bytes: int) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server error middleware answers if the app raises

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        received = 0

        async def bounded_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise StarletteHTTPException(413)
            return message

        try:
            if self._declared_length(scope) > self.max_body_bytes:
                await _too_large()(scope, receive, observed_send)
            else:
                await self.app(scope, bounded_receive, observed_send)
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            # The template, never the raw path: label values must stay few.
            template = getattr(route, "path", None) or "unmatched"
            # Only known methods: an arbitrary token as a label would grow /metrics unboundedly.
            method = scope["method"] if scope["method"] in KNOWN_METHODS else "other"
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template, str(status)).observe(elapsed)
            if log.isEnabledFor(logging.INFO):
                log.info(
                    "request",
                    extra={
                        "http_method": method,
                        "route": template,
                        "path": scope["path"],
                        "status": status,
                        "duration_ms": round(elapsed * 1000, 3),
                        "tenant": scope.get("state", {}).get("tenant"),
                    },
                )

    @staticmethod
    def _declared_length(scope: Scope) -> int:
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0  # the server rejects a malformed length before we see it
        return 0


def _too_large() -> JsonResponse:
    return JsonResponse(
        {"error": "too_large", "detail": "the request body is larger than this server accepts"},
        status_code=413,
    )


# --- the app ------------------------------------------------------------------------------------

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="The tenant's API key (`tickwheel tenant add NAME`) as `Bearer <key>`.",
)


async def tenant_of(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The request's tenant, from its bearer key (AuthProblem → 401)."""
    # The HTTPBearer dependency only puts the scheme in the OpenAPI document; the header is
    # parsed here so that "missing" and "malformed" get sentences of their own.
    keys: KeyCache = request.app.state.keys
    tenant = await authenticate(request.headers.get("authorization"), keys)
    request.state.tenant = tenant  # for the request log line
    return tenant


Tenant = Annotated[str, Depends(tenant_of)]
JobIdPath = Annotated[
    str, Path(pattern=JOB_ID_PATTERN, description="the job's id: [A-Za-z0-9._:-]{1,128}")
]
Limit = Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX, description="items per page (1..500)")]
CursorParam = Annotated[
    str | None, Query(description="the `next` value of the previous page, unchanged")
]


async def _authenticate(request: Request) -> None:
    await authenticate(request.headers.get("authorization"), request.app.state.keys)


def create_app(
    store: RegistryStore,
    limits: Limits,
    *,
    clock: Callable[[], int] = now_ms,
    parts: Mapping[str, PartState] | None = None,
) -> FastAPI:
    """The registry HTTP API over `store`; `clock` gives now in UTC milliseconds; `parts`, the
    process's health records, are reported (and a dead one fails) by /healthz."""
    metrics = Metrics()
    app = FastAPI(
        title="tickwheel registry",
        version="1",
        description="Register, inspect and control scheduled jobs (see docs/API.md).",
    )
    app.state.keys = KeyCache(store.tenant_for_key)
    # Routes with a body authenticate before reading it, and read it strictly (body.py).
    app.router.route_class = authenticated_first(_authenticate)
    max_body = max(BODY_MIN_BYTES, 2 * limits.payload_limit_bytes + BODY_OVERHEAD_BYTES)
    app.add_middleware(Observe, metrics=metrics, max_body_bytes=max_body)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> Response:
        return JsonResponse(
            {"error": exc.error, "detail": exc.detail}, status_code=exc.status, headers=exc.headers
        )

    @app.exception_handler(AuthProblem)
    async def _auth_problem(_: Request, exc: AuthProblem) -> Response:
        return JsonResponse(
            {"error": "unauthorized", "detail": exc.detail},
            status_code=401,
            headers={"WWW-Authenticate": exc.challenge},
        )

    @app.exception_handler(JobValidationError)
    async def _job_invalid(_: Request, exc: JobValidationError) -> Response:
        return _invalid("invalid_job", exc.problems)

    @app.exception_handler(RequestValidationError)
    async def _request_invalid(_: Request, exc: RequestValidationError) -> Response:
        error, problems = request_problems(list(exc.errors()))
        return _invalid(error, problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400:
            # FastAPI's only 400: a body it could not decode (not UTF-8, nesting too deep).
            # Malformed JSON is a 422 with the job-document error shape; so is this.
            return _invalid(
                "invalid_job",
                [
                    FieldProblem(
                        "",
                        "the request body could not be read as JSON; send UTF-8 encoded JSON text",
                    )
                ],
            )
        detail = exc.detail if isinstance(exc.detail, str) else "the request was refused"
        if exc.status_code == 404:
            detail = f"there is no endpoint {request.method} {request.url.path}"
        elif exc.status_code == 405:
            detail = f"{request.url.path} does not support {request.method}"
        elif exc.status_code == 413:
            return _too_large()
        return JsonResponse(
            {"error": _SLUGS.get(exc.status_code, "error"), "detail": detail},
            status_code=exc.status_code,
            headers=exc.headers,
        )

    async def _db_unavailable(_: Request, exc: Exception) -> Response:
        log.warning("database unavailable: %s", type(exc).__name__)
        return JsonResponse(
            {"error": "unavailable", "detail": "the database is unavailable; retry shortly"},
            status_code=503,
            headers={"Retry-After": "1"},
        )

    for kind in _DB_UNAVAILABLE:
        app.add_exception_handler(kind, _db_unavailable)

    async def apply_one(op: Op) -> Outcome:
        [applied] = await store.apply([op])
        metrics.changed(applied.outcome)
        return applied.outcome

    async def current(tenant: str, job_id: str) -> JobView:
        view = await store.get(tenant, job_id)
        if view is None:
            raise _not_found(job_id)
        return view

    def job_response(
        view: JobView, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> JsonResponse:
        return JsonResponse(job_body(view), status_code=status, headers=headers)

    # -- jobs -----------------------------------------------------------------------------------

    @app.post(
        "/v1/jobs",
        response_model=Job,
        status_code=201,
        tags=["jobs"],
        summary="Create or replace a job (idempotent per id)",
        responses={
            200: {"model": Job, "description": "existing job, unchanged or updated"},
            201: {"model": Job, "description": "job created"},
            **_responses(401, 409, 413, 422, 503),
        },
    )
    async def upsert_job(doc: JobDocument, tenant: Tenant) -> Response:
        spec = validate_job(tenant, doc, limits, clock())
        outcome = await apply_one(Op("upsert", tenant, doc.id, spec=spec))
        view = await store.get(tenant, doc.id)
        if view is None:
            raise ApiError(
                409,
                "conflict",
                f"job {doc.id!r} was deleted by a concurrent request; POST it again",
            )
        if outcome is Outcome.CREATED:
            return job_response(view, 201, {"Location": f"/v1/jobs/{quote(doc.id)}"})
        return job_response(view)

    @app.get(
        "/v1/jobs",
        response_model=JobPage,
        tags=["jobs"],
        summary="List jobs, by id",
        responses=_responses(401, 422, 503),
    )
    async def list_jobs(
        tenant: Tenant,
        status: Annotated[JobStatus | None, Query(description="only jobs in this status")] = None,
        priority: Annotated[Literal["high", "normal", "low"] | None, Query()] = None,
        kind: Annotated[Literal["cron", "once"] | None, Query()] = None,
        limit: Limit = PAGE_LIMIT_DEFAULT,
        cursor: CursorParam = None,
    ) -> Response:
        try:
            after = None if cursor is None else jobs_after(cursor)
        except CursorError:
            raise _bad_cursor() from None
        items, last = await store.list_jobs(
            tenant, after=after, limit=limit, status=status, priority=priority, kind=kind
        )
        return JsonResponse(
            {
                "items": [job_body(v) for v in items],
                "next": None if last is None else jobs_cursor(last),
            }
        )

    @app.get(
        "/v1/jobs/{job_id}",
        response_model=Job,
        tags=["jobs"],
        summary="Get a job",
        responses=_responses(401, 404, 422, 503),
    )
    async def get_job(job_id: JobIdPath, tenant: Tenant) -> Response:
        return job_response(await current(tenant, job_id))

    @app.patch(
        "/v1/jobs/{job_id}",
        response_model=Job,
        tags=["jobs"],
        summary="Change a job with a JSON merge patch (RFC 7386)",
        responses=_responses(401, 404, 409, 413, 422, 503),
    )
    async def patch_job(
        job_id: JobIdPath,
        tenant: Tenant,
        patch: Annotated[
            dict[str, Any],
            Body(
                media_type="application/merge-patch+json",
                description="fields to change; null removes a field (back to its default)",
            ),
        ],
    ) -> Response:
        # Field by field, so that each field's nesting counts from the field itself.
        if problems := [p for name, value in patch.items() for p in storable_problems(value, name)]:
            raise JobValidationError(problems)
        for _ in range(PATCH_RETRIES):
            view = await current(tenant, job_id)
            merged = merge_patch(view.document, patch)
            if merged.get("id") != job_id:
                raise JobValidationError(
                    [
                        FieldProblem(
                            "id",
                            f"cannot change (it is the job's identity, {job_id!r}); "
                            "create a new job and delete this one instead",
                        )
                    ]
                )
            spec = validate_job(tenant, parse_document(merged), limits, clock())
            if spec.stored_document == view.document:
                return job_response(view)
            # The version we read must still be current when we write: a concurrent change
            # (or a delete) makes this write stale, and the merge is redone on the new state.
            op = Op("upsert", tenant, job_id, spec=spec, version=view.version + 1)
            if await apply_one(op) is Outcome.STALE:
                continue
            return job_response(await current(tenant, job_id))
        raise ApiError(
            409, "conflict", f"job {job_id!r} kept changing while it was patched; retry the PATCH"
        )

    @app.delete(
        "/v1/jobs/{job_id}",
        status_code=204,
        tags=["jobs"],
        summary="Delete a job",
        response_class=Response,
        responses={204: {"description": "deleted"}, **_responses(401, 404, 422, 503)},
    )
    async def delete_job(job_id: JobIdPath, tenant: Tenant) -> Response:
        if await apply_one(Op("delete", tenant, job_id)) is Outcome.NOT_FOUND:
            raise _not_found(job_id)
        return Response(status_code=204)

    async def pause_or_resume(kind: str, job_id: str, tenant: str) -> Response:
        outcome = await apply_one(Op(kind, tenant, job_id))
        if outcome is Outcome.NOT_FOUND:
            raise _not_found(job_id)
        if outcome is Outcome.CONFLICT:
            raise _conflict(job_id, "paused" if kind == "pause" else "resumed")
        return job_response(await current(tenant, job_id))

    @app.post(
        "/v1/jobs/{job_id}/pause",
        response_model=Job,
        tags=["jobs"],
        summary="Pause a job (idempotent)",
        responses=_responses(401, 404, 409, 422, 503),
    )
    async def pause_job(job_id: JobIdPath, tenant: Tenant) -> Response:
        return await pause_or_resume("pause", job_id, tenant)

    @app.post(
        "/v1/jobs/{job_id}/resume",
        response_model=Job,
        tags=["jobs"],
        summary="Resume a paused job (idempotent)",
        responses=_responses(401, 404, 409, 422, 503),
    )
    async def resume_job(job_id: JobIdPath, tenant: Tenant) -> Response:
        return await pause_or_resume("resume", job_id, tenant)

    @app.get(
        "/v1/jobs/{job_id}/runs",
        response_model=RunPage,
        tags=["runs"],
        summary="A job's runs, newest first",
        responses=_responses(401, 404, 422, 503),
    )
    async def list_runs(
        job_id: JobIdPath,
        tenant: Tenant,
        limit: Limit = PAGE_LIMIT_DEFAULT,
        cursor: CursorParam = None,
    ) -> Response:
        try:
            before = None if cursor is None else runs_before(cursor)
        except CursorError:
            raise _bad_cursor() from None
        await current(tenant, job_id)
        items, last = await store.runs(tenant, job_id, before_ms=before, limit=limit)
        return JsonResponse(
            {
                "items": [run_body(r) for r in items],
                "next": None if last is None else runs_cursor(last),
            }
        )

    # -- operations -----------------------------------------------------------------------------

    @app.get(
        "/healthz",
        response_model=Health,
        tags=["operations"],
        summary="Each part's state and database reachability (no auth)",
        responses={
            503: {
                "model": Health,
                "description": "a part has died, or the database does not answer",
            }
        },
    )
    async def healthz() -> Response:
        reported = parts_body(parts or {})
        dead = sorted(name for name, part in reported.items() if not part["alive"])
        if dead:
            return JsonResponse(
                {
                    "status": "unavailable",
                    "detail": f"part(s) {', '.join(dead)} ended; the process is stopping",
                    "parts": reported,
                },
                status_code=503,
            )
        try:
            await asyncio.wait_for(store.pool.fetchval(QUERIES["health_check"]), HEALTH_TIMEOUT_S)
        except (TimeoutError, *_DB_UNAVAILABLE, asyncpg.PostgresError) as exc:
            return JsonResponse(
                {
                    "status": "unavailable",
                    "detail": f"the database does not answer ({type(exc).__name__})",
                    "parts": reported,
                },
                status_code=503,
            )
        return JsonResponse({"status": "ok", "parts": reported})

    @app.get(
        "/metrics",
        tags=["operations"],
        summary="Prometheus metrics (no auth)",
        response_class=Response,
        responses={
            200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"}
        },
    )
    async def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _bad_cursor() -> RequestValidationError:
    return RequestValidationError(
        [
            {
                "type": "cursor",
                "loc": ("query", "cursor"),
                "msg": "is not a cursor of this list; pass the previous page's 'next' as is",
            }
        ]
    )
