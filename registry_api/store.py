"""The registry's Postgres side: apply batches of operations, read jobs and runs, tenants and keys.

A batch — one HTTP request, or one poll of the registration topic — is one transaction: lock
the batch's existing rows, fold its operations through `state.apply` in order, write every
changed job once (binary COPY into a per-connection staging table, then `jobs_write_batch`),
commit. Per-job order is the order of `ops`; jobs do not wait on each other beyond their row
locks. Two writers creating the same new job at once: the loser's insert finds the row and the
whole batch is retried against the winner's row.

The fold and the COPY rows cost the intake about as much Python time as Postgres spends on the
batch, and inside the transaction the two run one after the other. So the intake folds each
batch ahead, on its validation thread while the previous batch is in the database, as if none
of its jobs existed (`plan_new`); the transaction uses that plan only if its lock query finds
none of them, and folds as above otherwise (D-076).

The tenants' quotas (quotas.py) are decided in the same fold and transaction: after the jobs'
rows, the batch locks the quota rows of its tenants that have a quota (`tenant_quotas_lock`),
refuses each operation over a quota (outcome `refused`, `Applied.quota` says which), and ends
with one statement writing every tenant's changed job counter and rate state
(`tenant_usage_write`). A batch whose tenants have no quota costs one more statement (the lock
query, answering nothing) and, when it creates or deletes jobs, the counter's write.

The rows it reads become values, and the jobs it writes COPY rows, in rows.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from tickwheel import db
from tickwheel.clock import now_ms
from tickwheel.domain import JobStatus, RunStatus
from tickwheel.queries import QUERIES
from tickwheel.registry_api import on_demand
from tickwheel.registry_api.document import JobSpec, OpRefused, spec_from_stored
from tickwheel.registry_api.on_demand import (
    Backfilled,
    BackfillPlan,
    BackfillRefused,
    BackfillRequest,
    RunLimits,
    Triggered,
    TriggerRequest,
)
from tickwheel.registry_api.quotas import Budget, QuotaRefusal
from tickwheel.registry_api.rows import (
    JobView,
    RunView,
    SigningKey,
    job_view,
    row_tuple,
    run_view,
    signing_key,
    stored_job,
    tenant_quotas,
    tenant_view,
)
from tickwheel.registry_api.state import Op, Outcome, StoredJob, apply
from tickwheel.signatures import PREFIX_CHARS, key_digest

# Errors that mean "the database cannot be reached right now", not "this request is wrong".
DB_UNAVAILABLE = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,  # a connection cut mid-protocol by a restart (tickwheel/db.py)
)
WRITE_RETRIES = 3
API_KEY_PREFIX = "tw_"
API_KEY_SHOWN_CHARS = PREFIX_CHARS  # leading characters of a key stored in clear, to name it
PAGE_LIMIT_MAX = 500
_ON_DEMAND = (Outcome.TRIGGERED, Outcome.BACKFILLED)
# The quota columns of `tenants`, in the parameter order of `tenant_quota_set`.
QUOTA_COLUMNS = ("max_jobs", "max_registrations_per_s", "registrations_burst")


@dataclass(frozen=True)
class Applied:
    op: Op
    outcome: Outcome
    job: StoredJob | None
    started: Triggered | Backfilled | None = None  # what a trigger or backfill did
    # Why the store refused it (outcome REFUSED): a backfill's range, an unknown calendar.
    problem: OpRefused | None = None
    quota: QuotaRefusal | None = None  # the tenant's quota that refused it (outcome REFUSED)


# What runs last inside an `apply`'s transaction, given its connection and the results.
Within = Callable[[db.Conn, "list[Applied]"], Awaitable[None]]


@dataclass(frozen=True)
class NewJobsPlan:
    """A batch folded against no stored jobs (`RegistryStore.plan_new`): its results and the
    COPY rows to write, valid while none of its jobs exists."""

    now: int  # ms: the instant the fold used
    results: list[Applied]
    records: list[tuple[Any, ...]]
    usage: list[tuple[str, int, int | None]]  # the job counters' changes (Budget.changes)


class _ConcurrentCreate(Exception):
    """Another writer created one of this batch's new jobs first."""


class _DryRun(Exception):
    """Rolls a dry run's transaction back, carrying what it would have done."""

    def __init__(self, results: list[Applied]) -> None:
        super().__init__("dry run")
        self.results = results


hash_key = key_digest  # what api_keys stores for a key (also a signed registration's secret)


def _registered(job: StoredJob | None) -> bool:
    """Whether a job counts against its tenant's job quota (any row not deleted)."""
    return job is not None and job.status != JobStatus.DELETED


class RegistryStore:
    def __init__(
        self,
        pool: asyncpg.Pool,
        shards: int,
        clock: Callable[[], int] = now_ms,
        runs: RunLimits | None = None,
    ) -> None:
        self.pool = pool
        self.shards = shards
        self.clock = clock
        self.run_limits = runs or RunLimits()

    def _spec_of(self, job: StoredJob) -> JobSpec:
        return job.spec or spec_from_stored(job.tenant, job.document, self.shards)

    @staticmethod
    async def _missing_calendars(conn: db.Conn, ops: Sequence[Op]) -> dict[int, OpRefused]:
        """The upserts naming a calendar their tenant does not have, by index in `ops`, each
        refused naming the field. The calendars found are share-locked until the batch ends,
        so a calendar's delete waits for it and then sees the jobs it wrote (D-286)."""
        named = {
            (op.tenant, name)
            for op in ops
            if op.spec is not None and op.spec.document.calendars
            for name in op.spec.document.calendars
        }
        if not named:
            return {}
        keys = sorted(named)
        rows = await conn.fetch(
            QUERIES["calendars_lock_named"], [k[0] for k in keys], [k[1] for k in keys]
        )
        found = {(r["tenant"], r["name"]) for r in rows}
        missing: dict[int, OpRefused] = {}
        for i, op in enumerate(ops):
            names = op.spec.document.calendars if op.spec is not None else None
            for j, name in enumerate(names or ()):
                if (op.tenant, name) not in found:
                    missing[i] = OpRefused(
                        f"calendars.{j}",
                        f"no calendar named {name!r}; create it first (PUT /v1/calendars/{name})",
                    )
                    break
        return missing

    def plan_new(self, ops: Sequence[Op], now: int) -> NewJobsPlan:
        """Fold `ops` as if none of their jobs existed yet: pure CPU, on any thread.

        The intake makes this plan on its validation thread, while the previous batch is in
        the database; `apply` then uses it when the lock query finds none of the jobs (a batch
        of new registrations), so the fold and the COPY rows are off the transaction's path.
        """
        state: dict[tuple[str, str], StoredJob] = {}
        budget = Budget((), 0)  # no quota: the transaction folds again if a tenant has one
        results = self._fold_into(state, ops, now, budget)
        records = [row_tuple(job, self._spec_of(job), None) for job in state.values()]
        return NewJobsPlan(now, results, records, budget.changes())

    def _fold_into(
        self,
        state: dict[tuple[str, str], StoredJob],
        ops: Sequence[Op],
        now: int,
        budget: Budget,
        problems: Mapping[int, OpRefused] | None = None,
    ) -> list[Applied]:
        """Fold `ops` in order over `state` (changed in place), each one that is no replay
        first admitted by the tenants' quotas: one refused changes nothing, as does one
        `problems` holds (by index: an upsert naming an unknown calendar)."""
        results = []
        for i, op in enumerate(ops):
            key = op.key
            before = state.get(key)
            new, outcome = apply(before, op, now, resume_from=self._spec_of)
            if problems and i in problems and outcome.changed:
                # A replay or an unchanged document was accepted before: not refused now.
                results.append(Applied(op, Outcome.REFUSED, before, problem=problems[i]))
                continue
            if outcome is not Outcome.REPLAY:
                changes = outcome.changed and _registered(new) != _registered(before)
                delta = (1 if _registered(new) else -1) if changes else 0
                refused = budget.admit(op.tenant, op.job_id, delta)
                if refused is not None:
                    results.append(Applied(op, Outcome.REFUSED, before, quota=refused))
                    continue
            if outcome.changed and new is not None:
                state[key] = new
            results.append(Applied(op, outcome, new))
        return results

    async def apply(
        self,
        ops: Sequence[Op],
        plan: NewJobsPlan | None = None,
        *,
        dry_run: bool = False,
        quotas: bool = True,
        within: Within | None = None,
    ) -> list[Applied]:
        """Apply `ops` in order in one transaction; returns one `Applied` per op.

        `plan`, from `plan_new(ops, …)`, is used only if none of the jobs exists and none of
        the tenants has a quota. `dry_run`: do everything, then roll back — the results say
        what would have happened (`tickwheel jobs backfill --dry-run`). `quotas=False`: an
        operator's change, which the tenants' quotas do not refuse (their job counters still
        move). Backfills are counted first, outside the transaction (`_count_backfills`); one
        refused then never enters it. `within(conn, results)` runs last in the transaction:
        what must commit or roll back with the change (an operator's audit row, a pause's
        note)."""
        counted = await self._count_backfills(ops)
        todo = [item for item in counted if isinstance(item, Op)]
        if len(todo) < len(ops):
            plan = None  # a refused backfill's job exists: the plan would not be used anyway
        done = iter(await self._apply_counted(todo, plan, dry_run, quotas, within) if todo else [])
        return [item if isinstance(item, Applied) else next(done) for item in counted]

    async def _count_backfills(self, ops: Sequence[Op]) -> list[Op | Applied]:
        """`ops`, each backfill with its occurrences counted (`BackfillPlan`) or refused
        (an `Applied` REFUSED), before any lock is taken and with no connection held while it
        counts: a refused range then costs no other request a connection or a wait (issue 28).

        Counted against the job as stored now, so only a backfill whose job no earlier op of
        the batch touches (the Kafka intake hands a batch over once the one before it has
        committed); the others are counted in the transaction, as is one whose job changed
        before the transaction locked it. The fold decides first, as it will in the
        transaction: a replayed, unknown or completed job is left to it."""
        if not any(isinstance(op.request, BackfillRequest) for op in ops):
            return list(ops)  # the intake's usual batch: nothing to count
        seen: set[tuple[str, str]] = set()
        wanted: list[int] = []
        for i, op in enumerate(ops):
            window = op.request
            if isinstance(window, BackfillRequest) and window.plan is None and op.key not in seen:
                wanted.append(i)
            seen.add(op.key)
        if not wanted:
            return list(ops)
        keys = [ops[i].key for i in wanted]
        rows = await self.pool.fetch(
            QUERIES["backfill_jobs_read"], [k[0] for k in keys], [k[1] for k in keys]
        )
        stored = {(r["tenant"], r["job_id"]): (stored_job(r), r["now_ms"]) for r in rows}
        counted: list[Op | Applied] = list(ops)
        for i in wanted:
            op = ops[i]
            window = op.request
            assert isinstance(window, BackfillRequest)
            if op.key not in stored:
                continue
            job, now = stored[op.key]
            if apply(job, op, now, resume_from=self._spec_of)[1] is not Outcome.BACKFILLED:
                continue
            try:
                found = await self._occurrences(job, window, now)
            except BackfillRefused as refused:
                counted[i] = Applied(op, Outcome.REFUSED, job, problem=refused)
                continue
            planned = dataclasses.replace(window, plan=BackfillPlan(job.version, tuple(found)))
            counted[i] = dataclasses.replace(op, request=planned)
        return counted

    async def _occurrences(self, job: StoredJob, window: BackfillRequest, now: int) -> list[int]:
        """The job's occurrences in the window (bounded; BackfillRefused), counted in a thread
        (pure CPU, off the event loop)."""
        return await asyncio.to_thread(
            on_demand.occurrences,
            self._spec_of(job).timing,
            window.from_ms,
            window.to_ms,
            now,
            self.run_limits,
        )

    async def _apply_counted(
        self,
        ops: Sequence[Op],
        plan: NewJobsPlan | None,
        dry_run: bool,
        quotas: bool,
        within: Within | None,
    ) -> list[Applied]:
        for attempt in range(WRITE_RETRIES):
            try:
                return await self._apply_once(ops, plan, dry_run, quotas, within)
            except _DryRun as done:
                return done.results
            except _ConcurrentCreate:
                plan = None  # another writer created some of the jobs: fold against them
                if attempt == WRITE_RETRIES - 1:
                    raise RuntimeError("job creation kept racing with another writer") from None
        raise AssertionError("unreachable")

    async def _apply_once(
        self,
        ops: Sequence[Op],
        plan: NewJobsPlan | None = None,
        dry_run: bool = False,
        quotas: bool = True,
        within: Within | None = None,
    ) -> list[Applied]:
        keys = list(dict.fromkeys(op.key for op in ops))
        now = plan.now if plan is not None else self.clock()
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                QUERIES["jobs_lock_batch"], [k[0] for k in keys], [k[1] for k in keys]
            )
            limited = []
            if quotas:
                tenants = sorted({op.tenant for op in ops})
                limited = await conn.fetch(QUERIES["tenant_quotas_lock"], tenants)
            missing = await self._missing_calendars(conn, ops)
            if plan is not None and not rows and not limited and not missing:
                results, records, usage = list(plan.results), plan.records, plan.usage
            else:
                budget = Budget(map(tenant_quotas, limited), limited[0]["now_us"] if limited else 0)
                results, records = self._fold(ops, rows, now, budget, missing)
                usage = budget.changes()
            if records:
                await conn.execute(QUERIES["jobs_stage_create"])
                await conn.copy_records_to_table("jobs_stage", records=records)
                written: int = await conn.fetchval(QUERIES["jobs_write_batch"])
                if written != len(records):
                    raise _ConcurrentCreate
            # Runs on demand last: a job created earlier in this batch exists by now.
            if any(a.outcome in _ON_DEMAND for a in results):
                results = [await self._start_runs(conn, a) for a in results]
            if usage:  # last: a tenant without a quota holds its counter's row only to commit
                await conn.execute(
                    QUERIES["tenant_usage_write"],
                    [u[0] for u in usage],
                    [u[1] for u in usage],
                    [u[2] for u in usage],
                )
            await self._write_notes(conn, results)
            if within is not None:
                await within(conn, results)
            if dry_run:
                raise _DryRun(results)
        return results

    def _fold(
        self,
        ops: Sequence[Op],
        rows: Sequence[asyncpg.Record],
        now: int,
        budget: Budget,
        problems: Mapping[int, OpRefused] | None = None,
    ) -> tuple[list[Applied], list[tuple[Any, ...]]]:
        """The batch's ops folded over its locked rows: results, and the COPY rows to write."""
        loaded = {(r["tenant"], r["job_id"]): stored_job(r) for r in rows}
        state: dict[tuple[str, str], StoredJob] = dict(loaded)
        results = self._fold_into(state, ops, now, budget, problems)
        records = [
            row_tuple(job, self._spec_of(job), loaded[key].version if key in loaded else None)
            for key, job in state.items()
            if job is not loaded.get(key)
        ]
        return results, records

    async def _start_runs(self, conn: Any, applied: Applied) -> Applied:
        """The runs of a trigger or backfill (on_demand.py); other ops pass through."""
        op, job = applied.op, applied.job
        if applied.outcome not in _ON_DEMAND or job is None:
            return applied
        if isinstance(op.request, BackfillRequest):
            window = op.request
            now = await on_demand.db_now_ms(conn)
            try:
                if window.plan is not None and window.plan.version == job.version:
                    # Counted before the transaction for this very version: only the
                    # arithmetic checks depend on the moment.
                    on_demand.check_range(window.from_ms, window.to_ms, now, self.run_limits)
                    planned = list(window.plan.occurrences)
                else:
                    planned = await self._occurrences(job, window, now)
            except BackfillRefused as refused:
                return Applied(op, Outcome.REFUSED, job, problem=refused)
            done = await on_demand.backfill(conn, op.tenant, op.job_id, planned, self.run_limits)
            return Applied(op, applied.outcome, job, started=done)
        request = op.request if isinstance(op.request, TriggerRequest) else TriggerRequest()
        started = await on_demand.trigger(conn, op.tenant, op.job_id, request)
        return Applied(op, applied.outcome, job, started=started)

    # reads ------------------------------------------------------------------------------------

    @staticmethod
    async def _write_notes(conn: db.Conn, results: Sequence[Applied]) -> None:
        """The notes pauses carry (a tenant's HTTP or Kafka pause): beside the version the job
        is paused at, when the pause changed it or found it paused already."""
        for applied in results:
            note, job = applied.op.note, applied.job
            if note is None or job is None or job.status != JobStatus.PAUSED:
                continue
            if applied.outcome in (Outcome.PAUSED, Outcome.UNCHANGED):
                await conn.execute(
                    QUERIES["job_pause_note_write"],
                    job.tenant,
                    job.job_id,
                    job.version,
                    note[0],
                    note[1],
                )

    async def runs_done(self, tenant: str, job_id: str) -> int:
        """A job's counted runs so far (max_runs): its scheduled runs that were not skipped."""
        done = await self.pool.fetchval(QUERIES["job_runs_done"], tenant, job_id)
        return int(done or 0)

    async def get(self, tenant: str, job_id: str) -> JobView | None:
        row = await self.pool.fetchrow(QUERIES["job_get"], tenant, job_id)
        return None if row is None else job_view(row)

    async def list_jobs(
        self,
        tenant: str,
        *,
        after: str | None,
        limit: int,
        status: str | None = None,
        priority: str | None = None,
        kind: str | None = None,
    ) -> tuple[list[JobView], str | None]:
        """A page of jobs in id order and the id to continue after (None: last page)."""
        rows = await self.pool.fetch(
            QUERIES["jobs_list"], tenant, after, status, priority, kind, limit + 1
        )
        page = [job_view(r) for r in rows[:limit]]
        more = len(rows) > limit
        return page, (page[-1].document["id"] if more and page else None)

    async def runs(
        self, tenant: str, job_id: str, *, before_ms: int | None, limit: int
    ) -> tuple[list[RunView], int | None]:
        """A page of a job's runs, newest first, and the instant to continue before."""
        rows = await self.pool.fetch(QUERIES["job_runs_page"], tenant, job_id, before_ms, limit + 1)
        page = [run_view(r) for r in rows[:limit]]
        more = len(rows) > limit
        return page, (page[-1].scheduled_at if more and page else None)

    async def health(self, timeout_s: float) -> str | None:
        """None when the database answers within `timeout_s` seconds, else why not (the
        exception's name)."""
        try:
            await asyncio.wait_for(self.pool.fetchval(QUERIES["health_check"]), timeout_s)
        except (TimeoutError, *DB_UNAVAILABLE, asyncpg.PostgresError) as exc:
            return type(exc).__name__
        return None

    # tenants ----------------------------------------------------------------------------------

    async def create_tenant(self, name: str) -> str:
        """Create a tenant and its first API key; the key is returned once, stored hashed."""
        api_key = API_KEY_PREFIX + secrets.token_urlsafe(32)
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(QUERIES["tenant_insert"], name)
            shown = api_key[:API_KEY_SHOWN_CHARS]
            await conn.execute(QUERIES["api_key_insert"], hash_key(api_key), shown, name)
        return api_key

    async def tenants(self, name: str | None = None) -> list[dict[str, Any]]:
        """Tenants (or the one named) with their quotas, registered jobs, active keys, their
        cap on runs running at once and, when capped, their runs running now (cluster-wide)."""
        rows = await self.pool.fetch(QUERIES["tenants_list"], name, RunStatus.RUNNING.value)
        return [tenant_view(r) for r in rows]

    async def set_quotas(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Set some of a tenant's quotas (`max_jobs`, `max_registrations_per_s`,
        `registrations_burst`; None lifts one); KeyError when there is no such tenant. Setting
        `max_jobs` sets the tenant's job counter to the truth first (one count of its jobs)."""
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(QUERIES["tenant_quota_row"], name)
            if row is None:
                raise KeyError(name)
            quotas = {key: row[key] for key in QUOTA_COLUMNS} | changes
            await conn.execute(QUERIES["tenant_quota_set"], name, *quotas.values())
            if "max_jobs" in changes:
                await conn.fetchval(QUERIES["tenant_usage_lock"], name)
                await conn.fetchval(QUERIES["tenant_jobs_recount"], name)
        [view] = await self.tenants(name)
        return view

    async def revoke_key(self, prefix_or_key: str) -> tuple[str, str]:
        """Revoke the active key given whole, or named by its printed prefix (the first
        API_KEY_SHOWN_CHARS characters); (prefix, tenant) of the key revoked. KeyError when
        no active key matches, ValueError when a prefix names more than one."""
        async with self.pool.acquire() as conn, conn.transaction():
            if len(prefix_or_key) > API_KEY_SHOWN_CHARS:
                key_hash = hash_key(prefix_or_key)
            else:
                rows = await conn.fetch(QUERIES["api_keys_active_by_prefixes"], [prefix_or_key])
                if len(rows) > 1:
                    raise ValueError(
                        f"prefix {prefix_or_key!r} names {len(rows)} active keys; give the "
                        "whole key"
                    )
                if not rows:
                    raise KeyError(prefix_or_key)
                key_hash = rows[0]["key_hash"]
            row = await conn.fetchrow(QUERIES["api_key_revoke"], key_hash)
        if row is None:
            raise KeyError(prefix_or_key)
        return row["prefix"], row["tenant"]

    async def set_max_running(self, name: str, max_running: int | None) -> None:
        """Set (or, None, lift) a tenant's cap on its runs running at once; KeyError when no
        tenant has that name."""
        row = await self.pool.fetchrow(QUERIES["tenant_set_max_running"], name, max_running)
        if row is None:
            raise KeyError(name)

    async def tenant_for_key(self, api_key: str) -> str | None:
        tenant: str | None = await self.pool.fetchval(QUERIES["tenant_by_key"], hash_key(api_key))
        return tenant

    async def signing_keys(self, prefixes: Sequence[str]) -> list[SigningKey]:
        """The active keys whose stored prefix is one of `prefixes`."""
        rows = await self.pool.fetch(QUERIES["api_keys_active_by_prefixes"], list(prefixes))
        return [signing_key(r) for r in rows]

    async def remember_message_ids(
        self, topic: str, ids: Sequence[tuple[str, str, int, int, int]], keep_ms: int
    ) -> dict[tuple[str, str], tuple[str, int, int]]:
        """Remember signed registrations' message ids, given as (tenant, message id,
        partition, offset, signed at ms), each (tenant, id) once, for `keep_ms` past their
        signing; answers where each was first received: (topic, partition, offset)."""
        rows = await self.pool.fetch(
            QUERIES["registration_ids_remember"],
            [i[0] for i in ids],
            [i[1] for i in ids],
            topic,
            [i[2] for i in ids],
            [i[3] for i in ids],
            [i[4] for i in ids],
            keep_ms,
        )
        return {
            (r["tenant"], r["message_id"]): (
                r["source_topic"],
                r["source_partition"],
                r["source_offset"],
            )
            for r in rows
        }

    async def join_replay_memory(self, keep_ms: int) -> int | None:
        """Lengthen the deployment's replay memory to `keep_ms` (ms an id is kept past its
        signing) if it is shorter; answer the instant (unix ms) from which the memory holds
        every id, None for a database that records no deployment (migration 0014)."""
        row = await self.pool.fetchrow(QUERIES["deployment_widen_replay_memory"], keep_ms)
        return None if row is None else int(row["complete_from_ms"])

    async def existing_tenants(self, names: Sequence[str]) -> set[str]:
        rows = await self.pool.fetch(QUERIES["tenants_existing"], list(set(names)))
        return {r["name"] for r in rows}
