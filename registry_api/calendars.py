"""A tenant's exclusion calendars (issue 50, D-286): stored, read and deleted by the registry.

One code path for HTTP (`PUT/GET/DELETE /v1/calendars/{name}`), the Kafka registrations
(`put_calendar`, `delete_calendar`) and the client. A calendar is checked whole before it is
stored (`check_calendar`: its shape by the wire model, what needs reading by
`tickwheel.schedule.calendars.parse_calendar`), so what a leader reads always parses.

Each write is one short transaction under the calendar's row lock:

- put: unchanged when the document is the stored one; a new calendar counts against the
  tenant's `MAX_TENANT_CALENDARS` (the tenant's row locked, so two creations cannot both take
  the last place);
- delete: refused while a job that is not deleted names the calendar (`InUse`, the first
  jobs found), unless `force` — the jobs then run as if it excluded nothing. The jobs' batch
  share-locks the calendars it names (`RegistryStore._missing_calendars`), so a delete and a
  job naming the calendar never both commit unseen by each other.
A deleted calendar keeps its row with no document: the leaders' poll sees the delete.

A Kafka registration becomes a `CalendarOp` (registry_api/admission.py), which the intake
applies at its place in the batch (`apply`) with its source position, so a redelivered one is
a `REPLAY` and changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import asyncpg
import orjson
from pydantic import ValidationError

from tickwheel.clock import format_datetime
from tickwheel.domain import RegistrationOp
from tickwheel.queries import QUERIES
from tickwheel.registry_api.document import (
    FieldProblem,
    JobValidationError,
    check_pause_note,
    storable_problems,
)
from tickwheel.schedule import ScheduleError
from tickwheel.schedule.calendars import CALENDAR_NAME_PATTERN, Calendar, parse_calendar
from tickwheel.wire.calendar import CalendarDocument

MAX_TENANT_CALENDARS = 100
IN_USE_SHOWN = 100  # jobs named in a refused delete


class CalendarOutcome(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    DELETED = "deleted"
    NOT_FOUND = "not_found"
    REPLAY = "replay"  # a Kafka registration at or below the position last applied
    IN_USE = "in_use"  # a delete refused: jobs name it (`CalendarResult.jobs`)
    OVER_LIMIT = "over_limit"  # a new calendar beyond MAX_TENANT_CALENDARS


@dataclass(frozen=True)
class CalendarView:
    tenant: str
    name: str
    version: int
    document: dict[str, Any]
    updated_at: str  # ISO-8601, UTC

    def body(self) -> dict[str, Any]:
        """The HTTP answer (`tickwheel.wire.calendar.Calendar`)."""
        return {
            "name": self.name,
            **self.document,
            "version": self.version,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True)
class CalendarResult:
    outcome: CalendarOutcome
    calendar: CalendarView | None = None  # as stored after the write
    jobs: tuple[str, ...] = ()  # IN_USE: the jobs naming it (at most IN_USE_SHOWN)
    more_jobs: bool = False  # IN_USE: there are more than `jobs`

    @property
    def detail(self) -> str:
        """A refusal in one sentence (a Kafka rejection's reason, a 409's detail)."""
        if self.outcome is CalendarOutcome.IN_USE:
            named = ", ".join(repr(j) for j in self.jobs) + (" and more" if self.more_jobs else "")
            return (
                f"jobs still name this calendar: {named}; remove it from them first, or "
                "delete with force (they then run as if it excluded nothing)"
            )
        if self.outcome is CalendarOutcome.OVER_LIMIT:
            return f"the tenant has {MAX_TENANT_CALENDARS} calendars, the most it may have"
        return self.outcome.value


@dataclass(frozen=True)
class CalendarOp:
    """A calendar registration admitted from Kafka, to be applied at its place in its batch."""

    kind: str  # RegistrationOp.PUT_CALENDAR | RegistrationOp.DELETE_CALENDAR
    tenant: str
    name: str
    source: tuple[int, int]  # (partition, offset) of the registration
    document: dict[str, Any] | None = None  # put: from `check_calendar`
    force: bool = False  # delete: even while jobs name it


async def apply(pool: asyncpg.Pool, op: CalendarOp) -> CalendarResult:
    """Apply one calendar registration: `put` or `delete` with its source position."""
    if op.kind == RegistrationOp.PUT_CALENDAR:
        assert op.document is not None  # admission checked it
        return await put(pool, op.tenant, op.name, op.document, op.source)
    return await delete(pool, op.tenant, op.name, force=op.force, source=op.source)


def check_name(name: str) -> None:
    """JobValidationError (field `name`) for a name a calendar cannot have."""
    if not re.fullmatch(CALENDAR_NAME_PATTERN, name):
        raise JobValidationError(
            [
                FieldProblem(
                    "name",
                    f"{name!r} is not a calendar name: 1-64 of A-Z a-z 0-9 . _ -, "
                    "not starting with a dot",
                )
            ]
        )


def check_calendar(name: str, value: Any) -> dict[str, Any]:
    """The calendar document to store for `value` (a decoded JSON body or a registration's
    `calendar`), defaults filled in; JobValidationError naming every field at fault."""
    check_name(name)
    try:
        doc = CalendarDocument.model_validate(value)
    except ValidationError as exc:
        raise JobValidationError(
            [
                FieldProblem(".".join(str(p) for p in e["loc"]) or "(calendar)", e["msg"])
                for e in exc.errors(include_url=False)
            ]
        ) from None
    stored = doc.model_dump(mode="json")
    if problems := storable_problems(stored):
        raise JobValidationError(problems)  # a NUL or a lone surrogate Postgres cannot store
    if stored.get("description") is not None:
        check_pause_note(stored["description"], "description")  # shown in terminals too
    try:
        parse_calendar(name, stored)
    except ScheduleError as exc:
        raise JobValidationError([FieldProblem(exc.field, exc.message)]) from None
    return stored


def _view(tenant: str, name: str, row: asyncpg.Record) -> CalendarView:
    return CalendarView(
        tenant,
        name,
        row["version"],
        orjson.loads(row["document"]),
        format_datetime(row["updated_at"]),
    )


async def put(
    pool: asyncpg.Pool,
    tenant: str,
    name: str,
    document: dict[str, Any],
    source: tuple[int, int] | None = None,
) -> CalendarResult:
    """Create or replace a calendar (`document` from `check_calendar`)."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(QUERIES["calendar_lock"], tenant, name)
        if _replayed(row, source):
            return CalendarResult(CalendarOutcome.REPLAY, await _get(conn, tenant, name))
        exists = row is not None and row["document"] is not None
        if row is not None and exists and orjson.loads(row["document"]) == document:
            return CalendarResult(CalendarOutcome.UNCHANGED, _view(tenant, name, row))
        if not exists:
            await conn.execute(QUERIES["calendars_tenant_lock"], tenant)
            held = await conn.fetchval(QUERIES["calendars_count"], tenant)
            if held >= MAX_TENANT_CALENDARS:
                return CalendarResult(CalendarOutcome.OVER_LIMIT)
        written = await conn.fetchrow(
            QUERIES["calendar_write"],
            tenant,
            name,
            orjson.dumps(document).decode(),
            *(source or (None, None)),
        )
        assert written is not None  # an upsert returns its row
        outcome = CalendarOutcome.UPDATED if exists else CalendarOutcome.CREATED
        return CalendarResult(outcome, _view(tenant, name, written))


async def delete(
    pool: asyncpg.Pool,
    tenant: str,
    name: str,
    *,
    force: bool = False,
    source: tuple[int, int] | None = None,
) -> CalendarResult:
    """Delete a calendar, unless jobs name it and not `force`."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(QUERIES["calendar_lock"], tenant, name)
        if _replayed(row, source):
            return CalendarResult(CalendarOutcome.REPLAY)
        if row is None or row["document"] is None:
            return CalendarResult(CalendarOutcome.NOT_FOUND)
        if not force:
            jobs = await conn.fetch(QUERIES["calendar_jobs"], tenant, name, IN_USE_SHOWN + 1)
            if jobs:
                shown = tuple(r["job_id"] for r in jobs[:IN_USE_SHOWN])
                return CalendarResult(
                    CalendarOutcome.IN_USE, jobs=shown, more_jobs=len(jobs) > IN_USE_SHOWN
                )
        await conn.execute(QUERIES["calendar_write"], tenant, name, None, *(source or (None, None)))
        return CalendarResult(CalendarOutcome.DELETED)


def _replayed(row: asyncpg.Record | None, source: tuple[int, int] | None) -> bool:
    """Whether a Kafka registration at `source` was applied to this calendar already."""
    return (
        source is not None
        and row is not None
        and row["intake_partition"] == source[0]
        and row["intake_offset"] is not None
        and row["intake_offset"] >= source[1]
    )


async def _get(conn: Any, tenant: str, name: str) -> CalendarView | None:
    row = await conn.fetchrow(QUERIES["calendar_get"], tenant, name)
    return None if row is None else _view(tenant, name, row)


async def get(pool: asyncpg.Pool, tenant: str, name: str) -> CalendarView | None:
    async with pool.acquire() as conn:
        return await _get(conn, tenant, name)


async def named(pool: asyncpg.Pool, tenant: str, names: Sequence[str]) -> dict[str, Calendar]:
    """Those of `names` the tenant has, parsed (a job's preview)."""
    rows = await pool.fetch(QUERIES["calendars_named"], tenant, list(names))
    return {r["name"]: parse_calendar(r["name"], orjson.loads(r["document"])) for r in rows}


async def list_all(pool: asyncpg.Pool, tenant: str) -> list[CalendarView]:
    """Every calendar of the tenant, by name (at most MAX_TENANT_CALENDARS)."""
    rows = await pool.fetch(QUERIES["calendars_list"], tenant)
    return [_view(tenant, r["name"], r) for r in rows]
