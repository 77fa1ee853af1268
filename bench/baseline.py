"""The baseline: the naive design engineers start from, on the same data and machine.

Three competing poller processes each loop over

    BEGIN
    SELECT … FROM jobs WHERE due … ORDER BY next_run_at LIMIT 500 FOR UPDATE SKIP LOCKED
    per row: INSERT the run row; UPDATE the job (a one-off is completed)
    COMMIT
    publish the page's run envelopes and wait for the broker's acks

until no due job is left. It keeps I1 (publish after commit) and gets an index of its own on
`next_run_at`, so it is the naive design done properly, not a strawman. It runs in a scratch
database and topics of its own, holding the same one-off jobs as the measured run, all due when
the pollers start.

Figures: `claimed_per_s` = jobs / (start of the transaction that claimed the last job - start
of the first), the same definition as the measured run's claim rate (analysis.py), which counts
from T0; `wall_per_s` = jobs / (the harness seeing every run row - that start), which includes
the last page's transaction and publish.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from tickwheel.bench.analysis import MS_PER_S, RunRecord
from tickwheel.bench.observe import fetch_runs
from tickwheel.bench.scratch import Scratch
from tickwheel.bench.supervisor import Supervisor, SupervisorError
from tickwheel.clock import ms_to_datetime, now_ms
from tickwheel.domain import run_key
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.kafka.clients import producer
from tickwheel.kafka.producing import Outgoing, PublishError, publish_confirmed
from tickwheel.queries import QUERIES
from tickwheel.topics import Topics

POLLERS = 3
START_DELAY_S = 5.0  # seconds from spawning the pollers to their common start
POLL_S = 0.25
BASELINE_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class BaselineResult:
    jobs: int
    pollers: int
    claimed_per_s: float
    wall_per_s: float
    seconds: float
    started_ms: int
    rows: list[RunRecord]

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "pollers": self.pollers,
            "claimed_per_s": round(self.claimed_per_s, 1),
            "wall_per_s": round(self.wall_per_s, 1),
            "seconds": round(self.seconds, 3),
        }


async def poll_until_drained(dsn: str, kafka: str, prefix: str, start_at_ms: int) -> int:
    """One poller: claim pages of due jobs until none is left; returns the runs it claimed."""
    topics = Topics(prefix)
    conn = await asyncpg.connect(dsn)
    prod = producer(kafka)
    claimed = 0
    try:
        await asyncio.sleep(max(0.0, (start_at_ms - now_ms()) / MS_PER_S))
        while True:
            envelopes = []
            async with conn.transaction():
                rows = await conn.fetch(QUERIES["baseline_poll"])
                if not rows:
                    break
                for r in rows:
                    await conn.execute(
                        QUERIES["baseline_insert_run"],
                        r["tenant"],
                        r["job_id"],
                        r["scheduled_ms"],
                        r["shard_id"],
                        r["priority"],
                        r["max_attempts"],
                    )
                    await conn.execute(QUERIES["baseline_complete_job"], r["tenant"], r["job_id"])
                    envelopes.append(
                        RunEnvelope(
                            run_key=run_key(r["tenant"], r["job_id"], r["scheduled_ms"]),
                            tenant=r["tenant"],
                            job_id=r["job_id"],
                            scheduled_at=r["scheduled_ms"],
                            attempt=1,
                            epoch=0,
                            priority=r["priority"],
                            payload=orjson.loads(r["payload"]),
                            timeout_ms=r["timeout_ms"],
                            handler=r["handler"],
                        )
                    )
            claimed += len(envelopes)
            outgoing = [
                Outgoing(
                    topics.runs(e.priority),
                    value=e.encode(),
                    key=e.job_id,
                    headers=list(e.headers()),
                )
                for e in envelopes
            ]
            failed = await asyncio.get_running_loop().run_in_executor(
                None, publish_confirmed, prod, outgoing
            )
            if failed:
                raise PublishError(failed)
    finally:
        await conn.close()
        prod.flush(10)
    return claimed


async def run_baseline(
    res: Scratch, jobs: int, fleet: Supervisor, progress: Callable[[int], None]
) -> BaselineResult:
    """Make every job of `res` due, run the pollers, wait until every job has its run row."""
    conn = await asyncpg.connect(res.dsn)
    try:
        await conn.execute(QUERIES["baseline_index"])
        start_at_ms = now_ms() + int(START_DELAY_S * MS_PER_S)
        # Due a moment before the start: every job is claimable from the first poll on.
        await conn.execute(QUERIES["bench_make_due"], ms_to_datetime(start_at_ms - 1000))
        await conn.execute(QUERIES["bench_analyze_jobs"])
        names = [f"baseline-poller-{k}" for k in range(POLLERS)]
        for name in names:
            fleet.start(name, ["bench", "baseline-poller", "--start-at-ms", str(start_at_ms)])
        deadline = time.monotonic() + BASELINE_TIMEOUT_S
        done = 0
        while True:
            done = await conn.fetchval(QUERIES["bench_progress"])
            progress(done)
            if done >= jobs:
                break
            for child in fleet.children.values():
                if child.name in names and child.popen.poll() not in (None, 0):
                    raise SupervisorError(f"{child.name} failed; its log ends:\n{child.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the baseline claimed {done} of {jobs} jobs")
            await asyncio.sleep(POLL_S)
        seen_ms = now_ms()
        fleet.stop(names)
        rows = await fetch_runs(conn)
    finally:
        await conn.close()
    # The pollers' first transaction, not the start they were given: on a busy machine a
    # poller process may come up after it, and its start-up is not the design's cost.
    first_ms = min(r.claimed_ms for r in rows)
    last_claim_ms = max(r.claimed_ms for r in rows)
    return BaselineResult(
        jobs=jobs,
        pollers=POLLERS,
        claimed_per_s=jobs / max(1e-3, (last_claim_ms - first_ms) / MS_PER_S),
        wall_per_s=jobs / max(1e-3, (seen_ms - first_ms) / MS_PER_S),
        seconds=(seen_ms - first_ms) / MS_PER_S,
        started_ms=first_ms,
        rows=rows,
    )
