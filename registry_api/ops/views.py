"""What the operators' page shows of one job and of one run (`GET /v1/ops/jobs/{t}/{id}`,
`GET /v1/ops/runs/{run key}`), read from Postgres through the same reads as `tickwheel jobs
show` and `tickwheel runs show` (ops/jobs.py, ops/runs.py) and the tenants' preview
(render.py `preview_body`); and its dead letters, the ledger's dead runs (D-280).

Nothing a tenant keeps secret reaches the page: an HTTP target's header values are replaced by
`HIDDEN`, and its URL loses any user information and query (both may carry credentials). The
payload is shown: operators need it to see what a run did, and the page puts it in as text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from tickwheel.clock import format_ms
from tickwheel.db import Conn
from tickwheel.domain import parse_run_key, run_key
from tickwheel.queries import QUERIES
from tickwheel.registry_api.document import spec_from_stored
from tickwheel.registry_api.ops.jobs import get_job
from tickwheel.registry_api.ops.runs import get_run, iso
from tickwheel.registry_api.render import preview_body
from tickwheel.registry_api.rows import job_view

HIDDEN = "(hidden)"
PREVIEW_COUNT = 5  # next occurrences the job view explains
AUDIT_ENTRIES = 20  # operators' actions on a job the job view lists
COUNT_MAX = 10_000  # dead runs the dead-letter view counts at most ("10,000+")
_LIKE_SPECIAL = re.compile(r"[\\%_]")  # what a LIKE pattern would read as more than itself


def redacted_target(target: dict[str, Any]) -> dict[str, Any]:
    """An HTTP target without what may be a secret: header values, the URL's user
    information and query."""
    parts = urlsplit(str(target.get("url", "")))
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    url = urlunsplit((parts.scheme, host, parts.path, "", ""))
    if parts.query:
        url += "?" + HIDDEN
    headers = target.get("headers") or {}
    return {**target, "url": url, "headers": dict.fromkeys(headers, HIDDEN)}


async def job_detail(
    conn: Conn, tenant: str, job_id: str, *, shards: int, now_ms: int
) -> dict[str, Any] | None:
    """A job as the page shows it: `tickwheel jobs show`'s fields (its latest runs, its pause
    note) with the target redacted, the next occurrences explained, and the operators'
    actions on it, newest first. None: no such job (or deleted)."""
    row = await conn.fetchrow(QUERIES["job_get"], tenant, job_id)
    found = None if row is None else await get_job(conn, tenant, job_id, row)
    if row is None or found is None:
        return None
    document = found["document"]
    spec = spec_from_stored(tenant, document, shards)
    done = None
    if spec.document.max_runs is not None:
        done = await conn.fetchval(QUERIES["job_runs_done"], tenant, job_id)
    preview = preview_body(job_view(row), spec, PREVIEW_COUNT, now_ms, done)
    if isinstance(document.get("target"), dict):
        document = {**document, "target": redacted_target(document["target"])}
    actions = await conn.fetch(QUERIES["ops_audit_of_job"], tenant, job_id, AUDIT_ENTRIES)
    return {
        **found,
        "tenant": tenant,
        "job_id": job_id,
        "document": document,
        "preview": preview,
        "audit": [
            {
                "id": a["id"],
                "at": iso(a["at"]),
                "operator": a["operator"],
                "action": a["action"],
                "result": a["result"],
                "detail": a["detail"],
            }
            for a in actions
        ],
    }


async def run_detail(conn: Conn, key: str) -> dict[str, Any] | None:
    """A run as the page shows it: its ledger row (attempt, worker, timings, origin, last
    error), its job's status and what each replay did to it. None: no such run. Raises
    `tickwheel.domain.RunKeyError` for a string that is not a run key."""
    tenant, job_id, _ = parse_run_key(key)
    found = await get_run(conn, key)
    if found is None:
        return None
    return {**found, "job": f"{tenant}/{job_id}"}


def like_pattern(piece: str) -> str:
    """An ILIKE pattern finding `piece` anywhere, as text: its `\\`, `%` and `_` escaped."""
    return "%" + _LIKE_SPECIAL.sub(lambda m: "\\" + m.group(0), piece) + "%"


@dataclass(frozen=True)
class DeadFilter:
    """The dead-letter view's filters; None leaves one out."""

    since_ms: int | None = None  # died at or after, unix ms
    tenant: str | None = None
    job_id: str | None = None
    error: str | None = None  # a piece of the last error, any case

    def args(self) -> tuple[int | None, str | None, str | None, str | None]:
        """The statements' parameters: the error as an ILIKE pattern of its text."""
        pattern = None if self.error is None else like_pattern(self.error)
        return (self.since_ms, self.tenant, self.job_id, pattern)

    def to_json(self) -> dict[str, Any]:
        """The filters as given, for the answer and the replay audit (`source`: where the
        runs were chosen: the ledger, where `tickwheel dlq replay` reads the topic)."""
        return {
            "since": None if self.since_ms is None else format_ms(self.since_ms),
            "job": self.job_id,
            "tenant": self.tenant,
            "error": self.error,
            "source": "ledger",
        }


def _letter(r: asyncpg.Record) -> dict[str, Any]:
    return {
        "run_key": run_key(r["tenant"], r["job_id"], r["scheduled_ms"]),
        "tenant": r["tenant"],
        "job_id": r["job_id"],
        "scheduled_at": format_ms(r["scheduled_ms"]),
        "dead_at": format_ms(r["dead_ms"]),
        "attempts": r["attempt"],
        "error": r["last_error"],
    }


async def dead_letters(
    conn: Conn, flt: DeadFilter, limit: int, count_max: int | None = COUNT_MAX
) -> tuple[list[dict[str, Any]], int | None]:
    """The oldest `limit` dead runs `flt` selects, and how many it selects, counted up to
    `count_max` (None: not counted)."""
    rows = await conn.fetch(QUERIES["ops_dead_letters"], *flt.args(), limit)
    matching: int | None = None
    if count_max is not None:
        matching = await conn.fetchval(QUERIES["ops_dead_letters_count"], *flt.args(), count_max)
    return [_letter(r) for r in rows], matching
