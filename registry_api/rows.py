"""The registry's rows as values, and values as rows: how each record Postgres answers (by
column name) becomes what the registry works with, and a changed job becomes the row it writes.

- a job row (`jobs_lock_batch`, `backfill_jobs_read`) → `StoredJob`, as the fold takes it
  (state.py); a tenant's quota row (`tenant_quotas_lock`) → `TenantQuotas` (quotas.py);
- a changed job → its `jobs_stage` row (`row_tuple`): a tuple, as binary COPY takes it;
- what the reads answer: a job row → `JobView`, a run row → `RunView`, a tenant row → the
  dict that lists it, an active API key's row → `SigningKey`.

Pure: the queries run in store.py, which calls these.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from tickwheel.domain import run_key
from tickwheel.registry_api.document import JobSpec, run_target
from tickwheel.registry_api.quotas import TenantQuotas
from tickwheel.registry_api.state import StoredJob


@dataclass(frozen=True)
class JobView:
    """A job as the API returns it: the document plus registry fields."""

    document: dict[str, Any]
    status: str
    version: int
    next_run_at: int | None  # ms
    created_at: dt.datetime
    updated_at: dt.datetime
    # (who, why, when) of the pause the job is at, when it was paused with a note
    pause_note: tuple[str, str, dt.datetime] | None = None


@dataclass(frozen=True)
class RunView:
    run_key: str
    scheduled_at: int  # ms
    status: str
    attempt: int
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    last_error: str | None
    origin: str  # how the run came to be: schedule | trigger | backfill | replay


@dataclass(frozen=True)
class SigningKey:
    """An active API key as a signed registration is checked against (no secret here)."""

    key_hash: bytes
    prefix: str
    tenant: str


def stored_job(row: asyncpg.Record) -> StoredJob:
    """A job row (`jobs_lock_batch`, `backfill_jobs_read`) as the fold takes it."""
    return StoredJob(
        row["tenant"],
        row["job_id"],
        orjson.loads(row["document"]),
        row["status"],
        row["version"],
        row["next_run_at"],
        row["intake_partition"],
        row["intake_offset"],
    )


def tenant_quotas(row: asyncpg.Record) -> TenantQuotas:
    """A tenant's quota row (`tenant_quotas_lock`) as the quotas take it."""
    return TenantQuotas(
        row["tenant"],
        row["max_jobs"],
        row["jobs"],
        row["max_registrations_per_s"],
        row["registrations_burst"],
        row["registrations_tat_us"],
    )


def _json_text(value: Any) -> str | None:
    # A JSON null becomes SQL NULL (jobs.payload refuses it; validation rejects a null payload
    # before it gets here, and jobs.target is NULL when the job has a handler).
    return None if value is None else orjson.dumps(value).decode()


def row_tuple(job: StoredJob, spec: JobSpec, expected_version: int | None) -> tuple[Any, ...]:
    """One `jobs_stage` row: a tuple, as binary COPY takes it (no per-row dict).

    Values come in the column order of `jobs_stage_create` (registry.sql), which the COPY
    uses as it is; times are integer milliseconds, jsonb columns JSON text.
    """
    doc = spec.document
    backoff, misfire, dst = doc.backoff, doc.misfire, doc.dst
    return (
        job.tenant,
        job.job_id,
        spec.shard_id,
        spec.kind,
        doc.schedule,
        spec.first_run_at(0) if doc.at is not None else None,
        doc.timezone,
        doc.handler,
        _json_text(run_target(doc)),
        _json_text(doc.payload),
        doc.priority,
        doc.max_attempts,
        backoff.base_ms,
        backoff.cap_ms,
        doc.timeout_ms,
        misfire.policy,
        misfire.grace_ms,
        misfire.max_catchup,
        doc.overlap,
        dst.gap,
        dst.overlap,
        job.status,
        job.next_run_at,
        job.version,
        orjson.dumps(job.document).decode(),
        job.intake_partition,
        job.intake_offset,
        expected_version,
        *spec.window_ms,
        doc.after_end,
        doc.pause_after_dead_runs,
        doc.max_runs,
        doc.calendars,
        doc.jitter_ms or None,  # 0 is no jitter, stored as none
    )


def job_view(row: asyncpg.Record) -> JobView:
    """A job row (`job_get`, `jobs_list`)."""
    by = row["paused_by"]
    return JobView(
        orjson.loads(row["document"]),
        row["status"],
        row["version"],
        row["next_run_at"],
        row["created_at"],
        row["updated_at"],
        None if by is None else (by, row["pause_reason"], row["paused_at"]),
    )


def run_view(row: asyncpg.Record) -> RunView:
    """A run row (`job_runs_page`); a skipped run's reason stands in for its error."""
    return RunView(
        run_key(row["tenant"], row["job_id"], row["scheduled_at"]),
        row["scheduled_at"],
        row["status"],
        row["attempt"],
        row["started_at"],
        row["finished_at"],
        row["last_error"] or row["skip_reason"],
        row["origin"],
    )


def tenant_view(row: asyncpg.Record) -> dict[str, Any]:
    """A tenant row (`tenants_list`) as the tenants' listings show it."""
    return {
        "tenant": row["name"],
        "created_at": row["created_at"].isoformat(),
        "jobs": row["jobs"],
        "active_keys": row["active_keys"],
        "max_jobs": row["max_jobs"],
        "max_registrations_per_s": row["max_registrations_per_s"],
        "registrations_burst": row["registrations_burst"],
        "max_running": row["max_running"],
        "running": row["running"],
    }


def signing_key(row: asyncpg.Record) -> SigningKey:
    """An active API key's row (`api_keys_active_by_prefixes`)."""
    return SigningKey(bytes(row["key_hash"]), row["prefix"], row["tenant"])
