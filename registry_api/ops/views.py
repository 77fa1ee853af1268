"""What the operators' page shows of one job and of one run (`GET /v1/ops/jobs/{t}/{id}`,
`GET /v1/ops/runs/{run key}`), read from Postgres through the same reads as `tickwheel jobs
show` and `tickwheel runs show` (ops/jobs.py, ops/runs.py) and the tenants' preview
(render.py `preview_body`).

Nothing a tenant keeps secret reaches the page: an HTTP target's header values are replaced by
`HIDDEN`, and its URL loses any user information and query (both may carry credentials). The
payload is shown: operators need it to see what a run did, and the page puts it in as text.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tickwheel.db import Conn
from tickwheel.domain import parse_run_key
from tickwheel.queries import QUERIES
from tickwheel.registry_api.document import spec_from_stored
from tickwheel.registry_api.ops.jobs import get_job
from tickwheel.registry_api.ops.runs import get_run, iso
from tickwheel.registry_api.render import preview_body
from tickwheel.registry_api.rows import job_view

HIDDEN = "(hidden)"
PREVIEW_COUNT = 5  # next occurrences the job view explains
AUDIT_ENTRIES = 20  # operators' actions on a job the job view lists


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
    preview = preview_body(job_view(row), spec, PREVIEW_COUNT, now_ms)
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
