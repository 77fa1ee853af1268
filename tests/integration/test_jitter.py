"""Jitter on the real stack (issue 50, D-287): a running scheduler claims each occurrence of a
jittered job at its due instant — the scheduled one plus the offset the pure function gives —
never before, while the run rows and run keys keep the scheduled instant, and the envelopes
say when each run was due."""

from __future__ import annotations

import asyncio

import pytest

from tickwheel.domain import job_key
from tickwheel.schedule import jitter_offset

from .conftest import SchedEnv, consume_runs, running_scheduler, wait_for

pytestmark = pytest.mark.integration

JITTER_MS = 800


async def test_a_jittered_per_second_job_runs_each_second_at_its_offset(sched: SchedEnv) -> None:
    """every run of a per-second job with jitter_ms 800 is keyed on its second and claimed and
    published at or after second + offset (the pure function's), none skipped; its envelope
    carries that due instant"""
    await sched.register(
        {"id": "spread", "schedule": "* * * * * *", "handler": "demo.echo", "jitter_ms": JITTER_MS}
    )
    key = job_key(sched.tenant, "spread")

    async def enough() -> bool:
        return len(await sched.runs("spread")) >= 6

    async with running_scheduler(sched, "a"):
        await wait_for(enough, 30, what="six runs of the jittered job")
    runs = await sched.runs("spread")
    offsets = {}
    for run in runs:
        ms = run["ms"]
        assert ms % 1000 == 0, "the run keeps its scheduled instant"
        assert run["status"] != "skipped", run["skip_reason"]
        offset = jitter_offset(key, ms, JITTER_MS, ms + 1000)
        offsets[ms] = offset
        assert run["created_ms"] >= ms + offset, (ms, offset, run["created_ms"])
        if run["published_ms"] is not None:
            assert run["published_ms"] >= ms + offset
    assert max(offsets.values()) > 100  # the offsets were not all but nothing
    found = await asyncio.to_thread(consume_runs, sched.stack.kafka, sched.topics.runs("normal"))
    dues = {env.scheduled_at: env.due for env, _ in found}
    for ms, offset in offsets.items():
        if ms in dues:
            assert dues[ms] == (ms + offset if offset else None)
    assert set(dues) & set(offsets)
