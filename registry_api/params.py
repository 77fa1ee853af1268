"""What a request hands an endpoint: the app's registry context, the tenant of its bearer key,
and the path and query parameters the job endpoints share."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, TypeVar

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tickwheel.domain import JOB_ID_PATTERN
from tickwheel.registry_api.auth import (
    AuthProblem,
    FailedAuthLimiter,
    KeyCache,
    authenticate,
    client_of,
)
from tickwheel.registry_api.document import Limits
from tickwheel.registry_api.errors import ApiError
from tickwheel.registry_api.metrics import Metrics
from tickwheel.registry_api.store import PAGE_LIMIT_MAX, RegistryStore
from tickwheel.runtime import PartState

PAGE_LIMIT_DEFAULT = 100
T = TypeVar("T")


@dataclass(frozen=True)
class Registry:
    """What every endpoint of one app works with (`app.state.registry`)."""

    store: RegistryStore
    limits: Limits
    clock: Callable[[], int]  # now, UTC milliseconds
    metrics: Metrics
    keys: KeyCache
    # The process's health records of its long-running parts, which /healthz reports.
    parts: Mapping[str, PartState] = field(default_factory=dict)
    # Failed authentications per client address (429 past a burst): auth.py.
    auth_failures: FailedAuthLimiter = field(default_factory=FailedAuthLimiter)


def registry_of(request: Request) -> Registry:
    registry: Registry = request.app.state.registry
    return registry


_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="The tenant's API key (`tickwheel tenant add NAME`) as `Bearer <key>`.",
)


async def within_failed_auth_limit(request: Request, authenticate: Callable[[], Awaitable[T]]) -> T:
    """`authenticate()` under the client's budget of failed authentications (auth.py), one
    budget for the tenants' and the operators' endpoints: 429 with Retry-After for a client
    that failed too often lately, before any key is looked up; a refusal (401, or 403 for a
    key of the wrong kind) draws from it."""
    registry = registry_of(request)
    client = client_of(request.client.host if request.client else None)
    wait_s = registry.auth_failures.retry_after_s(client)
    if wait_s > 0:
        raise ApiError(
            429,
            "too_many_requests",
            "too many failed authentications from this address; retry after the time "
            "in the Retry-After header",
            {"Retry-After": str(math.ceil(wait_s))},
        )
    try:
        return await authenticate()
    except (AuthProblem, ApiError):
        registry.auth_failures.failed(client)
        raise


async def _authenticated(request: Request) -> str:
    """The tenant of the request's bearer key: AuthProblem → 401, or 429 (above)."""
    registry = registry_of(request)
    return await within_failed_auth_limit(
        request, lambda: authenticate(request.headers.get("authorization"), registry.keys)
    )


async def authenticate_request(request: Request) -> None:
    """Refuse (AuthProblem → 401) a request without a valid bearer key. Routes with a body run
    this before the body is read (body.authenticated_first)."""
    await _authenticated(request)


async def tenant_of(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The request's tenant, from its bearer key (AuthProblem → 401)."""
    # The HTTPBearer dependency only puts the scheme in the OpenAPI document; the header is
    # parsed here so that "missing" and "malformed" get sentences of their own.
    tenant = await _authenticated(request)
    request.state.tenant = tenant  # for the request log line
    return tenant


Ctx = Annotated[Registry, Depends(registry_of)]
Tenant = Annotated[str, Depends(tenant_of)]
JobIdPath = Annotated[
    str, Path(pattern=JOB_ID_PATTERN, description="the job's id: [A-Za-z0-9._:-]{1,128}")
]
Limit = Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX, description="items per page (1..500)")]
CursorParam = Annotated[
    str | None, Query(description="the `next` value of the previous page, unchanged")
]
