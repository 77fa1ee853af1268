"""The jobs view of the operators' page: `/v1/ops/jobs` (read) and the actions on a job
(pause with a note, resume, delete, trigger, backfill), behind operator keys like the rest of
`/v1/ops/…` (routes.py).

Reads page through jobs across tenants with a keyset cursor over the primary key, each page
reading a bounded range of it (`jobs.jobs_page`). Actions go through the same functions as
`tickwheel jobs pause|resume|rm|trigger|backfill` (ops/jobs.py → `RegistryStore.apply`), need
the CSRF token of `GET /v1/ops/csrf` in `X-CSRF-Token` (csrf.py), and are recorded in
`ops_audit` with the operator key's name, whatever their outcome, in the change's own
transaction (a dry run changes nothing and is not recorded).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, FastAPI, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from tickwheel.cli_support import BadInput
from tickwheel.registry_api.auth import bearer_key
from tickwheel.registry_api.document import JobValidationError
from tickwheel.registry_api.errors import ApiError, JsonResponse
from tickwheel.registry_api.models import ErrorBody
from tickwheel.registry_api.on_demand import BackfillRequest, checked_idempotency_key
from tickwheel.registry_api.ops.csrf import HEADER, CsrfTokens
from tickwheel.registry_api.ops.forms import parse_instant_option
from tickwheel.registry_api.ops.jobs import (
    NOTE_MAX_CHARS,
    PauseNote,
    backfill_job,
    change_job,
    jobs_page,
    trigger_job,
)
from tickwheel.registry_api.ops.routes import ERRORS, NO_STORE, Operator
from tickwheel.registry_api.params import Ctx

JOBS_LIMIT_DEFAULT = 50
JOBS_LIMIT_MAX = 200
FILTER_MAX_CHARS = 128
# What a filter, an id in a path or a note may hold: no control characters (Postgres refuses a
# NUL byte in text, and no tenant, job id, handler or error is written with one).
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
NOTE_FORM = r"^[^\x00]*$"  # a note may span lines

Text = Annotated[str | None, Query(max_length=FILTER_MAX_CHARS, pattern=PRINTABLE)]
Status = Literal["active", "paused", "completed", "deleted"]


class PauseNoteItem(BaseModel):
    by: str = Field(..., description="the operator key's name (the page) or $USER (the CLI)")
    reason: str


class LastRun(BaseModel):
    status: str
    scheduled_at: str


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
    pause_note: PauseNoteItem | None = Field(..., description="null: not paused with a note")
    last_run: LastRun | None = Field(..., description="the newest run; null: none kept")


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
    result: str = Field(
        ..., description="paused | resumed | deleted | already paused | already active"
    )
    status: str | None
    version: int | None
    audit_id: int


class JobTriggered(BaseModel):
    job: str
    run_key: str
    scheduled_at: str
    created: bool = Field(..., description="false: an earlier request with the key made it")
    audit_id: int


class JobBackfilled(BaseModel):
    job: str
    dry_run: bool
    runs: int = Field(..., description="runs created (a dry run: would be created)")
    occurrences: int
    existing: int = Field(..., description="occurrences that have a run already")
    first: str | None
    last: str | None
    first_ms: int | None
    last_ms: int | None
    rate_per_s: float | None
    audit_id: int | None = Field(..., description="null for a dry run: nothing was recorded")


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
        Query(max_length=FILTER_MAX_CHARS, pattern=PRINTABLE, description="a piece of the job id"),
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


class ChangeBody(BaseModel):
    """What a pause may carry: why (the note; who is the operator key's name)."""

    model_config = ConfigDict(extra="forbid")
    note: str | None = Field(
        None,
        min_length=1,
        max_length=NOTE_MAX_CHARS,
        pattern=NOTE_FORM,
        description="pause only: why, shown beside the paused job until it is resumed",
    )


class TriggerBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    idempotency_key: str | None = Field(
        None, description="as the Idempotency-Key of the tenants' POST /v1/jobs/{id}/trigger"
    )


class BackfillBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    from_: str = Field(..., alias="from", description="ISO-8601 instant with Z or an offset")
    to: str = Field(..., description="ISO-8601 instant with Z or an offset; after `from`")
    dry_run: bool = Field(False, description="count only; change nothing")


JobTenant = Annotated[str, Path(max_length=FILTER_MAX_CHARS, pattern=PRINTABLE)]
JobId = Annotated[str, Path(max_length=FILTER_MAX_CHARS, pattern=PRINTABLE)]
CHANGE_RESPONSES: dict[int | str, dict[str, object]] = {
    403: {"model": ErrorBody, "description": "a tenant's key, or no valid CSRF token"},
    404: {"model": ErrorBody, "description": "no such job"},
    409: {"model": ErrorBody, "description": "the job's state does not allow it"},
    422: {"model": ErrorBody, "description": "a malformed body"},
}


def checked(request: Request) -> str:
    """The request's operator key, once its CSRF token is valid (else a 403)."""
    key = bearer_key(request.headers.get("authorization"))
    if not _tokens(request).valid(key, request.headers.get(HEADER)):
        raise ApiError(
            403,
            "csrf",
            f"this request changes state and needs the {HEADER} header with a token "
            "from GET /v1/ops/csrf",
        )
    return key


def _refusal(err: BadInput) -> ApiError:
    text = str(err)
    if text.startswith("no job"):
        return ApiError(404, "not_found", text)
    return ApiError(409, "conflict", text)


@jobs.post(
    "/jobs/{tenant}/{job_id}/trigger",
    response_model=JobTriggered,
    summary="Run a job now (as `tickwheel jobs trigger`), audited",
    responses=CHANGE_RESPONSES,
)
async def trigger(
    request: Request,
    ctx: Ctx,
    name: Operator,
    tenant: JobTenant,
    job_id: JobId,
    body: Annotated[TriggerBody | None, Body()] = None,
) -> Response:
    checked(request)
    try:
        idempotency_key = checked_idempotency_key(
            None if body is None else body.idempotency_key, "idempotency_key"
        )
    except JobValidationError as exc:
        raise ApiError(422, "invalid", exc.problems[0].message) from None
    try:
        done = await trigger_job(ctx.store, tenant, job_id, idempotency_key, operator=str(name))
    except BadInput as err:
        raise _refusal(err) from None
    return JsonResponse(done, headers=NO_STORE)


@jobs.post(
    "/jobs/{tenant}/{job_id}/backfill",
    response_model=JobBackfilled,
    summary="Runs for a job's occurrences in a window (as `tickwheel jobs backfill`); "
    "dry_run counts them first; audited",
    responses=CHANGE_RESPONSES,
)
async def backfill(
    request: Request,
    ctx: Ctx,
    name: Operator,
    tenant: JobTenant,
    job_id: JobId,
    body: BackfillBody,
) -> Response:
    checked(request)
    try:
        from_ms = parse_instant_option(body.from_, "from")
        to_ms = parse_instant_option(body.to, "to")
    except BadInput as err:
        raise ApiError(422, "invalid", str(err)) from None
    if to_ms <= from_ms:
        raise ApiError(422, "invalid", "'to' must be after 'from'")
    window = BackfillRequest(from_ms, to_ms)
    try:
        done = await backfill_job(
            ctx.store, tenant, job_id, window, dry_run=body.dry_run, operator=str(name)
        )
    except BadInput as err:
        text = str(err)
        if text.startswith("no job") or "completed one-off" in text:
            raise _refusal(err) from None
        raise ApiError(422, "invalid", text) from None  # the window, against the job
    return JsonResponse(done, headers=NO_STORE)


# After trigger and backfill: a path of theirs would match this one's pattern first.
@jobs.post(
    "/jobs/{tenant}/{job_id}/{action}",
    response_model=JobChanged,
    summary="Pause (with a note), resume or delete a job (as `tickwheel jobs "
    "pause|resume|rm`), audited",
    responses=CHANGE_RESPONSES,
)
async def change(
    request: Request,
    ctx: Ctx,
    name: Operator,
    tenant: JobTenant,
    job_id: JobId,
    action: Literal["pause", "resume", "delete"],
    body: Annotated[ChangeBody | None, Body()] = None,
) -> Response:
    checked(request)
    reason = None if body is None else body.note
    if reason is not None and action != "pause":
        raise ApiError(422, "invalid", "a note goes with a pause only")
    note = None if reason is None else PauseNote(str(name), reason)
    command = "rm" if action == "delete" else action
    try:
        done = await change_job(ctx.store, command, tenant, job_id, note=note, operator=str(name))
    except BadInput as err:
        raise _refusal(err) from None
    return JsonResponse(done, headers=NO_STORE)


def install(app: FastAPI, csrf_secret: bytes | None = None) -> None:
    """Add the jobs view's endpoints to the registry's app (after routes.install); CSRF tokens
    signed with `csrf_secret` (the deployment's; None: one drawn for this process)."""
    app.state.csrf_tokens = CsrfTokens(csrf_secret)
    app.include_router(jobs)
