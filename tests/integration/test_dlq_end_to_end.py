"""Dead letters end to end (issue 13): a real scheduler and a real `tickwheel worker` retry a
failing handler until its runs are dead and on the DLQ; once the handler is fixed,
`tickwheel dlq replay` with a filter replays exactly the selected runs, each succeeds once
under its own run key, and a second replay does nothing more."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from tickwheel.domain import RegistrationOp
from tickwheel.envelopes.dead_letters import DeadLetter
from tickwheel.registry_api.on_demand import TriggerRequest
from tickwheel.registry_api.ops.dlq import read_dead_letters
from tickwheel.registry_api.state import Op
from tickwheel.registry_api.store import RegistryStore

from .conftest import TEST_SHARDS, TICKWHEEL, SchedEnv, running_scheduler, wait_for

pytestmark = pytest.mark.integration

PICKED_RUNS = 3  # dead runs of the job the replay selects
OTHER_RUNS = 2  # dead runs of a job it leaves alone


def _job(job_id: str) -> dict[str, Any]:
    # Daily at noon: only the triggers below run it. Two attempts, 100-200 ms apart, so each
    # run is retried once through the scheduler before it is dead.
    return {
        "id": job_id,
        "schedule": "0 12 * * *",
        "handler": "test.switchable",
        "max_attempts": 2,
        "backoff": {"base_ms": 100, "cap_ms": 200},
    }


async def _trigger(sched: SchedEnv, job_id: str, count: int) -> list[str]:
    import asyncpg

    pool = await asyncpg.create_pool(sched.dsn, min_size=1, max_size=2)
    try:
        store = RegistryStore(pool, TEST_SHARDS)
        keys = []
        for i in range(count):
            op = Op(RegistrationOp.TRIGGER, sched.tenant, job_id, request=TriggerRequest(f"k{i}"))
            [applied] = await store.apply([op])
            assert applied.started is not None
            keys.append(applied.started.run_key)  # type: ignore[union-attr]
        return keys
    finally:
        await pool.close()


def _replay(sched: SchedEnv, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [TICKWHEEL, "dlq", "replay", *args, "--json"],
        env={**os.environ, **sched.env, "USER": "e2e"},
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    answer: dict[str, Any] = orjson.loads(done.stdout)
    return answer


async def _statuses(sched: SchedEnv) -> dict[str, tuple[str, int]]:
    rows = await sched.fetch(
        "SELECT job_id, (extract(epoch FROM scheduled_at) * 1000)::bigint AS ms, status, attempt"
        " FROM job_runs WHERE tenant = $1",
        sched.tenant,
    )
    return {f"{sched.tenant}/{r['job_id']}@{r['ms']}": (r["status"], r["attempt"]) for r in rows}


async def test_dead_runs_replayed_after_a_fix_succeed_once_and_only_the_selected(
    sched: SchedEnv, tmp_path: Path
) -> None:
    """runs of a failing handler end dead on the DLQ after their retries; after the fix a
    filtered `dlq replay` replays exactly the selected runs, each succeeds once under its run
    key, the others stay dead, and a second replay does nothing more"""
    log = tmp_path / "executions.log"
    broken = tmp_path / "broken"
    broken.touch()
    worker = sched.spawn_worker(log, TW_TEST_BROKEN=str(broken))
    await sched.register(_job("picked"), _job("other"))
    async with running_scheduler(sched, "solo"):
        picked = await _trigger(sched, "picked", PICKED_RUNS)
        other = await _trigger(sched, "other", OTHER_RUNS)

        async def all_dead() -> bool:
            runs = await _statuses(sched)
            return all(runs.get(k, ("", 0))[0] == "dead" for k in (*picked, *other))

        await wait_for(all_dead, 40, what="every run dead after its retries")
        letters, _ = await asyncio.to_thread(
            read_dead_letters, sched.stack.kafka, sched.topics.dlq, timeout_s=10
        )
        dead: dict[str, DeadLetter] = {x.run_key: x.dead for x in letters}
        assert set(dead) == {*picked, *other}
        assert all(d.attempts == 2 and d.run.origin == "trigger" for d in dead.values())

        broken.unlink()  # the fix
        first = await asyncio.to_thread(_replay, sched, "--job", "picked", "--tenant", sched.tenant)
        assert sorted(r["run_key"] for r in first["runs"] if r["outcome"] == "replayed") == sorted(
            picked
        )
        assert first["replayed"] == PICKED_RUNS

        async def picked_succeeded() -> bool:
            runs = await _statuses(sched)
            return all(runs[k][0] == "succeeded" for k in picked)

        await wait_for(picked_succeeded, 30, what="the replayed runs succeeded")
        second = await asyncio.to_thread(
            _replay, sched, "--job", "picked", "--tenant", sched.tenant
        )
        assert second["replayed"] == 0 and second["skipped"] == PICKED_RUNS
        await asyncio.sleep(1.5)  # a few sweeps: a second replay must dispatch nothing
        runs = await _statuses(sched)
    assert worker.poll() is None, sched.log_text("worker")
    executed = log.read_text().split("\n")
    for key in picked:
        # attempts 1 and 2 failed; the replay's attempt 3 ran once and succeeded
        assert [executed.count(f"{key} {a}") for a in (1, 2, 3, 4)] == [1, 1, 1, 0], key
        assert runs[key] == ("succeeded", 3)
    for key in other:
        assert [executed.count(f"{key} {a}") for a in (1, 2, 3)] == [1, 1, 0], key
        assert runs[key] == ("dead", 2)
