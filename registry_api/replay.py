"""Replaying dead runs: the operator transition `dead → retrying` of tickwheel/domain.py.

It writes the same kind of row as a trigger or a backfill (on_demand.py): a `retrying` run the
shard leader claims by its `retry_at`. `tickwheel dlq replay` (ops/cli_dlq.py) chooses the run
keys from the dead-letter topic (ops/dlq.py: the latest letter per run key) and the demo does
the same; a replay takes those run keys and, chunk by chunk, in one transaction per chunk:

1. locks the chunk's `job_runs` rows (`replay_lock_candidates`, FOR UPDATE) and reads their
   jobs' status and attempt budget;
2. `decide` — pure — says for each run: replay it, skip it (it is not dead any more: replayed
   already, succeeded since, …) or refuse it (its job was deleted, its row is gone), and why;
3. marks the `replay` ones retrying (`replay_mark`: due now by the database's clock,
   `max_attempts = attempt + budget`, origin replay; `attempt` stays, so a stale delivery of
   an old attempt cannot claim the run) and writes every candidate's outcome to
   `replay_audit_runs`; commits;
4. with a rate, waits until the replays so far average at most that rate.

The shard leader finds the retrying rows by `retry_at`, as it finds a worker's retries (I6),
and re-dispatches each under its same run key.

Why running it twice, or interrupting it, is safe: a chunk's marks and audit rows commit
together; a replayed run is `retrying` (or further), so a second replay skips it and says so;
`replay_mark` re-checks `status = 'dead'` under the row lock. The `replay_audit` row is
written first and finished last: 'completed', 'interrupted' (Ctrl-C) or 'failed' with the
counts so far; one left 'running' belonged to a process that was killed.

The job's row is read, not locked: a job deleted while its run is being replayed leaves a
`retrying` run of a deleted job, which the leader must handle anyway (a worker's retry races
a delete the same way).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import asyncpg
import orjson

from tickwheel.db import Conn
from tickwheel.domain import JobStatus, RunOrigin, RunStatus, parse_run_key
from tickwheel.queries import QUERIES

CHUNK_RUNS = 100  # run keys per transaction


class Outcome(StrEnum):
    REPLAYED = "replayed"
    SKIPPED = "skipped"
    REFUSED = "refused"


@dataclass(frozen=True)
class Candidate:
    """A selected run key and what the database holds for it (None: no such row)."""

    run_key: str
    run_status: str | None
    run_origin: str | None
    job_status: str | None
    job_max_attempts: int | None


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    reason: str | None = None
    budget: int | None = None  # attempts granted on top of those spent (replayed only)


def decide(candidate: Candidate, attempts: int | None) -> Decision:
    """What a replay does to one run. `attempts`: the fresh budget; None: the job's own."""
    status = candidate.run_status
    if status is None:
        return Decision(Outcome.REFUSED, "the run is no longer in job_runs (retention?)")
    if status == RunStatus.SUCCEEDED:
        return Decision(Outcome.SKIPPED, "succeeded since")
    if status != RunStatus.DEAD:
        if candidate.run_origin == RunOrigin.REPLAY:
            return Decision(Outcome.SKIPPED, f"already replayed, now {status}")
        return Decision(Outcome.SKIPPED, f"not dead any more, now {status}")
    if candidate.job_status is None:
        return Decision(Outcome.REFUSED, "its job no longer exists")
    if candidate.job_status == JobStatus.DELETED:
        return Decision(Outcome.REFUSED, "its job was deleted")
    budget = attempts if attempts is not None else candidate.job_max_attempts
    return Decision(Outcome.REPLAYED, None, budget)


def pace_delay_s(started_s: float, now_s: float, replayed: int, rate_per_s: float | None) -> float:
    """Seconds to wait so that `replayed` replays since `started_s` average at most the rate."""
    if rate_per_s is None:
        return 0.0
    return max(0.0, started_s + replayed / rate_per_s - now_s)


def chunk_size(rate_per_s: float | None) -> int:
    """Runs per transaction: with a rate, no burst above one second's worth."""
    if rate_per_s is None:
        return CHUNK_RUNS
    return max(1, min(CHUNK_RUNS, int(rate_per_s)))


@dataclass(frozen=True)
class RunResult:
    run_key: str
    outcome: Outcome
    reason: str | None
    budget: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_key": self.run_key,
            "outcome": self.outcome.value,
            "reason": self.reason,
            "budget": self.budget,
        }


@dataclass
class ReplayReport:
    dry_run: bool
    audit_id: int | None = None
    results: list[RunResult] = field(default_factory=list)
    finished: str = "completed"  # completed | interrupted | failed

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "audit_id": self.audit_id,
            "finished": self.finished,
            "selected": len(self.results),
            **{o.value: self.count(o) for o in Outcome},
            "runs": [r.to_json() for r in self.results],
        }


async def replay(
    conn: Conn,
    run_keys: Sequence[str],
    filters: Mapping[str, Any],
    *,
    operator: str,
    attempts: int | None = None,
    rate_per_s: float | None = None,
    dry_run: bool = False,
    on_progress: Callable[[int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> ReplayReport:
    """Replay the runs `run_keys` (chosen by `filters`, which the audit records as given); see
    the module docstring. `on_start` is given the audit's id once its row is written (the
    page answers with it while the replay goes on)."""
    report = ReplayReport(dry_run=dry_run)
    if not dry_run:
        report.audit_id = await conn.fetchval(
            QUERIES["replay_audit_start"],
            operator,
            orjson.dumps(dict(filters)).decode(),
            attempts,
            rate_per_s,
        )
        if on_start is not None:
            on_start(report.audit_id)
    started = clock()
    size = chunk_size(rate_per_s)
    replayed = 0
    try:
        for first in range(0, len(run_keys), size):
            chunk = run_keys[first : first + size]
            results = await _chunk(conn, chunk, attempts, dry_run, report.audit_id)
            report.results.extend(results)
            replayed += sum(1 for r in results if r.outcome == Outcome.REPLAYED)
            if on_progress is not None:
                on_progress(len(chunk))
            if not dry_run:
                await sleep(pace_delay_s(started, clock(), replayed, rate_per_s))
    except (KeyboardInterrupt, asyncio.CancelledError):
        report.finished = "interrupted"
        raise
    except BaseException:
        report.finished = "failed"
        raise
    finally:
        if report.audit_id is not None:
            try:
                await _finish_audit(conn, report)
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                if report.finished == "completed":
                    raise
                # The error that stopped the replay says more than this one; the audit row
                # stays 'running', and its per-run records say what the replay did.
    return report


async def _chunk(
    conn: Conn,
    run_keys: Sequence[str],
    attempts: int | None,
    dry_run: bool,
    audit_id: int | None,
) -> list[RunResult]:
    keys = [parse_run_key(key) for key in run_keys]
    async with conn.transaction():
        rows = await conn.fetch(
            QUERIES["replay_lock_candidates"],
            [k[0] for k in keys],
            [k[1] for k in keys],
            [k[2] for k in keys],
        )
        by_key = {(r["tenant"], r["job_id"], r["scheduled_ms"]): r for r in rows}
        results = []
        for key, text in zip(keys, run_keys, strict=True):
            row = by_key[key]
            decision = decide(
                Candidate(
                    text,
                    row["status"],
                    row["origin"],
                    row["job_status"],
                    row["job_max_attempts"],
                ),
                attempts,
            )
            results.append(RunResult(text, *_fields(decision)))
        if dry_run:
            return results
        chosen = [(k, r) for k, r in zip(keys, results, strict=True) if r.budget is not None]
        if chosen:
            marked = await conn.fetch(
                QUERIES["replay_mark"],
                [k[0] for k, _ in chosen],
                [k[1] for k, _ in chosen],
                [k[2] for k, _ in chosen],
                [r.budget for _, r in chosen],
            )
            # Under the row locks taken above nothing can have changed; a mismatch is a bug.
            if len(marked) != len(chosen):
                raise RuntimeError(f"marked {len(marked)} of {len(chosen)} dead runs retrying")
        await conn.execute(
            QUERIES["replay_audit_runs_insert"],
            audit_id,
            [k[0] for k in keys],
            [k[1] for k in keys],
            [k[2] for k in keys],
            [r.outcome.value for r in results],
            [r.reason for r in results],
        )
    return results


def _fields(decision: Decision) -> tuple[Outcome, str | None, int | None]:
    return decision.outcome, decision.reason, decision.budget


async def _finish_audit(conn: Conn, report: ReplayReport) -> None:
    # Shielded: an interrupted replay still records what it did before the interruption.
    await asyncio.shield(
        conn.execute(
            QUERIES["replay_audit_finish"],
            report.audit_id,
            report.finished,
            len(report.results),
            report.count(Outcome.REPLAYED),
            report.count(Outcome.SKIPPED),
            report.count(Outcome.REFUSED),
        )
    )
