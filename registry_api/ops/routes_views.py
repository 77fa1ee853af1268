"""The operators' page beyond the jobs list: one job (`GET /v1/ops/jobs/{tenant}/{job_id}`),
one run (`GET /v1/ops/runs/{run key}`), the dead letters (`GET /v1/ops/dead-letters`) and
their replay (`POST /v1/ops/dead-letters/replay`, `GET /v1/ops/replays/{id}`), behind
operator keys like the rest of `/v1/ops/…` (routes.py).

The page's dead letters are the ledger's dead runs (views.py `dead_letters`, D-280): the runs
a dead letter was published for and that are still dead, read through `job_runs_dead` in a few
milliseconds where a read of the topic decoded every letter since `since` (0.47 s for a day of
14,000). `tickwheel dlq ls|replay` read the topic itself. A replay from the page chooses its
runs with the same filters from the same place, and goes through the same `replay`
(registry_api/replay.py) as the CLI's, recorded in the replay audit under the operator key's
name. A dry run answers at once with what it would do; a replay answers 202 with its audit id
as soon as that row is written and goes on in this process (one at a time per process), paced
by its rate; `GET /v1/ops/replays/{id}` says how far it got. A registry stopped mid-replay
leaves the audit row `interrupted`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from tickwheel.cli_support import BadInput
from tickwheel.clock import now_ms
from tickwheel.domain import RunKeyError
from tickwheel.registry_api.errors import ApiError, JsonResponse
from tickwheel.registry_api.models import ErrorBody
from tickwheel.registry_api.ops.forms import parse_rate, parse_since
from tickwheel.registry_api.ops.routes import ERRORS, NO_STORE, Operator
from tickwheel.registry_api.ops.routes_jobs import (
    FILTER_MAX_CHARS,
    PRINTABLE,
    JobId,
    JobTenant,
    checked,
)
from tickwheel.registry_api.ops.runs import replay_audit_entry
from tickwheel.registry_api.ops.views import (
    COUNT_MAX,
    DeadFilter,
    dead_letters,
    job_detail,
    run_detail,
)
from tickwheel.registry_api.params import Ctx
from tickwheel.registry_api.replay import ReplayReport, replay

log = logging.getLogger("tickwheel.registry.ops")

LETTERS_LIMIT_DEFAULT = 50
LETTERS_LIMIT_MAX = 200
REPLAY_LIMIT_MAX = 100_000  # runs one replay from the page may select (more: the CLI)
INT64_MAX = 2**63 - 1  # an audit id is a bigint
REPLAY_RUNS_SHOWN = 200  # runs a dry run's answer lists (its counts cover all)

Text = Annotated[str | None, Query(max_length=FILTER_MAX_CHARS, pattern=PRINTABLE)]


@dataclass
class Running:
    """A replay this process runs: how many runs it selected and how many it has been through."""

    audit_id: int
    total: int
    done: int = 0
    task: asyncio.Task[ReplayReport] | None = None


class ReplayBody(BaseModel):
    """The filters of `tickwheel dlq replay`, its rate and budget, and whether to only look."""

    model_config = ConfigDict(extra="forbid")
    tenant: str | None = Field(None, max_length=FILTER_MAX_CHARS, pattern=PRINTABLE)
    job: str | None = Field(
        None, max_length=FILTER_MAX_CHARS, pattern=PRINTABLE, description="a job id"
    )
    error: str | None = Field(
        None,
        max_length=FILTER_MAX_CHARS,
        pattern=PRINTABLE,
        description="a piece of the error, any case",
    )
    since: str | None = Field(
        None, max_length=64, description="dead at or after: ISO-8601 or `<n>s|m|h|d` ago"
    )
    limit: int | None = Field(None, ge=1, le=REPLAY_LIMIT_MAX, description="oldest first")
    rate: str | None = Field(None, max_length=32, description="replays per second, e.g. 50/s")
    attempts: int | None = Field(
        None, ge=1, le=100, description="a fresh budget per run; null: the job's max_attempts"
    )
    dry_run: bool = Field(False, description="say what would happen; change nothing")


def _filter(
    tenant: str | None, job: str | None, error: str | None, since: str | None
) -> DeadFilter:
    try:
        since_ms = None if not since else parse_since(since, now_ms())
    except BadInput as err:
        raise ApiError(422, "invalid", f"since: {err}") from None
    return DeadFilter(since_ms, tenant or None, job or None, error or None)


views = APIRouter(prefix="/v1/ops", tags=["operators"], responses=ERRORS)
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "no such job or run"}
}


@views.get(
    "/jobs/{tenant}/{job_id}",
    summary="One job: schedule, next occurrences explained, latest runs, pause note, actions",
    responses=NOT_FOUND,
)
async def job(ctx: Ctx, _: Operator, tenant: JobTenant, job_id: JobId) -> Response:
    async with ctx.store.pool.acquire() as conn:
        found = await job_detail(conn, tenant, job_id, shards=ctx.limits.shards, now_ms=ctx.clock())
    if found is None:
        raise ApiError(404, "not_found", f"no job {tenant}/{job_id} (deleted jobs are gone)")
    return JsonResponse(found, headers=NO_STORE)


@views.get(
    "/runs/{run_key:path}",
    summary="One run: attempt, worker, timings, origin, last error and the replays of it",
    responses=NOT_FOUND,
)
async def run(
    ctx: Ctx, _: Operator, run_key: Annotated[str, Path(max_length=300, pattern=PRINTABLE)]
) -> Response:
    try:
        async with ctx.store.pool.acquire() as conn:
            found = await run_detail(conn, run_key)
    except RunKeyError as err:
        raise ApiError(422, "invalid", str(err)) from None
    if found is None:
        raise ApiError(404, "not_found", f"no run {run_key}")
    return JsonResponse(found, headers=NO_STORE)


@views.get(
    "/dead-letters",
    summary="The dead runs (each one's dead letter), filtered, oldest death first",
)
async def dead_letters_page(
    ctx: Ctx,
    _: Operator,
    tenant: Text = None,
    job: Text = None,
    error: Text = None,
    since: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=LETTERS_LIMIT_MAX)] = LETTERS_LIMIT_DEFAULT,
) -> Response:
    flt = _filter(tenant, job, error, since)
    async with ctx.store.pool.acquire() as conn:
        items, matching = await dead_letters(conn, flt, limit)
    return JsonResponse(
        {
            "filters": flt.to_json(),
            "matching": matching,
            "matching_capped": (matching or 0) >= COUNT_MAX,
            "items": items,
        },
        headers=NO_STORE,
    )


def _running(request: Request) -> dict[int, Running]:
    replays: dict[int, Running] = request.app.state.replays
    return replays


@views.post(
    "/dead-letters/replay",
    summary="Replay the selected dead letters (as `tickwheel dlq replay`), paced by a rate; "
    "a dry run says what it would do",
    responses={
        403: {"model": ErrorBody, "description": "a tenant's key, or no valid CSRF token"},
        409: {"model": ErrorBody, "description": "a replay of this registry is under way"},
        422: {"model": ErrorBody, "description": "a malformed body"},
    },
)
async def replay_letters(request: Request, ctx: Ctx, name: Operator, body: ReplayBody) -> Response:
    checked(request)
    try:
        rate = None if not body.rate else parse_rate(body.rate)
    except BadInput as err:
        raise ApiError(422, "invalid", f"rate: {err}") from None
    running = _running(request)
    if not body.dry_run and any(r.task is not None and not r.task.done() for r in running.values()):
        raise ApiError(409, "conflict", "a replay of this registry is under way: wait for it")
    flt = _filter(body.tenant, body.job, body.error, body.since)
    async with ctx.store.pool.acquire() as conn:
        chosen, _ = await dead_letters(conn, flt, body.limit or REPLAY_LIMIT_MAX, None)
    keys = [letter["run_key"] for letter in chosen]
    filters = {**flt.to_json(), "limit": body.limit}
    if body.dry_run:
        async with ctx.store.pool.acquire() as conn:
            report = await replay(
                conn, keys, filters, operator=str(name), attempts=body.attempts, dry_run=True
            )
        answer = report.to_json()
        answer["runs"] = answer["runs"][:REPLAY_RUNS_SHOWN]
        return JsonResponse({"filters": filters, **answer}, headers=NO_STORE)
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    entry = Running(0, len(keys))

    def on_progress(count: int) -> None:
        entry.done += count

    def on_start(audit_id: int) -> None:
        entry.audit_id = audit_id
        for old in [k for k, r in running.items() if r.task is not None and r.task.done()]:
            del running[old]  # finished: their audit rows say the rest
        running[audit_id] = entry
        started.set_result(audit_id)

    async def work() -> ReplayReport:
        async with ctx.store.pool.acquire() as conn:
            return await replay(
                conn, keys, filters, operator=str(name), attempts=body.attempts,
                rate_per_s=rate, on_progress=on_progress, on_start=on_start,
            )  # fmt: skip

    entry.task = asyncio.create_task(work(), name="dead-letter replay")
    entry.task.add_done_callback(_logged)
    waited: set[asyncio.Future[Any]] = {started, entry.task}
    done, _ = await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
    if started not in done:  # failed before its audit row: its error is the answer
        entry.task.result()
    audit_id = started.result()
    return JsonResponse(
        {"audit_id": audit_id, "selected": len(keys), "rate_per_s": rate},
        status_code=202,
        headers=NO_STORE,
    )


def _logged(task: asyncio.Task[ReplayReport]) -> None:
    if task.cancelled():
        return
    err = task.exception()
    if err is not None:
        log.error("a dead-letter replay from the page failed", exc_info=err)


@views.get(
    "/replays/{audit_id}",
    summary="One replay's record; while this registry runs it, how far it got",
    responses=NOT_FOUND,
)
async def replay_entry(
    request: Request, ctx: Ctx, _: Operator, audit_id: Annotated[int, Path(ge=1, le=INT64_MAX)]
) -> Response:
    async with ctx.store.pool.acquire() as conn:
        found = await replay_audit_entry(conn, audit_id)
    if found is None:
        raise ApiError(404, "not_found", f"no replay {audit_id}")
    entry = _running(request).get(audit_id)
    progress: dict[str, Any] | None = None
    if entry is not None:
        progress = {
            "total": entry.total,
            "done": entry.done,
            "running": entry.task is not None and not entry.task.done(),
        }
    return JsonResponse({**found, "progress": progress}, headers=NO_STORE)


def install(app: FastAPI) -> None:
    """Add the job, run and dead-letter views to the registry's app (after routes_jobs: its
    routes answer the paths they share with these first)."""
    app.state.replays = {}
    app.include_router(views)


async def interrupt_replays(app: FastAPI) -> None:
    """At the registry's stop (before its pool closes): a replay under way ends `interrupted`
    in its audit, with what it did so far, rather than being dropped with the event loop."""
    replays: dict[int, Running] = app.state.replays
    tasks = [r.task for r in replays.values() if r.task is not None and not r.task.done()]
    for task in tasks:
        task.cancel()
    # Each one's own failure, if it failed rather than stopped, is logged by `_logged`.
    await asyncio.gather(*tasks, return_exceptions=True)
