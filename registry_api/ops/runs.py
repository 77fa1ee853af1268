"""The run ledger and the replay audit as operators read them: `tickwheel runs ls|show` and
`tickwheel dlq audit` (Postgres only; the replays themselves are registry_api/replay.py's).

Rows come out as JSON-ready dicts: instants as ISO-8601 UTC text with milliseconds (the HTTP
API's form), each run with its run key.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import asyncpg
import orjson

from tickwheel.clock import format_datetime, format_ms
from tickwheel.db import Conn
from tickwheel.domain import parse_run_key, run_key
from tickwheel.queries import QUERIES

_INSTANTS = (
    "retry_at",
    "lease_until",
    "published_at",
    "started_at",
    "finished_at",
    "created_at",
    "updated_at",
)


def iso(value: dt.datetime | None) -> str | None:
    """An aware datetime as ISO-8601 UTC with milliseconds; None stays None."""
    return None if value is None else format_datetime(value)


def run_json(row: asyncpg.Record) -> dict[str, Any]:
    """A `job_runs` row (ops_runs_list / ops_run_get) as the commands print it."""
    out: dict[str, Any] = {"run_key": run_key(row["tenant"], row["job_id"], row["scheduled_at"])}
    for name, value in row.items():
        if name == "scheduled_at":
            out[name] = format_ms(value)
        elif name in _INSTANTS:
            out[name] = iso(value)
        else:
            out[name] = value
    return out


async def list_runs(
    conn: Conn,
    *,
    tenant: str | None = None,
    job_id: str | None = None,
    status: str | None = None,
    since_ms: int | None = None,
    limit: int,
) -> list[dict[str, Any]]:
    """Runs newest first, filtered; `since_ms` bounds scheduled_at from below."""
    rows = await conn.fetch(QUERIES["ops_runs_list"], tenant, job_id, status, since_ms, limit)
    return [run_json(r) for r in rows]


async def get_run(conn: Conn, key: str) -> dict[str, Any] | None:
    """One run with its job's status and what each replay did to it; None: no such row.

    Raises `tickwheel.domain.RunKeyError` for a string that is not a run key.
    """
    tenant, job_id, scheduled_ms = parse_run_key(key)
    row = await conn.fetchrow(QUERIES["ops_run_get"], tenant, job_id, scheduled_ms)
    if row is None:
        return None
    out = run_json(row)
    out["replays"] = await replays_of(conn, key)
    return out


async def replays_of(conn: Conn, key: str) -> list[dict[str, Any]]:
    """What each recorded replay did to the run `key`, oldest first."""
    rows = await conn.fetch(QUERIES["ops_replay_audit_of_run"], *parse_run_key(key))
    return [
        {
            "audit_id": r["id"],
            "at": iso(r["started_at"]),
            "operator": r["operator"],
            "outcome": r["outcome"],
            "reason": r["reason"],
        }
        for r in rows
    ]


def audit_json(row: asyncpg.Record) -> dict[str, Any]:
    """One `ops_replay_audit_list` row as `dlq audit --json` prints it."""
    return {
        "id": row["id"],
        "started_at": iso(row["started_at"]),
        "finished_at": iso(row["finished_at"]),
        "operator": row["operator"],
        "outcome": row["outcome"],
        "filters": orjson.loads(row["filters"]),
        "attempts": row["attempts"],
        "rate_per_s": row["rate_per_s"],
        "selected": row["selected"],
        "replayed": row["replayed"],
        "skipped": row["skipped"],
        "refused": row["refused"],
    }


async def replay_audit(conn: Conn, limit: int) -> list[dict[str, Any]]:
    """The latest `limit` replays, newest first."""
    return [audit_json(r) for r in await conn.fetch(QUERIES["ops_replay_audit_list"], limit)]


async def replay_audit_entry(conn: Conn, ident: int) -> dict[str, Any] | None:
    """One replay's record by its id (None: no such replay)."""
    row = await conn.fetchrow(QUERIES["ops_replay_audit_get"], ident)
    return None if row is None else audit_json(row)
