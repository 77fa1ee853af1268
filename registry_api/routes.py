"""The endpoints of the HTTP API (user contract in docs/API.md).

Every job endpoint is scoped to the tenant of the request's bearer key: another tenant's job is
indistinguishable from a job that does not exist (404 either way). Writes go through the same
`validate_job` and `RegistryStore.apply` as the Kafka intake, one transaction per request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Body, Header, Query, Request
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.exposition import generate_latest
from pydantic import BaseModel, Field
from starlette.responses import Response

from tickwheel.domain import RegistrationOp, run_key
from tickwheel.registry_api import calendars
from tickwheel.registry_api.body import authenticated_first
from tickwheel.registry_api.cursors import (
    CursorError,
    jobs_after,
    jobs_cursor,
    runs_before,
    runs_cursor,
)
from tickwheel.registry_api.document import (
    PAUSE_NOTE_MAX_CHARS,
    FieldProblem,
    JobDocument,
    JobValidationError,
    PriorityValue,
    check_pause_note,
    parse_document,
    spec_from_stored,
    storable_problems,
    validate_job,
)
from tickwheel.registry_api.errors import (
    ApiError,
    JsonResponse,
    bad_cursor,
    conflict,
    invalid,
    not_found,
    over_quota,
)
from tickwheel.registry_api.models import (
    BackfillAccepted,
    BackfillBody,
    Health,
    Job,
    JobPage,
    JobPreview,
    KindValue,
    RunPage,
    TriggerAccepted,
    VisibleStatus,
    responses,
)
from tickwheel.registry_api.on_demand import (
    IDEMPOTENCY_KEY_MAX_CHARS,
    Backfilled,
    Triggered,
    TriggerRequest,
    backfill_window,
    checked_idempotency_key,
)
from tickwheel.registry_api.params import (
    PAGE_LIMIT_DEFAULT,
    Ctx,
    CursorParam,
    JobIdPath,
    Limit,
    Registry,
    Tenant,
    authenticate_request,
)
from tickwheel.registry_api.patch import merge_patch
from tickwheel.registry_api.render import job_body, parts_body, preview_body, run_body
from tickwheel.registry_api.rows import JobView
from tickwheel.registry_api.state import Op, Outcome
from tickwheel.registry_api.store import Applied
from tickwheel.signatures import PREFIX_CHARS

PREVIEW_COUNT_DEFAULT = 5
PREVIEW_COUNT_MAX = 100  # occurrences one preview explains at most
PATCH_RETRIES = 5  # read-merge-write rounds before a PATCH gives up on a busy job
HEALTH_TIMEOUT_S = 2.0  # seconds /healthz waits for the database

# Routes with a body authenticate before reading it, and read it strictly (body.py).
jobs = APIRouter(route_class=authenticated_first(authenticate_request))
operations = APIRouter(route_class=authenticated_first(authenticate_request))


async def _applied(ctx: Registry, op: Op) -> Applied:
    """Apply one op; 429 when one of the tenant's quotas refuses it, 422 naming the field when
    an upsert names a calendar the tenant does not have."""
    [applied] = await ctx.store.apply([op])
    if applied.quota is not None:
        ctx.metrics.refused(op.tenant, applied.quota.quota)
        raise over_quota(applied.quota)
    if applied.problem is not None and op.kind == RegistrationOp.UPSERT:
        raise JobValidationError([FieldProblem(applied.problem.field, applied.problem.message)])
    return applied


async def _apply_one(ctx: Registry, op: Op) -> Outcome:
    applied = await _applied(ctx, op)
    ctx.metrics.changed(applied.outcome)
    return applied.outcome


async def _current(ctx: Registry, tenant: str, job_id: str) -> JobView:
    view = await ctx.store.get(tenant, job_id)
    if view is None:
        raise not_found(job_id)
    return view


def _job_response(
    view: JobView, status: int = 200, headers: Mapping[str, str] | None = None
) -> JsonResponse:
    return JsonResponse(job_body(view), status_code=status, headers=headers)


# -- jobs -------------------------------------------------------------------------------------


@jobs.post(
    "/v1/jobs",
    response_model=Job,
    status_code=201,
    tags=["jobs"],
    summary="Create or replace a job (idempotent per id)",
    responses={
        200: {"model": Job, "description": "existing job, unchanged or updated"},
        201: {"model": Job, "description": "job created"},
        **responses(401, 409, 413, 422, 429, 503),
    },
)
async def upsert_job(doc: JobDocument, tenant: Tenant, ctx: Ctx) -> Response:
    spec = validate_job(tenant, doc, ctx.limits, ctx.clock())
    outcome = await _apply_one(ctx, Op(RegistrationOp.UPSERT, tenant, doc.id, spec=spec))
    view = await ctx.store.get(tenant, doc.id)
    if view is None:
        raise ApiError(
            409,
            "conflict",
            f"job {doc.id!r} was deleted by a concurrent request; POST it again",
        )
    if outcome is Outcome.CREATED:
        return _job_response(view, 201, {"Location": f"/v1/jobs/{quote(doc.id)}"})
    return _job_response(view)


@jobs.get(
    "/v1/jobs",
    response_model=JobPage,
    tags=["jobs"],
    summary="List jobs, by id",
    responses=responses(401, 422, 503),
)
async def list_jobs(
    tenant: Tenant,
    ctx: Ctx,
    status: Annotated[VisibleStatus | None, Query(description="only jobs in this status")] = None,
    priority: Annotated[PriorityValue | None, Query()] = None,
    kind: Annotated[KindValue | None, Query()] = None,
    limit: Limit = PAGE_LIMIT_DEFAULT,
    cursor: CursorParam = None,
) -> Response:
    try:
        after = None if cursor is None else jobs_after(cursor)
    except CursorError:
        raise bad_cursor() from None
    items, last = await ctx.store.list_jobs(
        tenant, after=after, limit=limit, status=status, priority=priority, kind=kind
    )
    return JsonResponse(
        {
            "items": [job_body(v) for v in items],
            "next": None if last is None else jobs_cursor(last),
        }
    )


@jobs.get(
    "/v1/jobs/{job_id}",
    response_model=Job,
    tags=["jobs"],
    summary="Get a job",
    responses=responses(401, 404, 422, 503),
)
async def get_job(job_id: JobIdPath, tenant: Tenant, ctx: Ctx) -> Response:
    return _job_response(await _current(ctx, tenant, job_id))


@jobs.get(
    "/v1/jobs/{job_id}/preview",
    response_model=JobPreview,
    tags=["jobs"],
    summary="The job's next occurrences, each with the DST and H rules that put it there, and "
    "what its misfire policy would do with the next due one if it were claimed now",
    responses=responses(401, 404, 422, 503),
)
async def preview_job(
    job_id: JobIdPath,
    tenant: Tenant,
    ctx: Ctx,
    count: Annotated[
        int, Query(ge=1, le=PREVIEW_COUNT_MAX, description="occurrences to explain (1..100)")
    ] = PREVIEW_COUNT_DEFAULT,
) -> Response:
    view = await _current(ctx, tenant, job_id)
    spec = spec_from_stored(tenant, view.document, ctx.limits.shards)
    done = None
    if spec.document.max_runs is not None:
        done = await ctx.store.runs_done(tenant, job_id)
    named = None
    if spec.document.calendars:
        named = await calendars.named(ctx.store.pool, tenant, spec.document.calendars)
    return JsonResponse(preview_body(view, spec, count, ctx.clock(), done, named))


@jobs.patch(
    "/v1/jobs/{job_id}",
    response_model=Job,
    tags=["jobs"],
    summary="Change a job with a JSON merge patch (RFC 7386)",
    responses=responses(401, 404, 409, 413, 422, 429, 503),
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
    ctx: Ctx,
) -> Response:
    # Field by field, so that each field's nesting counts from the field itself.
    if problems := [p for name, value in patch.items() for p in storable_problems(value, name)]:
        raise JobValidationError(problems)
    for _ in range(PATCH_RETRIES):
        view = await _current(ctx, tenant, job_id)
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
        spec = validate_job(tenant, parse_document(merged), ctx.limits, ctx.clock())
        if spec.stored_document == view.document:
            return _job_response(view)
        # The version we read must still be current when we write: a concurrent change
        # (or a delete) makes this write stale, and the merge is redone on the new state.
        op = Op(RegistrationOp.UPSERT, tenant, job_id, spec=spec, version=view.version + 1)
        if await _apply_one(ctx, op) is Outcome.STALE:
            continue
        return _job_response(await _current(ctx, tenant, job_id))
    raise ApiError(
        409, "conflict", f"job {job_id!r} kept changing while it was patched; retry the PATCH"
    )


@jobs.delete(
    "/v1/jobs/{job_id}",
    status_code=204,
    tags=["jobs"],
    summary="Delete a job",
    response_class=Response,
    responses={204: {"description": "deleted"}, **responses(401, 404, 422, 429, 503)},
)
async def delete_job(job_id: JobIdPath, tenant: Tenant, ctx: Ctx) -> Response:
    if await _apply_one(ctx, Op(RegistrationOp.DELETE, tenant, job_id)) is Outcome.NOT_FOUND:
        raise not_found(job_id)
    return Response(status_code=204)


class PauseBody(BaseModel):
    """What a pause may carry."""

    note: str | None = Field(
        None,
        min_length=1,
        max_length=PAUSE_NOTE_MAX_CHARS,
        description="why: shown beside the paused job (jobs show, the API, the status page) "
        "until it is resumed; who is the tenant and its API key's prefix",
    )


async def _pause_or_resume(
    ctx: Registry,
    kind: RegistrationOp,
    job_id: str,
    tenant: str,
    note: tuple[str, str] | None = None,
) -> Response:
    outcome = await _apply_one(ctx, Op(kind, tenant, job_id, note=note))
    if outcome is Outcome.NOT_FOUND:
        raise not_found(job_id)
    if outcome is Outcome.CONFLICT:
        raise conflict(job_id, "paused" if kind == RegistrationOp.PAUSE else "resumed")
    view = await ctx.store.get(tenant, job_id)
    if view is None:  # resumed after its window ended, with after_end "delete": it is gone
        return Response(status_code=204)
    return _job_response(view)


@jobs.post(
    "/v1/jobs/{job_id}/pause",
    response_model=Job,
    tags=["jobs"],
    summary="Pause a job (idempotent), with a note of why if given",
    responses=responses(401, 404, 409, 422, 429, 503),
    openapi_extra={
        "requestBody": {
            "required": False,
            "content": {"application/json": {"schema": PauseBody.model_json_schema()}},
        }
    },
)
async def pause_job(
    request: Request,
    job_id: JobIdPath,
    tenant: Tenant,
    ctx: Ctx,
    body: Annotated[Any, Body(include_in_schema=False)] = None,
) -> Response:
    note = None
    if body is not None:
        if not isinstance(body, dict) or set(body) - {"note"}:
            return invalid(
                "invalid_request", [FieldProblem("", 'the body is {"note": "why"} or nothing')]
            )
        if body.get("note") is not None:
            try:
                why = check_pause_note(body["note"])
            except JobValidationError as exc:
                return invalid("invalid_request", exc.problems)
            note = (_note_author(request, tenant), why)
    return await _pause_or_resume(ctx, RegistrationOp.PAUSE, job_id, tenant, note)


def _note_author(request: Request, tenant: str) -> str:
    """Who paused: the tenant and the prefix its API key is known by."""
    token = request.headers.get("authorization", "").partition(" ")[2].strip()
    return f"{tenant} (API key {token[:PREFIX_CHARS]}…)" if token else tenant


@jobs.post(
    "/v1/jobs/{job_id}/resume",
    response_model=Job,
    tags=["jobs"],
    summary="Resume a paused job (idempotent)",
    responses=responses(401, 404, 409, 422, 429, 503),
)
async def resume_job(job_id: JobIdPath, tenant: Tenant, ctx: Ctx) -> Response:
    return await _pause_or_resume(ctx, RegistrationOp.RESUME, job_id, tenant)


async def _start(ctx: Registry, op: Op, action: str) -> Applied:
    """Apply a trigger or backfill; 404 / 409 as for the job's other operations."""
    applied = await _applied(ctx, op)
    if applied.outcome is Outcome.NOT_FOUND:
        raise not_found(op.job_id)
    if applied.outcome is Outcome.CONFLICT:
        raise conflict(op.job_id, action)
    return applied


@jobs.post(
    "/v1/jobs/{job_id}/trigger",
    response_model=TriggerAccepted,
    status_code=202,
    tags=["runs"],
    summary="Run the job once now, outside its schedule (paused jobs too)",
    responses=responses(401, 404, 409, 422, 429, 503),
)
async def trigger_job(
    job_id: JobIdPath,
    tenant: Tenant,
    ctx: Ctx,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="the same key for the same job within 24 h answers the first "
            f"request's run key and starts nothing; 1 to {IDEMPOTENCY_KEY_MAX_CHARS} printable "
            "ASCII characters",
        ),
    ] = None,
) -> Response:
    try:
        key = checked_idempotency_key(idempotency_key, "Idempotency-Key")
    except JobValidationError as exc:
        return invalid("invalid_request", exc.problems)
    op = Op(RegistrationOp.TRIGGER, tenant, job_id, request=TriggerRequest(key))
    applied = await _start(ctx, op, "triggered")
    started = applied.started
    assert isinstance(started, Triggered)
    return JsonResponse({"run_key": started.run_key}, status_code=202)


@jobs.post(
    "/v1/jobs/{job_id}/backfill",
    response_model=BackfillAccepted,
    status_code=202,
    tags=["runs"],
    summary="Run every past occurrence of the job's schedule in [from, to) that has no run",
    responses=responses(401, 404, 409, 422, 429, 503),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": BackfillBody.model_json_schema(by_alias=True)}
            },
        }
    },
)
async def backfill_job(
    job_id: JobIdPath,
    tenant: Tenant,
    ctx: Ctx,
    body: Annotated[Any, Body(include_in_schema=False)] = None,
) -> Response:
    try:
        window = backfill_window(body)
    except JobValidationError as exc:
        return invalid("invalid_request", exc.problems)
    op = Op(RegistrationOp.BACKFILL, tenant, job_id, request=window)
    applied = await _start(ctx, op, "backfilled")
    if applied.problem is not None:
        return invalid(
            "invalid_request", [FieldProblem(applied.problem.field, applied.problem.message)]
        )
    done = applied.started
    assert isinstance(done, Backfilled)
    limits = ctx.store.run_limits
    return JsonResponse(
        {
            "runs": done.created,
            "occurrences": done.occurrences,
            "existing": done.occurrences - done.created,
            "first": None if done.first_ms is None else run_key(tenant, job_id, done.first_ms),
            "last": None if done.last_ms is None else run_key(tenant, job_id, done.last_ms),
            "rate_per_s": limits.backfill_rate_per_s,
        },
        status_code=202,
    )


@jobs.get(
    "/v1/jobs/{job_id}/runs",
    response_model=RunPage,
    tags=["runs"],
    summary="A job's runs, newest first",
    responses=responses(401, 404, 422, 503),
)
async def list_runs(
    job_id: JobIdPath,
    tenant: Tenant,
    ctx: Ctx,
    limit: Limit = PAGE_LIMIT_DEFAULT,
    cursor: CursorParam = None,
) -> Response:
    try:
        before = None if cursor is None else runs_before(cursor)
    except CursorError:
        raise bad_cursor() from None
    await _current(ctx, tenant, job_id)
    items, last = await ctx.store.runs(tenant, job_id, before_ms=before, limit=limit)
    return JsonResponse(
        {
            "items": [run_body(r) for r in items],
            "next": None if last is None else runs_cursor(last),
        }
    )


# -- operations -------------------------------------------------------------------------------


@operations.get(
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
async def healthz(ctx: Ctx) -> Response:
    reported = parts_body(ctx.parts)
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
    problem = await ctx.store.health(HEALTH_TIMEOUT_S)
    if problem is not None:
        return JsonResponse(
            {
                "status": "unavailable",
                "detail": f"the database does not answer ({problem})",
                "parts": reported,
            },
            status_code=503,
        )
    return JsonResponse({"status": "ok", "parts": reported})


@operations.get(
    "/metrics",
    tags=["operations"],
    summary="Prometheus metrics (no auth)",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"}
    },
)
async def prometheus_metrics(ctx: Ctx) -> Response:
    return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)
