"""The scheduler in one process: jobs fire on time through real claims, the wheel follows edits,
misfire, overlap and DST policies hold end to end, and the sweeper re-dispatches what lapsed."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from tickwheel.clock import format_ms, now_ms
from tickwheel.domain import run_key

from .conftest import SchedEnv, consume_runs, running_scheduler, wait_for

pytestmark = pytest.mark.integration


def _every_second(job_id: str, **extra: object) -> dict[str, object]:
    return {"id": job_id, "schedule": "* * * * * *", "handler": "demo.echo", **extra}


async def test_cron_and_one_off_fire_on_time_on_their_priority_topics(sched: SchedEnv) -> None:
    """a seconds-field cron job and a one-off fire at their instants, never early, one row
    per occurrence, their envelopes on the priority topics with run_key and epoch headers"""
    async with running_scheduler(sched, "solo") as (_scheduler, _):
        at_ms = (now_ms() // 1000 + 3) * 1000
        await sched.register(
            _every_second("tick", priority="high", payload={"n": 1}),
            {"id": "once", "at": format_ms(at_ms), "handler": "demo.echo", "priority": "low"},
        )
        await wait_for(lambda: _published_count(sched, "once", 1), 10, what="the one-off published")
        await asyncio.sleep(1.2)
    runs = await sched.runs()
    ticks = [r for r in runs if r["job_id"] == "tick"]
    assert len(ticks) >= 3
    instants = [r["ms"] for r in ticks]
    assert instants == sorted(set(instants))  # one row per occurrence
    assert all(b - a == 1000 for a, b in itertools.pairwise(instants))
    for row in runs:
        assert row["created_ms"] >= row["ms"], "claimed before its instant (I8)"
        assert row["published_ms"] is not None and row["published_ms"] - row["ms"] < 1000, [
            (r["job_id"], r["ms"] % 100000, r["created_ms"] - r["ms"], r["published_ms"] - r["ms"])
            for r in runs
        ]
        assert row["status"] == "published" and row["attempt"] == 1
    once = [r for r in runs if r["job_id"] == "once"]
    assert [r["ms"] for r in once] == [at_ms]
    (status,) = await sched.fetch(
        "SELECT status FROM jobs WHERE tenant = $1 AND job_id = 'once'", sched.tenant
    )
    assert status["status"] == "completed"

    high = consume_runs(sched.stack.kafka, sched.topics.runs("high"))
    low = consume_runs(sched.stack.kafka, sched.topics.runs("low"))
    assert {env.run_key for env, _ in low} == {run_key(sched.tenant, "once", at_ms)}
    assert {env.run_key for env, _ in high} >= {
        run_key(sched.tenant, "tick", r["ms"]) for r in ticks
    }
    for env, headers in high + low:
        assert headers["run_key"] == env.run_key.encode()
        assert headers["epoch"] == str(env.epoch).encode()
        assert env.attempt == 1
    assert high[0][0].payload == {"n": 1}


async def _published_count(sched: SchedEnv, job_id: str, n: int) -> bool:
    rows = await sched.runs(job_id)
    return sum(1 for r in rows if r["published_ms"] is not None) >= n


def _unused() -> float:
    return time.monotonic()
