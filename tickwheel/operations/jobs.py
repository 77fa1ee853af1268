"""Jobs as operators see them: `tickwheel jobs ls|show|pause|resume|rm`.

Reads go straight to Postgres, across tenants. Changes go through the registry's own path —
an `Op` folded by `registry_api/state.py` and written by `RegistryStore.apply` — so a pause,
resume or delete from here bumps the version, feeds the change feed and sends the NOTIFY hint
exactly as the same change over HTTP or Kafka does.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from tickwheel.clock import format_ms
from tickwheel.domain import RegistrationOp, job_key, run_key
from tickwheel.operations.errors import BadInput
from tickwheel.operations.runs import iso
from tickwheel.queries import QUERIES
from tickwheel.registry_api.state import Op, Outcome
from tickwheel.registry_api.store import RegistryStore

RECENT_RUNS = 10  # runs `jobs show` lists


def parse_job_key(text: str) -> tuple[str, str]:
    """(tenant, job_id) of `<tenant>/<job_id>`, or BadInput naming the form."""
    tenant, slash, job_id = text.partition("/")
    if not slash or not tenant or not job_id or "/" in job_id:
        raise BadInput(f"JOB must look like <tenant>/<job_id>, not {text!r}")
    return tenant, job_id


def _ms(value: int | None) -> str | None:
    return None if value is None else format_ms(value)


async def list_jobs(
    conn: asyncpg.Connection, *, tenant: str | None, status: str | None, limit: int
) -> list[dict[str, Any]]:
    """Jobs in (tenant, id) order; deleted ones only with `status='deleted'`."""
    rows = await conn.fetch(QUERIES["ops_jobs_list"], tenant, status, limit)
    return [
        {
            "job": job_key(r["tenant"], r["job_id"]),
            "tenant": r["tenant"],
            "job_id": r["job_id"],
            "kind": r["kind"],
            "schedule": r["schedule"],
            "at": _ms(r["run_at"]),
            "timezone": r["timezone"],
            "priority": r["priority"],
            "status": r["status"],
            "version": r["version"],
            "shard_id": r["shard_id"],
            "next_run_at": _ms(r["next_run_at"]),
            "updated_at": iso(r["updated_at"]),
        }
        for r in rows
    ]


async def get_job(conn: asyncpg.Connection, tenant: str, job_id: str) -> dict[str, Any] | None:
    """A live job's document, registry fields and latest runs; None: no such job."""
    row = await conn.fetchrow(QUERIES["job_get"], tenant, job_id)
    if row is None:
        return None
    runs = await conn.fetch(QUERIES["job_runs_page"], tenant, job_id, None, RECENT_RUNS)
    return {
        "job": job_key(tenant, job_id),
        "status": row["status"],
        "version": row["version"],
        "shard_id": row["shard_id"],
        "next_run_at": _ms(row["next_run_at"]),
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
        "document": orjson.loads(row["document"]),
        "runs": [
            {
                "run_key": run_key(r["tenant"], r["job_id"], r["scheduled_at"]),
                "scheduled_at": format_ms(r["scheduled_at"]),
                "status": r["status"],
                "attempt": r["attempt"],
                "started_at": iso(r["started_at"]),
                "finished_at": iso(r["finished_at"]),
                "last_error": r["last_error"] or r["skip_reason"],
            }
            for r in runs
        ],
    }


# What an operator asked for, as the registry's operation, and the words for its outcomes.
CHANGES = {
    "pause": RegistrationOp.PAUSE,
    "resume": RegistrationOp.RESUME,
    "rm": RegistrationOp.DELETE,
}
_DONE = {Outcome.PAUSED: "paused", Outcome.RESUMED: "resumed", Outcome.DELETED: "deleted"}
_ALREADY = {"pause": "already paused", "resume": "already active"}


async def change_job(
    store: RegistryStore, command: str, tenant: str, job_id: str
) -> dict[str, Any]:
    """Pause, resume or delete (`command`: pause | resume | rm) one job through the registry.

    Returns {"job", "result", "status", "version"}; BadInput when the job does not exist or
    its state does not allow the change (a completed one-off cannot be paused).
    """
    key = job_key(tenant, job_id)
    [applied] = await store.apply([Op(CHANGES[command].value, tenant, job_id)])
    if applied.outcome == Outcome.NOT_FOUND:
        raise BadInput(f"no job {key} (JOB is <tenant>/<job_id>; deleted jobs are gone)")
    job = applied.job
    if applied.outcome == Outcome.CONFLICT:
        status = job.status if job is not None else "unknown"
        raise BadInput(f"cannot {command} {key}: it is {status}")
    if applied.outcome in _DONE:
        result = _DONE[applied.outcome]
    elif applied.outcome == Outcome.UNCHANGED:
        result = _ALREADY.get(command, "unchanged")
    else:  # stale and replay need an explicit version or a Kafka source; we give neither
        raise RuntimeError(f"unexpected registry outcome {applied.outcome} for {command} {key}")
    return {
        "job": key,
        "result": result,
        "status": job.status if job is not None else None,
        "version": job.version if job is not None else None,
    }
