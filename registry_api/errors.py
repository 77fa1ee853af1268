"""Every answer of the HTTP API other than success, in one of two shapes with an `error` slug:

  422 (any bad input):  {"error": "invalid_job" | "invalid_request",
                         "detail": [{"field": "backoff.cap_ms", "message": "…"}, …]}
  401/404/409/413/503:  {"error": "not_found", "detail": "one sentence"}
  429 (a tenant's quota):  {"error": "quota_exceeded", "quota": "max_jobs", "detail": "…",
                          "retry_after_s": 60}, with the header Retry-After

`field` is a dotted path in the job document (or the name of a query parameter); "" means the
body as a whole. `install_error_handlers` maps each exception the app may meet to its answer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from tickwheel.registry_api.auth import AuthProblem
from tickwheel.registry_api.document import FieldProblem, JobValidationError
from tickwheel.registry_api.quotas import QuotaRefusal
from tickwheel.registry_api.store import DB_UNAVAILABLE

# The request log's logger (docs/API.md names it), which also reports an unavailable database.
log = logging.getLogger("tickwheel.registry_api.http")

_SLUGS = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
}


class ApiError(Exception):
    """An answer other than success: status, slug and one sentence."""

    def __init__(
        self,
        status: int,
        error: str,
        detail: str,
        headers: Mapping[str, str] | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail
        self.headers = dict(headers or {})
        self.fields = dict(fields or {})  # more of the body, after error and detail


class JsonResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def invalid(error: str, problems: list[FieldProblem]) -> JsonResponse:
    """The 422 shape: every problem with its field."""
    return JsonResponse(
        {"error": error, "detail": [{"field": p.field, "message": p.message} for p in problems]},
        status_code=422,
    )


def not_found(job_id: str) -> ApiError:
    return ApiError(404, "not_found", f"there is no job with id {job_id!r}")


def conflict(job_id: str, action: str) -> ApiError:
    return ApiError(
        409,
        "conflict",
        (
            f"job {job_id!r} is completed (a one-off job that has run), so it cannot be {action}; "
            "POST it again with a new 'at' to schedule it anew"
        ),
    )


def over_quota(refusal: QuotaRefusal) -> ApiError:
    """429: the tenant's quota refused the request; nothing of the tenant changed."""
    return ApiError(
        429,
        "quota_exceeded",
        refusal.detail,
        headers={"Retry-After": str(refusal.retry_after_s)},
        fields={"quota": refusal.quota, "retry_after_s": refusal.retry_after_s},
    )


def too_large() -> JsonResponse:
    return JsonResponse(
        {"error": "too_large", "detail": "the request body is larger than this server accepts"},
        status_code=413,
    )


def bad_cursor() -> RequestValidationError:
    return RequestValidationError(
        [
            {
                "type": "cursor",
                "loc": ("query", "cursor"),
                "msg": "is not a cursor of this list; pass the previous page's 'next' as is",
            }
        ]
    )


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


async def _api_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JsonResponse(
        {"error": exc.error, "detail": exc.detail, **exc.fields},
        status_code=exc.status,
        headers=exc.headers,
    )


async def _auth_problem(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, AuthProblem)
    return JsonResponse(
        {"error": "unauthorized", "detail": exc.detail},
        status_code=401,
        headers={"WWW-Authenticate": exc.challenge},
    )


async def _job_invalid(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, JobValidationError)
    return invalid("invalid_job", exc.problems)


async def _request_invalid(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    error, problems = request_problems(list(exc.errors()))
    return invalid(error, problems)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:
        # FastAPI's only 400: a body it could not decode (not UTF-8, nesting too deep).
        # Malformed JSON is a 422 with the job-document error shape; so is this.
        return invalid(
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
        return too_large()
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


def install_error_handlers(app: FastAPI) -> None:
    """Answer every exception the app may meet in one of the two shapes above."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(AuthProblem, _auth_problem)
    app.add_exception_handler(JobValidationError, _job_invalid)
    app.add_exception_handler(RequestValidationError, _request_invalid)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    for kind in DB_UNAVAILABLE:
        app.add_exception_handler(kind, _db_unavailable)
