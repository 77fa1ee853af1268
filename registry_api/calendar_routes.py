"""The calendars' endpoints (`/v1/calendars`, D-286; user contract in docs/API.md).

Scoped to the tenant of the request's bearer key, like the jobs: another tenant's calendar is
one that does not exist. The writes are `calendars.py`'s, shared with the Kafka intake.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.responses import Response

from tickwheel.registry_api import calendars as store
from tickwheel.registry_api.body import authenticated_first
from tickwheel.registry_api.calendars import CalendarOutcome
from tickwheel.registry_api.errors import ApiError, JsonResponse
from tickwheel.registry_api.models import responses
from tickwheel.registry_api.params import Ctx, Tenant, authenticate_request
from tickwheel.schedule.calendars import CALENDAR_NAME_PATTERN
from tickwheel.wire.calendar import Calendar, CalendarDocument, CalendarPage

calendars = APIRouter(route_class=authenticated_first(authenticate_request))

NamePath = Annotated[
    str,
    Path(
        pattern=CALENDAR_NAME_PATTERN,
        description="the calendar's name: 1-64 of A-Z a-z 0-9 . _ -, not starting with a dot",
    ),
]


def _missing(name: str) -> ApiError:
    return ApiError(404, "not_found", f"there is no calendar named {name!r}")


@calendars.put(
    "/v1/calendars/{name}",
    response_model=Calendar,
    status_code=200,
    tags=["calendars"],
    summary="Create or replace an exclusion calendar",
    responses={
        200: {"model": Calendar, "description": "replaced, or unchanged"},
        201: {"model": Calendar, "description": "created"},
        **responses(401, 409, 413, 422, 503),
    },
)
async def put_calendar(name: NamePath, doc: CalendarDocument, tenant: Tenant, ctx: Ctx) -> Response:
    document = store.check_calendar(name, doc)
    result = await store.put(ctx.store.pool, tenant, name, document)
    if result.outcome is CalendarOutcome.OVER_LIMIT:
        raise ApiError(409, "too_many_calendars", result.detail)
    assert result.calendar is not None
    status = 201 if result.outcome is CalendarOutcome.CREATED else 200
    return JsonResponse(result.calendar.body(), status_code=status)


@calendars.get(
    "/v1/calendars",
    response_model=CalendarPage,
    tags=["calendars"],
    summary="List the tenant's calendars, by name",
    responses=responses(401, 503),
)
async def list_calendars(tenant: Tenant, ctx: Ctx) -> Response:
    found = await store.list_all(ctx.store.pool, tenant)
    return JsonResponse({"items": [c.body() for c in found]})


@calendars.get(
    "/v1/calendars/{name}",
    response_model=Calendar,
    tags=["calendars"],
    summary="Get a calendar",
    responses=responses(401, 404, 422, 503),
)
async def get_calendar(name: NamePath, tenant: Tenant, ctx: Ctx) -> Response:
    found = await store.get(ctx.store.pool, tenant, name)
    if found is None:
        raise _missing(name)
    return JsonResponse(found.body())


@calendars.delete(
    "/v1/calendars/{name}",
    status_code=204,
    tags=["calendars"],
    summary="Delete a calendar (refused while jobs name it, unless force)",
    response_class=Response,
    responses={204: {"description": "deleted"}, **responses(401, 404, 409, 422, 503)},
)
async def delete_calendar(
    name: NamePath,
    tenant: Tenant,
    ctx: Ctx,
    force: Annotated[
        bool,
        Query(
            description="delete even while jobs name it: they then run as if it excluded nothing"
        ),
    ] = False,
) -> Response:
    result = await store.delete(ctx.store.pool, tenant, name, force=force)
    if result.outcome is CalendarOutcome.NOT_FOUND:
        raise _missing(name)
    if result.outcome is CalendarOutcome.IN_USE:
        raise ApiError(
            409,
            "calendar_in_use",
            result.detail,
            fields={"jobs": list(result.jobs), "more_jobs": result.more_jobs},
        )
    return Response(status_code=204)
