"""What operators see across tenants: `/v1/ops/…` (JSON) and the status page at `/ui`.

Every `/v1/ops/…` endpoint needs an operator key (`tickwheel operator-key add NAME`) as
`Authorization: Bearer <key>`: no key is a 401, a tenant's API key a 403 (a tenant sees only
its own jobs), an unknown or revoked key a 401; each of them draws from the client's budget
of failed authentications, shared with the tenants' endpoints (429 past it). Operator keys
have a lookup path of their own (`OperatorKeys`, `operator_keys` table) beside the tenants'
(auth.py); known keys are trusted for `OPERATOR_KEY_CACHE_TTL_S`, so a revoked key stops
working within that.

The page itself (`ui/index.html`, `ui/app.js`, `ui/app.css`, shipped in the package, no build
step and nothing fetched from elsewhere) is public: it holds no data. It asks for the operator
key, keeps it in the tab's sessionStorage and sends it as a Bearer header to the endpoints
above — never in a URL. A Content-Security-Policy allows only this origin's script, style and
fetches.
"""

from __future__ import annotations

from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from starlette.responses import Response

from tickwheel.registry_api.auth import AuthProblem, KeyCache, bearer_key
from tickwheel.registry_api.errors import ApiError, JsonResponse
from tickwheel.registry_api.models import ErrorBody
from tickwheel.registry_api.ops.keys import OperatorKeys
from tickwheel.registry_api.ops.store import BUCKET_MS, OpsStore
from tickwheel.registry_api.params import Ctx, Registry, registry_of, within_failed_auth_limit

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
OPERATOR_KEY_CACHE_TTL_S = 5.0  # seconds a known operator key is trusted without a lookup
WINDOW_MINUTES_DEFAULT = 10
WINDOW_MINUTES_MAX = 60
DEAD_LIMIT_DEFAULT = 20
DEAD_LIMIT_MAX = 200
DEAD_HOURS_DEFAULT = 24
DEAD_HOURS_MAX = 24 * 30
UI_FILES = {  # name → media type
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "views.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
UI_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
NO_STORE = {"Cache-Control": "no-store"}  # operator data stays out of every cache

_operator_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="OperatorKey",
    description="An operator key (`tickwheel operator-key add NAME`) as `Bearer <key>`.",
)
ERRORS: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorBody, "description": "missing, malformed, unknown or revoked key"},
    403: {"model": ErrorBody, "description": "a tenant's API key: these need an operator key"},
    503: {"model": ErrorBody, "description": "the database is unavailable"},
}


def _operator_keys(request: Request) -> KeyCache:
    cache: KeyCache = request.app.state.operator_keys
    return cache


async def operator_of(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_operator_bearer)],
) -> str:
    """The operator's name, from the request's bearer key (401, or 403 for a tenant key),
    under the same budget of failed authentications as the tenants' endpoints: a 403 tells
    a valid tenant key from an invalid one, so it draws from the budget like a 401, and
    guessing keys here is no cheaper than on /v1/jobs."""

    async def operator() -> str:
        key = bearer_key(request.headers.get("authorization"))
        name = await _operator_keys(request).tenant(key)
        if name is not None:
            request.state.tenant = f"operator:{name}"  # the request log's who
            return name
        if await registry_of(request).keys.tenant(key) is not None:
            raise ApiError(
                403,
                "forbidden",
                "this endpoint shows every tenant's data and needs an operator key "
                "('tickwheel operator-key add NAME'), not a tenant's API key",
            )
        raise AuthProblem("the operator key is not valid (unknown or revoked)", invalid_token=True)

    return await within_failed_auth_limit(request, operator)


Operator = Annotated[str, Depends(operator_of)]


def _ops(ctx: Registry) -> OpsStore:
    # The store's pool is read per request: tests may open it after the app is built.
    return OpsStore(ctx.store.pool, ctx.limits.shards)


# --- response models (the OpenAPI document's promise) ------------------------------------------


class ShardItem(BaseModel):
    shard: int
    owner: str | None = Field(..., description="the leader's id; null: never led or stepped down")
    epoch: int = Field(..., description="bumped by every takeover; 0: never led")
    since_ms: int | None = Field(..., description="the last takeover, UTC ms")
    behind_ms: int | None = Field(
        ..., description="how long the shard's oldest due job has waited to be claimed, ms"
    )


class Shards(BaseModel):
    shards: int
    led: int = Field(..., description="shards with an owner")
    items: list[ShardItem]


class BucketItem(BaseModel):
    start_ms: int
    created: int
    published: int
    finished: int
    dead: int
    lag_p50_ms: float | None
    lag_p99_ms: float | None


class Throughput(BaseModel):
    bucket_ms: int
    from_ms: int
    to_ms: int
    buckets: list[BucketItem]


class DeadItem(BaseModel):
    run_key: str
    tenant: str
    job_id: str
    scheduled_ms: int
    attempt: int
    dead_ms: int
    last_error: str | None


class DeadRuns(BaseModel):
    items: list[DeadItem]


class TenantItem(BaseModel):
    tenant: str
    created_at: str = Field(..., description="ISO-8601, UTC")
    jobs: int = Field(..., description="registered jobs (rows not deleted)")
    active_keys: int
    max_jobs: int | None = Field(..., description="quota; null: none")
    max_registrations_per_s: float | None = Field(..., description="quota; null: none")
    registrations_burst: int | None = Field(..., description="null: one second's worth")
    max_running: int | None = Field(..., description="cap on runs running at once; null: none")
    running: int | None = Field(
        ..., description="runs running now across the cluster; counted only when capped"
    )


class Tenants(BaseModel):
    items: list[TenantItem]


# --- endpoints -----------------------------------------------------------------------------------

ops = APIRouter(prefix="/v1/ops", tags=["operators"], responses=ERRORS)


@ops.get("/shards", response_model=Shards, summary="Each shard's leader: owner, epoch, since")
async def shards(ctx: Ctx, _: Operator) -> Response:
    leaders = await _ops(ctx).shard_leaders()
    return JsonResponse(
        {
            "shards": len(leaders),
            "led": sum(1 for s in leaders if s.owner is not None),
            "items": [
                {
                    "shard": s.shard,
                    "owner": s.owner,
                    "epoch": s.epoch,
                    "since_ms": s.since_ms,
                    "behind_ms": s.behind_ms,
                }
                for s in leaders
            ],
        },
        headers=NO_STORE,
    )


@ops.get(
    "/throughput",
    response_model=Throughput,
    summary="Runs created, published, finished and dispatch lag per 10 s, all tenants",
)
async def throughput(
    ctx: Ctx,
    _: Operator,
    minutes: Annotated[
        int, Query(ge=1, le=WINDOW_MINUTES_MAX, description="the window, minutes (1..60)")
    ] = WINDOW_MINUTES_DEFAULT,
) -> Response:
    count = minutes * MINUTE_MS // BUCKET_MS
    buckets = await _ops(ctx).run_rates(ctx.clock(), count)
    return JsonResponse(
        {
            "bucket_ms": BUCKET_MS,
            "from_ms": buckets[0].start_ms,
            "to_ms": buckets[-1].start_ms + BUCKET_MS,
            "buckets": [vars(b) for b in buckets],
        },
        headers=NO_STORE,
    )


@ops.get(
    "/tenants",
    response_model=Tenants,
    summary="Every tenant with its jobs, quotas, cap and, when capped, its runs running now",
)
async def tenants(ctx: Ctx, _: Operator) -> Response:
    return JsonResponse({"items": await ctx.store.tenants()}, headers=NO_STORE)


@ops.get("/dead", response_model=DeadRuns, summary="The newest dead runs, all tenants")
async def dead(
    ctx: Ctx,
    _: Operator,
    hours: Annotated[
        int, Query(ge=1, le=DEAD_HOURS_MAX, description="how far back, hours")
    ] = DEAD_HOURS_DEFAULT,
    limit: Annotated[
        int, Query(ge=1, le=DEAD_LIMIT_MAX, description="at most this many (1..200)")
    ] = DEAD_LIMIT_DEFAULT,
) -> Response:
    runs = await _ops(ctx).dead_runs(ctx.clock() - hours * HOUR_MS, limit)
    return JsonResponse({"items": [vars(r) for r in runs]}, headers=NO_STORE)


# --- the page ------------------------------------------------------------------------------------

ui = APIRouter(include_in_schema=False)


def _ui_file(name: str) -> bytes:
    return (resources.files("tickwheel.registry_api.ops") / "ui" / name).read_bytes()


@ui.get("/ui")
async def page() -> Response:
    return Response(_ui_file("index.html"), media_type=UI_FILES["index.html"], headers=UI_HEADERS)


@ui.get("/ui/{name}")
async def asset(name: str) -> Response:
    if name not in UI_FILES or name == "index.html":
        raise ApiError(404, "not_found", f"there is no file {name!r} of the status page")
    return Response(_ui_file(name), media_type=UI_FILES[name], headers=UI_HEADERS)


def install(app: FastAPI) -> None:
    """Add the operator endpoints and the status page to the registry's app."""
    registry: Registry = app.state.registry

    async def lookup(key: str) -> str | None:
        return await OperatorKeys(registry.store.pool).operator_for_key(key)

    app.state.operator_keys = KeyCache(lookup, ttl_s=OPERATOR_KEY_CACHE_TTL_S)
    app.include_router(ops)
    app.include_router(ui)
