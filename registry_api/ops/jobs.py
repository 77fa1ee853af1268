"""Jobs as operators see them: `tickwheel jobs ls|show|pause|resume|rm|trigger|backfill`.

Reads go straight to Postgres, across tenants. Changes go through the registry's own path —
an `Op` folded by `registry_api/state.py` and written by `RegistryStore.apply` — so a pause,
resume or delete from here bumps the version, feeds the change feed and sends the NOTIFY hint
exactly as the same change over HTTP or Kafka does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from tickwheel.cli_support import BadInput
from tickwheel.clock import format_ms
from tickwheel.db import Conn
from tickwheel.domain import JobStatus, RegistrationOp, job_key, run_key
from tickwheel.queries import QUERIES
from tickwheel.registry_api.on_demand import (
    Backfilled,
    BackfillRequest,
    Triggered,
    TriggerRequest,
)
from tickwheel.registry_api.ops.runs import iso
from tickwheel.registry_api.state import Op, Outcome
from tickwheel.registry_api.store import Applied, RegistryStore, Within

RECENT_RUNS = 10  # runs `jobs show` lists


def _ms(value: int | None) -> str | None:
    return None if value is None else format_ms(value)


def _job_item(r: asyncpg.Record, *extra: str) -> dict[str, Any]:
    """A job row as operators read it (the `jobs` commands, the jobs view), with the columns
    `extra` as they are."""
    return {
        "tenant": r["tenant"],
        "job_id": r["job_id"],
        "kind": r["kind"],
        "schedule": r["schedule"],
        "at": _ms(r["run_at"]),
        "timezone": r["timezone"],
        **{column: r[column] for column in extra},
        "status": r["status"],
        "version": r["version"],
        "next_run_at": _ms(r["next_run_at"]),
        "updated_at": iso(r["updated_at"]),
    }


async def list_jobs(
    conn: Conn, *, tenant: str | None, status: str | None, limit: int
) -> list[dict[str, Any]]:
    """Jobs in (tenant, id) order; deleted ones only with `status='deleted'`."""
    rows = await conn.fetch(QUERIES["ops_jobs_list"], tenant, status, limit)
    return [
        {"job": job_key(r["tenant"], r["job_id"]), **_job_item(r, "priority", "shard_id")}
        for r in rows
    ]


async def get_job(
    conn: Conn, tenant: str, job_id: str, row: asyncpg.Record | None = None
) -> dict[str, Any] | None:
    """A live job's document, registry fields and latest runs; None: no such job. `row`: its
    `job_get` row, when the caller read it already."""
    if row is None:
        row = await conn.fetchrow(QUERIES["job_get"], tenant, job_id)
    if row is None:
        return None
    runs = await conn.fetch(QUERIES["job_runs_page"], tenant, job_id, None, RECENT_RUNS)
    note = await pause_note(conn, tenant, job_id) if row["status"] == JobStatus.PAUSED else None
    return {
        "job": job_key(tenant, job_id),
        "status": row["status"],
        "version": row["version"],
        "shard_id": row["shard_id"],
        "next_run_at": _ms(row["next_run_at"]),
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
        "pause_note": note,
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


async def pause_note(db_: asyncpg.Pool | Conn, tenant: str, job_id: str) -> dict[str, Any] | None:
    """The note of the job's pause ({"by", "reason", "at"}), if it is paused with one."""
    row = await db_.fetchrow(QUERIES["job_pause_note_get"], tenant, job_id)
    if row is None:
        return None
    return {"by": row["paused_by"], "reason": row["reason"], "at": iso(row["paused_at"])}


# What an operator asked for, as the registry's operation, and the words for its outcomes.
CHANGES = {
    "pause": RegistrationOp.PAUSE,
    "resume": RegistrationOp.RESUME,
    "rm": RegistrationOp.DELETE,
}
_DONE = {Outcome.PAUSED: "paused", Outcome.RESUMED: "resumed", Outcome.DELETED: "deleted"}
_ALREADY = {"pause": "already paused", "resume": "already active"}
# The actions as the audit names them (the CLI's `rm` is the page's delete).
_AUDIT_ACTION = {"rm": "delete"}
NOTE_MAX_CHARS = 500  # a pause note's reason, as migration 0016 bounds it


@dataclass(frozen=True)
class PauseNote:
    """Who paused a job and why (migration 0016); when is the database's clock at the pause."""

    by: str
    reason: str


@dataclass
class Audit:
    """An operator's action recorded in `ops_audit` (who, what, on which job, the outcome),
    written inside the change's own transaction when it gets that far (`within`), on its own
    when the change was refused before it (`settle`). `operator` None: not recorded (the CLI,
    whose users reach the database directly)."""

    operator: str | None
    action: str
    tenant: str
    job_id: str
    detail: str | None = None
    ident: int | None = None  # the row's id, once written

    async def write(self, db_: asyncpg.Pool | Conn, result: str) -> None:
        if self.operator is None or self.ident is not None:
            return
        self.ident = await db_.fetchval(
            QUERIES["ops_audit_insert"],
            self.operator,
            self.action,
            self.tenant,
            self.job_id,
            result,
            self.detail,
        )

    async def settle(self, pool: asyncpg.Pool, err: BadInput) -> None:
        """A refusal that never reached the transaction: recorded on its own."""
        await self.write(pool, f"refused: {err}")


def _change_result(applied: Applied, command: str) -> str:
    """The word for a change's outcome; BadInput when it was refused."""
    key = job_key(applied.op.tenant, applied.op.job_id)
    if applied.outcome == Outcome.NOT_FOUND:
        raise BadInput(f"no job {key} (JOB is <tenant>/<job_id>; deleted jobs are gone)")
    if applied.outcome == Outcome.CONFLICT:
        status = applied.job.status if applied.job is not None else "unknown"
        raise BadInput(f"cannot {command} {key}: it is {status}")
    if applied.outcome in _DONE:
        return _DONE[applied.outcome]
    if applied.outcome == Outcome.UNCHANGED:
        return _ALREADY.get(command, "unchanged")
    # stale and replay need an explicit version or a Kafka source; we give neither
    raise RuntimeError(f"unexpected registry outcome {applied.outcome} for {command} {key}")


async def change_job(
    store: RegistryStore,
    command: str,
    tenant: str,
    job_id: str,
    *,
    note: PauseNote | None = None,
    operator: str | None = None,
) -> dict[str, Any]:
    """Pause, resume or delete (`command`: pause | resume | rm) one job through the registry.

    A pause with a `note` records who and why beside the version it gave the job (a job
    already paused gets the note on its current version). `operator`: the name the audit
    records, in the change's transaction (None: not audited). Returns {"job", "result",
    "status", "version", "audit_id"}; BadInput when the job does not exist or its state does
    not allow the change (a completed one-off cannot be paused).
    """
    if note is not None and command != "pause":
        raise BadInput(f"a note goes with a pause, not with {command}")
    record = Audit(operator, _AUDIT_ACTION.get(command, command), tenant, job_id,
                   None if note is None else f"note: {note.reason}")  # fmt: skip

    async def within(conn: Conn, results: list[Applied]) -> None:
        [applied] = results
        try:
            result = _change_result(applied, command)
        except BadInput as err:
            result = f"refused: {err}"
        job = applied.job
        if note is not None and job is not None and job.status == JobStatus.PAUSED:
            await conn.execute(
                QUERIES["job_pause_note_write"], tenant, job_id, job.version, note.by, note.reason
            )
        await record.write(conn, result)

    [applied] = await store.apply(
        [Op(CHANGES[command].value, tenant, job_id)], quotas=False, within=within
    )
    result = _change_result(applied, command)
    job = applied.job
    return {
        "job": job_key(tenant, job_id),
        "result": result,
        "status": job.status if job is not None else None,
        "version": job.version if job is not None else None,
        "audit_id": record.ident,
    }


def _refused(applied: Applied, action: str) -> None:
    key = job_key(applied.op.tenant, applied.op.job_id)
    if applied.outcome == Outcome.NOT_FOUND:
        raise BadInput(f"no job {key} (deleted jobs are gone)")
    if applied.outcome == Outcome.CONFLICT:
        raise BadInput(f"cannot {action} {key}: it is a completed one-off")
    if applied.problem is not None:
        raise BadInput(f"cannot {action} {key}: --{applied.problem}")


def _audited(record: Audit, action: str, word: Callable[[Applied], str]) -> Within:
    """A `within` that records `record` with the outcome `word` gives an applied op."""

    async def within(conn: Conn, results: list[Applied]) -> None:
        [applied] = results
        try:
            _refused(applied, action)
            result = word(applied)
        except BadInput as err:
            result = f"refused: {err}"
        await record.write(conn, result)

    return within


def _triggered_word(applied: Applied) -> str:
    started = applied.started
    assert isinstance(started, Triggered)
    return ("triggered " if started.created else "already triggered ") + started.run_key


async def trigger_job(
    store: RegistryStore,
    tenant: str,
    job_id: str,
    idempotency_key: str | None,
    *,
    operator: str | None = None,
) -> dict[str, Any]:
    """One run of the job now, through the registry (paused jobs too); BadInput when the job
    does not exist or is a completed one-off. `operator`: audited under that name."""
    record = Audit(operator, "trigger", tenant, job_id)
    op = Op(RegistrationOp.TRIGGER, tenant, job_id, request=TriggerRequest(idempotency_key))
    within = _audited(record, "trigger", _triggered_word)
    [applied] = await store.apply([op], quotas=False, within=within)
    _refused(applied, "trigger")
    started = applied.started
    assert isinstance(started, Triggered)
    return {
        "job": job_key(tenant, job_id),
        "run_key": started.run_key,
        "scheduled_at": format_ms(started.scheduled_ms),
        "created": started.created,
        "audit_id": record.ident,
    }


async def backfill_job(
    store: RegistryStore,
    tenant: str,
    job_id: str,
    window: BackfillRequest,
    *,
    dry_run: bool,
    operator: str | None = None,
) -> dict[str, Any]:
    """The runs of the job's occurrences in the window that have none yet, through the
    registry; a dry run rolls its transaction back and says what it would have created.
    `operator`: audited under that name (a dry run changes nothing and is not recorded)."""
    detail = f"{format_ms(window.from_ms)} .. {format_ms(window.to_ms)}"
    record = Audit(None if dry_run else operator, "backfill", tenant, job_id, detail)

    def word(applied: Applied) -> str:
        done = applied.started
        assert isinstance(done, Backfilled)
        return f"created {done.created} of {done.occurrences} occurrences"

    op = Op(RegistrationOp.BACKFILL, tenant, job_id, request=window)
    within = _audited(record, "backfill", word)
    try:
        [applied] = await store.apply([op], dry_run=dry_run, quotas=False, within=within)
        _refused(applied, "backfill")
    except BadInput as err:
        await record.settle(store.pool, err)  # refused before its transaction, or in it
        raise
    done = applied.started
    assert isinstance(done, Backfilled)
    first = None if done.first_ms is None else run_key(tenant, job_id, done.first_ms)
    last = None if done.last_ms is None else run_key(tenant, job_id, done.last_ms)
    return {
        "job": job_key(tenant, job_id),
        "dry_run": dry_run,
        "runs": done.created,
        "occurrences": done.occurrences,
        "existing": done.occurrences - done.created,
        "first": first,
        "last": last,
        "first_ms": done.first_ms,
        "last_ms": done.last_ms,
        "rate_per_s": store.run_limits.backfill_rate_per_s,
        "audit_id": record.ident,
    }


async def backfill_dispatched(
    conn: Conn, tenant: str, job_id: str, first_ms: int, last_ms: int
) -> tuple[int, int]:
    """(dispatched, total) backfill runs of the job scheduled in [first_ms, last_ms]."""
    row = await conn.fetchrow(QUERIES["ops_backfill_progress"], tenant, job_id, first_ms, last_ms)
    assert row is not None  # an aggregate always answers one row
    return row["dispatched"], row["total"]


SCAN_BUDGET = 5000  # primary-key entries one page of the jobs view reads at most


def _page_item(r: asyncpg.Record) -> dict[str, Any]:
    """A job of the jobs view: its row, its pause note and its newest run."""
    note = None
    if r["paused_by"] is not None:
        note = {"by": r["paused_by"], "reason": r["pause_reason"]}
    last = None
    if r["last_status"] is not None:
        last = {"status": r["last_status"], "scheduled_at": format_ms(r["last_scheduled_at"])}
    return {**_job_item(r, "handler"), "pause_note": note, "last_run": last}


async def jobs_page(
    pool: asyncpg.Pool,
    *,
    after: tuple[str, str] | None,
    tenant: str | None,
    status: str | None,
    handler: str | None,
    text: str | None,
    limit: int,
    budget: int = SCAN_BUDGET,
) -> dict[str, Any]:
    """One page of the jobs view: jobs after the cursor `after` (tenant, job id) in that
    order, filtered, at most `limit`; `next` is the cursor of the following page (None: the
    end). A page reads at most `budget` rows of the primary key, so a rare filter may answer
    fewer than `limit` items with a `next` to go on from."""
    start = after or ("", "")
    if tenant is not None and start < (tenant, ""):
        start = (tenant, "")  # the tenant's range starts here; before it nothing matches
    rows = await pool.fetch(
        QUERIES["ops_jobs_page"], *start, budget, tenant, status, handler, text, limit + 1
    )
    items = [r for r in rows if r["row_kind"] == "job"]
    edge = next((r for r in rows if r["row_kind"] == "edge"), None)
    cursor: tuple[str, str] | None
    if len(items) > limit:
        items = items[:limit]
        cursor = (items[-1]["tenant"], items[-1]["job_id"])
    elif edge is None or edge["scanned"] < budget:
        cursor = None  # the key range ended within the budget
    elif tenant is not None and edge["tenant"] != tenant:
        cursor = None  # read past the tenant's jobs
    else:
        cursor = (edge["tenant"], edge["job_id"])
    return {
        "items": [_page_item(r) for r in items],
        "next": None if cursor is None else {"tenant": cursor[0], "job_id": cursor[1]},
    }
