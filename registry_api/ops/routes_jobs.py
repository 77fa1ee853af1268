"""The jobs view of the operators' page: `/v1/ops/jobs` (read) and the actions on a job
(pause, resume), behind operator keys like the rest of `/v1/ops/…` (routes.py).

Reads page through jobs across tenants with a keyset cursor over the primary key, each page
reading a bounded range of it (`jobs.jobs_page`). Actions go through the same function as
`tickwheel jobs pause|resume` (`jobs.change_job` → `RegistryStore.apply`), need the CSRF
token of `GET /v1/ops/csrf` in `X-CSRF-Token` (csrf.py), and are recorded in `ops_audit`
with the operator key's name, whatever their outcome.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, FastAPI, Path, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from tickwheel.cli_support import BadInput
from tickwheel.registry_api.auth import bearer_key
from tickwheel.registry_api.errors import ApiError, JsonResponse
from tickwheel.registry_api.models import ErrorBody
from tickwheel.registry_api.ops.csrf import HEADER, CsrfTokens
from tickwheel.registry_api.ops.jobs import audit, change_job, jobs_page
from tickwheel.registry_api.ops.routes import ERRORS, NO_STORE, Operator
from tickwheel.registry_api.params import Ctx

JOBS_LIMIT_DEFAULT = 50
JOBS_LIMIT_MAX = 200
FILTER_MAX_CHARS = 128

Text = Annotated[str | None, Query(max_length=FILTER_MAX_CHARS)]
Status = Literal["active", "paused", "completed", "deleted"]


class JobItem(BaseModel):
    tenant: str
    job_id: str
    kind: str = Field(..., description="cron | once")
    schedule: str | None = Field(..., description="the cron expression (kind cron)")
    at: str | None = Field(..., description="the one-off's instant, ISO-8601 UTC (kind once)")
    timezone: str
    handler: str | None = Field(..., description="null: the job has an HTTP target")
    status: str
    version: int
    next_run_at: str | None = Field(..., description="ISO-8601 UTC; null: none pending")
    updated_at: str | None


class Cursor(BaseModel):
    tenant: str
    job_id: str


class JobsPage(BaseModel):
    items: list[JobItem]
    next: Cursor | None = Field(
        ..., description="pass as after_tenant/after_job for the next page; null: the end"
    )


class CsrfToken(BaseModel):
    token: str = Field(..., description=f"echo it in the {HEADER} header of every POST")
    header: str


class JobChanged(BaseModel):
    job: str
    result: str = Field(..., description="paused | resumed | already paused | already active")
    status: str | None
    version: int | None
    audit_id: int


def _tokens(request: Request) -> CsrfTokens:
    tokens: CsrfTokens = request.app.state.csrf_tokens
    return tokens


jobs = APIRouter(prefix="/v1/ops", tags=["operators"], responses=ERRORS)


@jobs.get(
    "/jobs",
    response_model=JobsPage,
    summary="Jobs across tenants, filtered, one page at a time in (tenant, id) order",
)
async def list_jobs(
    ctx: Ctx,
    _: Operator,
    tenant: Text = None,
    status: Annotated[Status | None, Query()] = None,
    handler: Text = None,
    q: Annotated[
        str | None,
        Query(max_length=FILTER_MAX_CHARS, description="a piece of the job id"),
    ] = None,
    after_tenant: Text = None,
    after_job: Text = None,
    limit: Annotated[int, Query(ge=1, le=JOBS_LIMIT_MAX)] = JOBS_LIMIT_DEFAULT,
) -> Response:
    if (after_tenant is None) != (after_job is None):
        raise ApiError(400, "bad_cursor", "give both after_tenant and after_job, or neither")
    after = None if after_tenant is None or after_job is None else (after_tenant, after_job)
    page = await jobs_page(
        ctx.store.pool,
        after=after,
        tenant=tenant or None,
        status=status,
        handler=handler or None,
        text=q or None,
        limit=limit,
    )
    return JsonResponse(page, headers=NO_STORE)


@jobs.get(
    "/csrf",
    response_model=CsrfToken,
    summary="A CSRF token for this operator key, to echo in the POSTs of /v1/ops/…",
)
async def csrf(request: Request, _: Operator) -> Response:
    key = bearer_key(request.headers.get("authorization"))
    return JsonResponse({"token": _tokens(request).issue(key), "header": HEADER}, headers=NO_STORE)


@jobs.post(
    "/jobs/{tenant}/{job_id}/{action}",
    response_model=JobChanged,
    summary="Pause or resume a job (as `tickwheel jobs pause|resume`), audited",
    responses={
        403: {"model": ErrorBody, "description": "a tenant's key, or no valid CSRF token"},
        404: {"model": ErrorBody, "description": "no such job"},
        409: {"model": ErrorBody, "description": "the job's state does not allow it"},
    },
)
async def change(
    request: Request,
    ctx: Ctx,
    name: Operator,
    tenant: Annotated[str, Path(max_length=FILTER_MAX_CHARS)],
    job_id: Annotated[str, Path(max_length=FILTER_MAX_CHARS)],
    action: Literal["pause", "resume"],
) -> Response:
    key = bearer_key(request.headers.get("authorization"))
    if not _tokens(request).valid(key, request.headers.get(HEADER)):
        raise ApiError(
            403,
            "csrf",
            f"this request changes state and needs the {HEADER} header with a token "
            "from GET /v1/ops/csrf",
        )
    status = 200
    try:
        done = await change_job(ctx.store, action, tenant, job_id)
        result = done["result"]
    except BadInput as err:
        status = 404 if str(err).startswith("no job") else 409
        result = f"refused: {err}"
        done = {"detail": str(err)}
    ident = await audit(ctx.store.pool, str(name), action, tenant, job_id, result)
    if status != 200:
        raise ApiError(status, "not_found" if status == 404 else "conflict", done["detail"])
    return JsonResponse({**done, "audit_id": ident}, headers=NO_STORE)


def install(app: FastAPI) -> None:
    """Add the jobs view's endpoints to the registry's app (after routes.install)."""
    app.state.csrf_tokens = CsrfTokens()
    app.include_router(jobs)
