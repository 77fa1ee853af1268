"""Pause on failure on the real stack (issue 50, D-283): a job with `pause_after_dead_runs` N is
paused by the registry after N consecutive dead runs and not before, with a note naming the
last one; a success breaks the streak; an edit or a resume starts the count over; a job edited
since the ledger was read is not paused; and end to end, a scheduler and a worker running a
handler that always fails leave the job paused, and its leader claims nothing after that.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tickwheel.clock import now_ms
from tickwheel.registry_api.auto_pause import PAUSED_BY, AutoPause
from tickwheel.registry_api.store import RegistryStore
from tickwheel.sharding import shard_of

from .conftest import TEST_SHARDS, SchedEnv, running_scheduler, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
async def auto(sched: SchedEnv) -> AsyncIterator[tuple[AutoPause, list[str]]]:
    pool = await asyncpg.create_pool(sched.dsn, min_size=1, max_size=2)
    paused: list[str] = []
    try:
        yield AutoPause(RegistryStore(pool, shards=TEST_SHARDS), on_pause=paused.append), paused
    finally:
        await pool.close()


def _job(job_id: str, n: int, **fields: Any) -> dict[str, Any]:
    return {"id": job_id, "schedule": "0 0 1 1 *", "handler": "test.record",
            "pause_after_dead_runs": n, **fields}  # fmt: skip


async def _finish(sched: SchedEnv, job_id: str, *outcomes: str) -> list[int]:
    """Runs of the job that finished with `outcomes`, oldest first, a millisecond apart after its
    latest run and its last change (as a worker leaves them: finished now, attempt 1)."""
    (row,) = await sched.fetch(
        "SELECT greatest((extract(epoch FROM j.updated_at) * 1000)::bigint,"
        " (SELECT (extract(epoch FROM max(r.scheduled_at)) * 1000)::bigint FROM job_runs r"
        "  WHERE r.tenant = j.tenant AND r.job_id = j.job_id)) AS ms"
        " FROM jobs j WHERE j.tenant = $1 AND j.job_id = $2",
        sched.tenant,
        job_id,
    )
    instants = [row["ms"] + i + 1 for i in range(len(outcomes))]
    conn = await asyncpg.connect(sched.dsn)
    try:
        for ms, status in zip(instants, outcomes, strict=True):
            await conn.execute(
                "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status,"
                " attempt, epoch, max_attempts, origin, started_at, finished_at, last_error)"
                " VALUES ($1, $2, 'epoch'::timestamptz + $3 * interval '1 millisecond', $4,"
                " 'normal', $5, 1, 1, 1, 'schedule', now(), now(),"
                " CASE WHEN $5 = 'dead' THEN 'refused by the test' END)",
                sched.tenant,
                job_id,
                ms,
                shard_of(sched.tenant, job_id, TEST_SHARDS),
                status,
            )
    finally:
        await conn.close()
    return instants


async def _state(sched: SchedEnv, job_id: str) -> tuple[str, str | None, str | None]:
    (row,) = await sched.fetch(
        "SELECT j.status, n.paused_by, n.reason FROM jobs j LEFT JOIN job_pause_notes n"
        " ON n.tenant = j.tenant AND n.job_id = j.job_id AND n.version = j.version"
        " WHERE j.tenant = $1 AND j.job_id = $2",
        sched.tenant,
        job_id,
    )
    return row["status"], row["paused_by"], row["reason"]


async def test_n_consecutive_dead_runs_pause_the_job_and_not_before(
    sched: SchedEnv, auto: tuple[AutoPause, list[str]]
) -> None:
    """3 allowed: two dead runs leave it active; a success then two dead still do; the third
    consecutive dead run pauses it with a note naming the last one, counted once"""
    part, paused = auto
    await sched.register(_job("flaky", 3), _job("other", 1))
    await _finish(sched, "flaky", "dead", "dead")
    assert await part.step() == 0
    assert (await _state(sched, "flaky"))[0] == "active"
    await sched.op("pause", "other")  # a paused job is never paused again
    await sched.op("resume", "other")
    instants = await _finish(sched, "flaky", "dead", "dead", "succeeded", "dead", "dead")
    assert await part.step() == 0, "a success broke the streak"
    later = await _finish(sched, "flaky", "dead", "dead", "succeeded", "dead", "dead", "dead")
    assert later[0] > instants[-1]
    assert await part.step() == 1
    status, by, reason = await _state(sched, "flaky")
    assert (status, by) == ("paused", PAUSED_BY)
    assert reason is not None and f"{sched.tenant}/flaky@{later[-1]}" in reason
    assert "3 consecutive runs died" in reason
    assert paused == [sched.tenant]
    assert await part.step() == 0  # found again: already paused, nothing written
    assert (await _state(sched, "other"))[0] == "active"


async def test_a_resume_starts_the_count_over_and_an_edit_since_the_read_wins(
    sched: SchedEnv, auto: tuple[AutoPause, list[str]]
) -> None:
    """after a resume the dead runs before it no longer count; a job edited after the ledger
    was read (a new version) is not paused over the edit"""
    part, _ = auto
    await sched.register(_job("j", 2))
    await _finish(sched, "j", "dead", "dead")
    assert await part.step() == 1
    await sched.op("resume", "j")
    await _finish(sched, "j", "dead")
    assert await part.step() == 0, "one dead run since the resume"
    (row,) = await sched.fetch(
        "SELECT version FROM jobs WHERE tenant = $1 AND job_id = 'j'", sched.tenant
    )
    paused = await part._pause(sched.tenant, "j", row["version"] - 1, 2, now_ms())
    assert not paused and (await _state(sched, "j"))[0] == "active"


async def test_a_failing_job_end_to_end_is_paused_and_its_runs_stop(
    sched: SchedEnv, auto: tuple[AutoPause, list[str]], tmp_path: Path
) -> None:
    """an every-second job whose handler always fails for good, one attempt, N = 2: a scheduler
    and a worker run it, the registry's part pauses it, and the leader, told by the change
    feed, claims no occurrence more than a couple of seconds after the pause"""
    part, _ = auto
    await sched.register(
        {"id": "doomed", "schedule": "* * * * * *", "handler": "test.record",
         "payload": {"fail": "permanent"}, "max_attempts": 1, "pause_after_dead_runs": 2}
    )  # fmt: skip
    log = tmp_path / "executions.log"
    worker = sched.spawn_worker(log)
    try:
        async with running_scheduler(sched, "a"):

            async def paused() -> bool:
                await part.step()
                return (await _state(sched, "doomed"))[0] == "paused"

            await wait_for(paused, 60, interval_s=0.5, what="the job paused on failure")
            await asyncio.sleep(3)  # what the leader would claim after the pause, it would now
    finally:
        worker.terminate()
        worker.wait(20)
    runs = await sched.runs("doomed")
    dead = [r for r in runs if r["status"] == "dead"]
    assert len(dead) >= 2
    (job,) = await sched.fetch(
        "SELECT (extract(epoch FROM updated_at) * 1000)::bigint AS ms FROM jobs"
        " WHERE tenant = $1 AND job_id = 'doomed'",
        sched.tenant,
    )
    assert max(r["ms"] for r in runs) <= job["ms"] + 2000, "claimed long after the pause"
    status, by, reason = await _state(sched, "doomed")
    assert (status, by) == ("paused", PAUSED_BY) and reason is not None
    # The note names a dead run, one the ledger holds as dead.
    assert any(f"@{r['ms']}" in reason for r in dead)
