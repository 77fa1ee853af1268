"""Runs on demand: a trigger (one run now) and a backfill (one run per past occurrence).

Both go through the run ledger like any retry (DESIGN I6): the registry writes `job_runs` rows
in the job's shard as `retrying` at attempt 0, with `origin` trigger|backfill and `retry_at`
saying when each may go out, and sends `NOTIFY tickwheel_runs '<shard>'`; the shard's leader
loads them into its wheel at once (if that hint is lost, at its next sweep) and claims each,
fenced (I2), as attempt 1 — applying the job's overlap policy as for a scheduled occurrence —
then publish, worker claim, retries and DLQ as for every run. So nothing here talks to Kafka,
and a trigger works for a paused job (the leader re-dispatches a paused job's retrying rows;
pausing stops the schedule, not runs already asked for).

    trigger   run key = <tenant>/<job_id>@<the database's clock, ms>, due at once. A run key
              already taken (a scheduled occurrence or another trigger in the same
              millisecond) moves the instant on by a millisecond. With an idempotency key
              (HTTP `Idempotency-Key`; a Kafka message's explicit key, else its source
              position), the same key for the same job within 24 h answers the first run key
              and starts nothing (`trigger_requests`, migration 0006).
    backfill  one run per occurrence of the job's schedule in [from, to) — DST policies and
              `H` as for the job, through `tickwheel.schedule` — each under the occurrence's
              own run key, inserted only where no run exists (so an occurrence that ran is
              not run again, and repeating a backfill creates nothing). `retry_at`s are spaced
              `1000 / rate` ms apart (after any backfill runs of the job still waiting), so a
              backfill reaches workers at a bounded rate. Refused (`BackfillRefused`, naming
              the field): `to` not after `from`, `to` after now by the database's clock, `from`
              before the run history's retention, more occurrences than `max_runs` (the count
              stops there; the answer says where to split the range).

The store (store.py) runs these inside the transaction of the batch that holds the job's row
lock, after the batch's job writes, so a trigger is ordered with the job's other operations
(a job created and triggered in one Kafka batch works) and two triggers with one key
serialise on that lock. A backfill's occurrences are counted before that transaction, with no
lock and no connection held (`BackfillPlan`), so a refusal costs no other request anything;
the transaction reuses the count while the job is the version it was counted for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tickwheel.clock import format_ms
from tickwheel.domain import run_key
from tickwheel.queries import QUERIES
from tickwheel.registry_api.document import FieldProblem, JobValidationError, OpRefused
from tickwheel.schedule import ScheduleCache, ScheduleError, Timing, next_fire_after
from tickwheel.schedule.instants import parse_instant

BACKFILL_MAX_RUNS = 10_000  # occurrences one backfill may create at most (a setting)
BACKFILL_RATE_PER_S = 100.0  # runs per second a backfill releases per job (a setting)
DAY_MS = 86_400_000
TRIGGER_INSTANT_TRIES = 1000  # milliseconds a trigger moves on at most past taken run keys


@dataclass(frozen=True)
class RunLimits:
    """The operator's bounds on runs on demand."""

    backfill_max_runs: int = BACKFILL_MAX_RUNS
    backfill_rate_per_s: float = BACKFILL_RATE_PER_S
    # The run history's retention (`tickwheel gc`): a backfill may not reach before it, since
    # the next gc would remove its runs, waiting or not.
    retention_days: int = 30


# A trigger's idempotency key, however it comes (the HTTP `Idempotency-Key` header, a Kafka
# trigger's `idempotency_key`, `tickwheel jobs trigger --idempotency-key`): 1 to 255 printable
# ASCII characters. A control character would be stored and echoed in logs and answers (and
# a NUL fails the statement); HTTP headers cannot carry more than Latin-1 anyway.
IDEMPOTENCY_KEY_MAX_CHARS = 255
_IDEMPOTENCY_KEY_FORM = re.compile(r"[\x20-\x7e]{1,255}")


def checked_idempotency_key(key: str | None, field: str) -> str | None:
    """`key` if it is an idempotency key (None: none given), else JobValidationError naming
    `field` as the caller knows it."""
    if key is None or _IDEMPOTENCY_KEY_FORM.fullmatch(key):
        return key
    raise JobValidationError(
        [
            FieldProblem(
                field,
                f"must be 1 to {IDEMPOTENCY_KEY_MAX_CHARS} printable ASCII characters "
                f"(no control characters), not {len(key)} characters"
                + ("" if key.isprintable() else " with a control character"),
            )
        ]
    )


@dataclass(frozen=True)
class TriggerRequest:
    """A trigger; `idempotency_key` None: every request starts a run."""

    idempotency_key: str | None = None


@dataclass(frozen=True)
class BackfillPlan:
    """A backfill's occurrences, counted before its transaction against one version of its job
    (`RegistryStore.apply`); the transaction uses them while the job is still that version."""

    version: int
    occurrences: tuple[int, ...]


@dataclass(frozen=True)
class BackfillRequest:
    """A backfill of the occurrences in [from_ms, to_ms) (UTC ms); `plan`: counted already."""

    from_ms: int
    to_ms: int
    plan: BackfillPlan | None = None


@dataclass(frozen=True)
class Triggered:
    """What a trigger did: the run key, and whether this request created the run (False: an
    earlier request with the same idempotency key did)."""

    run_key: str
    scheduled_ms: int
    created: bool


@dataclass(frozen=True)
class Backfilled:
    """What a backfill did: the occurrences in its range, and the runs it created of them
    (their first and last instants, UTC ms; None when it created none)."""

    occurrences: int
    created: int
    first_ms: int | None
    last_ms: int | None


WINDOW_FIELDS = ("from", "to")


def backfill_window(body: Any) -> BackfillRequest:
    """The range of a backfill request body `{"from": ISO, "to": ISO}`, or JobValidationError
    naming each field at fault (the range's meaning is checked later, against the job)."""
    if not isinstance(body, dict):
        raise JobValidationError(
            [FieldProblem("", 'a backfill request is a JSON object {"from": ISO, "to": ISO}')]
        )
    problems = [
        FieldProblem(name, "is not a field of a backfill request (from, to)")
        for name in body
        if name not in WINDOW_FIELDS
    ]
    instants: dict[str, int] = {}
    for name in WINDOW_FIELDS:
        if name not in body:
            problems.append(FieldProblem(name, "is required: an ISO-8601 instant"))
            continue
        try:
            instants[name] = parse_instant(body[name], name)
        except ScheduleError as exc:
            problems.append(FieldProblem(name, exc.message))
    if problems:
        raise JobValidationError(problems)
    return BackfillRequest(instants["from"], instants["to"])


class BackfillRefused(OpRefused):
    """A backfill range that cannot be run; `field` names the input at fault."""


def retention_start_ms(now_ms: int, retention_days: int) -> int:
    """The first instant the run history keeps: the start of the UTC day `retention_days`
    before today (as `tickwheel.maintenance.cutoff_day`)."""
    return (now_ms // DAY_MS - retention_days) * DAY_MS


def check_range(from_ms: int, to_ms: int, now_ms: int, limits: RunLimits) -> None:
    """BackfillRefused for a range that cannot be run whatever the schedule: arithmetic only."""
    if to_ms <= from_ms:
        raise BackfillRefused("to", "must be after 'from' (the range is [from, to))")
    oldest = retention_start_ms(now_ms, limits.retention_days)
    if from_ms < oldest:
        raise BackfillRefused(
            "from",
            f"is before {format_ms(oldest)}, the start of the run history's retention "
            f"({limits.retention_days} days): the next gc would remove those runs",
        )
    if to_ms > now_ms:
        raise BackfillRefused(
            "to",
            "reaches into the future; a backfill runs past occurrences only "
            "(the schedule runs the future ones)",
        )


def occurrences(
    timing: Timing, from_ms: int, to_ms: int, now_ms: int, limits: RunLimits
) -> list[int]:
    """The job's occurrences in [from_ms, to_ms), oldest first, or BackfillRefused.

    The count stops one past `backfill_max_runs`: a range holding more is refused having cost
    at most that many steps (a few microseconds each), however long it is — a per-second job
    over 25 days once cost a million steps, seconds of CPU, before its 422. Pure CPU: callers
    on an event loop run it in a thread, and the store runs it before taking any lock.
    """
    check_range(from_ms, to_ms, now_ms, limits)
    max_runs = limits.backfill_max_runs
    cache = ScheduleCache()
    found: list[int] = []
    after = from_ms - 1
    while len(found) <= max_runs:
        nxt = next_fire_after(cache, timing, after)
        if nxt is None or nxt >= to_ms:
            return found
        found.append(nxt)
        after = nxt
    raise BackfillRefused(
        "to",
        f"the range holds more than {max_runs:,} occurrences; a backfill may run at most "
        f"{max_runs:,}: split the range (its first {max_runs:,} lie before "
        f"{format_ms(found[max_runs])})",
    )


def spacing_ms(rate_per_s: float) -> float:
    """Milliseconds between two backfill runs' `retry_at` at `rate_per_s`."""
    return 1000.0 / rate_per_s


async def trigger(conn: Any, tenant: str, job_id: str, request: TriggerRequest) -> Triggered:
    """Start (or, for a known idempotency key, find) one triggered run. Inside the batch's
    transaction, with the job's row locked and the job live."""
    key = request.idempotency_key
    if key is not None:
        known = await conn.fetchval(QUERIES["trigger_request_get"], tenant, job_id, key)
        if known is not None:
            return Triggered(run_key(tenant, job_id, known), known, created=False)
    instant: int = await conn.fetchval(QUERIES["on_demand_db_now"])
    for _ in range(TRIGGER_INSTANT_TRIES):
        created = await conn.fetchval(QUERIES["trigger_insert"], tenant, job_id, instant)
        if created is not None:
            break
        instant += 1
    else:
        raise RuntimeError(f"no free run key for a trigger of {tenant}/{job_id} near {instant}")
    if key is not None:
        await conn.execute(QUERIES["trigger_request_put"], tenant, job_id, key, instant)
    await conn.execute(QUERIES["runs_notify"], tenant, job_id)
    return Triggered(run_key(tenant, job_id, instant), instant, created=True)


async def backfill(
    conn: Any,
    tenant: str,
    job_id: str,
    planned: list[int],
    limits: RunLimits,
) -> Backfilled:
    """Insert the runs of `planned` occurrences that have none yet (inside the batch's
    transaction, the job's row locked)."""
    rows = await conn.fetch(
        QUERIES["backfill_insert"],
        tenant,
        job_id,
        planned,
        spacing_ms(limits.backfill_rate_per_s),
    )
    created = sorted(r["scheduled_at"] for r in rows)
    if created:
        await conn.execute(QUERIES["runs_notify"], tenant, job_id)
    return Backfilled(
        occurrences=len(planned),
        created=len(created),
        first_ms=created[0] if created else None,
        last_ms=created[-1] if created else None,
    )


async def db_now_ms(conn: Any) -> int:
    """The database's clock, UTC ms."""
    now: int = await conn.fetchval(QUERIES["on_demand_db_now"])
    return now
