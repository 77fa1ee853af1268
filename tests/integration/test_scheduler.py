"""The scheduler in one process: jobs fire on time through real claims, the wheel follows edits,
misfire, overlap and DST policies hold end to end, and the sweeper re-dispatches what lapsed."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tickwheel.clock import format_ms, now_ms
from tickwheel.domain import PRIORITIES, job_key, run_key
from tickwheel.envelopes.dead_letters import DeadLetter
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.run_seal import RunSeal
from tickwheel.sharding import shard_of
from tickwheel.testing import drain

from .conftest import (
    TEST_SHARDS,
    SchedEnv,
    _create_tenant,
    consume_runs,
    drop_connection,
    expire_session,
    running_scheduler,
    wait_for,
)

pytestmark = pytest.mark.integration

# "Within a tick or two": the tests tick every 50 ms; the rest is slack for a loaded machine.
WITHIN_MS = 250


def _every_second(job_id: str, **extra: object) -> dict[str, object]:
    return {"id": job_id, "schedule": "* * * * * *", "handler": "demo.echo", **extra}


async def test_cron_and_one_off_fire_on_time_on_their_priority_topics(sched: SchedEnv) -> None:
    """a seconds-field cron job and a one-off fire at their instants, never early, one row
    per occurrence, their envelopes on the priority topics with run_key and epoch headers and
    a seal that opens under the deployment's key"""
    async with running_scheduler(sched, "solo") as (scheduler, _):
        at_ms = (now_ms() // 1000 + 3) * 1000
        await sched.register(
            _every_second("tick", priority="high", payload={"n": 1}),
            {"id": "once", "at": format_ms(at_ms), "handler": "demo.echo", "priority": "low"},
        )
        await wait_for(lambda: _published_count(sched, "once", 1), 10, what="the one-off published")
        await asyncio.sleep(1.2)
        registry = scheduler.metrics.registry
        assert (registry.get_sample_value("tickwheel_scheduler_claimed_runs_total") or 0) >= 4
        lag = registry.get_sample_value("tickwheel_scheduler_dispatch_lag_seconds_count")
        assert lag is not None and lag >= 4
    runs = await sched.runs()
    ticks = [r for r in runs if r["job_id"] == "tick"]
    assert len(ticks) >= 3
    instants = [r["ms"] for r in ticks]
    assert instants == sorted(set(instants))  # one row per occurrence
    assert all(b - a == 1000 for a, b in itertools.pairwise(instants))
    produced = {env.run_key: stamp for env, stamp in _published(sched)}
    for row in runs:
        assert row["created_ms"] >= row["ms"], "claimed before its instant (I8)"
        # Not written again after the broker's ack: the row waits, pending, for a worker.
        assert row["status"] == "pending" and row["attempt"] == 1
        produced_ms = produced.get(run_key(sched.tenant, row["job_id"], row["ms"]))
        assert produced_ms is not None and 0 <= produced_ms - row["ms"] < 1000, [
            (r["job_id"], r["ms"] % 100000, r["created_ms"] - r["ms"]) for r in runs
        ]
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
    (key,) = await sched.fetch("SELECT secret FROM cluster_secrets WHERE name = 'run_seal'")
    messages = drain(sched.stack.kafka, sched.topics.runs("low"), timeout_s=20)
    sealer = RunSeal(bytes(key["secret"]))
    assert messages and all(sealer.opens(m.value() or b"", m.headers()) for m in messages)
    assert not RunSeal(bytes(32)).opens(messages[0].value() or b"", messages[0].headers())


async def test_jobs_beyond_the_horizon_are_loaded_as_its_end_moves_on(sched: SchedEnv) -> None:
    """with a 10 s horizon and no full reload during the test, jobs due beyond the horizon —
    registered before the takeover, registered after it, and a cron job's next occurrences
    15 s apart — are read by the horizon's extensions and claimed on time, never early"""
    start_ms = now_ms()
    await sched.register(
        {"id": "before", "at": format_ms(start_ms + 16_000), "handler": "demo.echo"}
    )
    async with running_scheduler(sched, "solo", horizon_s=10, horizon_extend_s=1, resync_s=3600):

        async def leading() -> bool:
            rows = await sched.fetch("SELECT 1 FROM shard_leaders WHERE owner = 'solo'")
            return len(rows) == TEST_SHARDS

        await wait_for(leading, 15, what="every shard led")
        after_ms = now_ms() + 14_000
        await sched.register(
            {"id": "after", "at": format_ms(after_ms), "handler": "demo.echo"},
            {"id": "cron", "schedule": "*/15 * * * * *", "handler": "demo.echo"},
        )

        async def fired() -> bool:
            names = [r["job_id"] for r in await sched.runs()]
            return names.count("cron") >= 2 and "before" in names and "after" in names

        await wait_for(fired, 45, what="every job claimed")
    runs = await sched.runs()
    for row in runs:
        assert 0 <= row["created_ms"] - row["ms"] < 1000, (
            row["job_id"],
            row["created_ms"] - row["ms"],
        )
    crons = [r["ms"] for r in runs if r["job_id"] == "cron"]
    assert all(b - a == 15_000 for a, b in itertools.pairwise(crons)), crons
    assert [r["ms"] for r in runs if r["job_id"] == "after"] == [after_ms]
    assert [r["ms"] for r in runs if r["job_id"] == "before"] == [start_ms + 16_000]


async def test_the_resync_reads_again_only_what_the_wheel_does_not_hold(sched: SchedEnv) -> None:
    """the full reload (the safety net): a one-off the wheel lost, as if the change feed had
    missed its row, and one whose wheel entry is an older version than its row are read again
    and fire once, on time; a job the wheel holds as the database does keeps its entry"""
    at_ms = (now_ms() // 1000 + 8) * 1000
    names = ("lost", "stale", "held")
    async with running_scheduler(sched, "solo", resync_s=3600) as (scheduler, _):

        def leader(job: str) -> Any:
            return scheduler.leaders.get(shard_of(sched.tenant, job, TEST_SHARDS))

        def entry(job: str) -> Any:
            owner = leader(job)
            return None if owner is None else owner.wheel.get(job_key(sched.tenant, job))

        await sched.register(
            *({"id": n, "at": format_ms(at_ms), "handler": "demo.echo"} for n in names)
        )
        await wait_for(lambda: all(entry(n) for n in names), 5, what="the jobs in their wheels")
        leader("lost").wheel.cancel(job_key(sched.tenant, "lost"))
        stale, held = entry("stale"), entry("held")
        stale.version -= 1
        assert now_ms() < at_ms - 1000, "too slow to test before the jobs are due"
        for owner in {id(leader(n)): leader(n) for n in names}.values():
            await owner._resync()
        assert entry("lost") is not None
        assert entry("stale") is not stale and entry("stale").version == stale.version + 1
        assert entry("held") is held

        async def claimed() -> bool:
            return {r["job_id"] for r in await sched.runs()} == set(names)

        await wait_for(claimed, 10, what="every job claimed")
    runs = await sched.runs()
    assert sorted(r["job_id"] for r in runs) == sorted(names)  # once each
    assert all(r["ms"] == at_ms and r["created_ms"] >= at_ms for r in runs)


async def test_a_tenants_dispatch_window_holds_its_burst_not_another_tenants_runs(
    sched: SchedEnv,
) -> None:
    """with a window of 20 and no worker, tenant A's 60 due runs stop at 20 claimed and not
    started, tenant B's runs due meanwhile are claimed on time; as runs of A start (marked
    running here, as a worker's claim does) the leader claims exactly as many more"""
    other = dataclasses.replace(sched, tenant=f"{sched.tenant}b")
    await _create_tenant(sched.dsn, other.tenant)
    await _window_holds(sched, other)


async def _window_holds(sched: SchedEnv, other: SchedEnv) -> None:
    at_ms = now_ms() + 4_000
    await sched.register(
        *({"id": f"a{i}", "at": format_ms(at_ms), "handler": "demo.echo"} for i in range(60))
    )
    await other.register(
        *({"id": f"b{i}", "at": format_ms(at_ms + 500), "handler": "demo.echo"} for i in range(5))
    )

    async def claimed(tenant: str) -> int:
        rows = await sched.fetch("SELECT count(*) AS n FROM job_runs WHERE tenant = $1", tenant)
        return int(rows[0]["n"])

    async def settled(tenant: str, n: int) -> bool:
        return await claimed(tenant) >= n

    async with running_scheduler(
        sched, "solo", tenant_dispatch_window=20, dispatch_window_refresh_ms=50
    ) as (scheduler, _):
        await wait_for(lambda: settled(other.tenant, 5), 20, what="B's runs claimed")
        await wait_for(lambda: settled(sched.tenant, 20), 5, what="A's first 20 claimed")
        await asyncio.sleep(1.5)  # counts every 50 ms: nothing started, nothing more claimed
        assert await claimed(sched.tenant) == 20
        held = sum(
            s.value
            for m in scheduler.metrics.registry.collect()
            if m.name == "tickwheel_scheduler_window_held_entries"
            for s in m.samples
        )
        assert held == 40
        await sched.fetch(
            "UPDATE job_runs SET status = 'running', worker = 'test', started_at = now()"
            " WHERE (tenant, job_id) IN (SELECT tenant, job_id FROM job_runs"
            " WHERE tenant = $1 ORDER BY job_id LIMIT 15)",
            sched.tenant,
        )
        await wait_for(lambda: settled(sched.tenant, 35), 10, what="15 more of A claimed")
        await asyncio.sleep(1.0)
        assert await claimed(sched.tenant) == 35

        async def start_all_then_count() -> bool:
            await sched.fetch(
                "UPDATE job_runs SET status = 'running', worker = 'test', started_at = now()"
                " WHERE tenant = $1 AND status = 'pending'",
                sched.tenant,
            )
            return await settled(sched.tenant, 60)

        # 20 more, then the last 5: each time the workers have started what is out.
        await wait_for(start_all_then_count, 15, 0.3, what="the rest of A claimed")
    for row in await other.runs():
        assert 0 <= row["created_ms"] - row["ms"] < 1000, row
    a_rows = await sched.runs()
    assert len(a_rows) == 60 and len({r["job_id"] for r in a_rows}) == 60


async def test_a_job_row_held_by_another_transaction_neither_stalls_nor_defers_claims(
    sched: SchedEnv,
) -> None:
    """a due job whose row a registry transaction holds (frozen mid-batch) keeps firing every
    second, as its shard's other jobs do: the claim reads the job's committed row and takes no
    lock on it (I3, D-269), so a held row neither stalls the shard nor defers its own claim"""
    shard = shard_of(sched.tenant, "held", TEST_SHARDS)
    free = next(
        f"free-{n}"
        for n in itertools.count()
        if shard_of(sched.tenant, f"free-{n}", TEST_SHARDS) == shard
    )
    async with running_scheduler(sched, "solo"):
        await sched.register(_every_second("held"), _every_second(free))
        await wait_for(lambda: _has_runs(sched, {"held", free}), 10, what="both jobs firing")
        blocker = await asyncpg.connect(sched.dsn)
        try:
            async with blocker.transaction():
                await blocker.fetch(
                    "SELECT 1 FROM jobs WHERE tenant = $1 AND job_id = 'held' FOR UPDATE",
                    sched.tenant,
                )
                locked_at = now_ms()
                await asyncio.sleep(3)
                held_at = now_ms()
                # What was committed while the row was held (read before letting it go).
                fired = [r["ms"] for r in await sched.runs(free) if r["ms"] > locked_at]
                late = [r["ms"] for r in await sched.runs("held") if r["ms"] > locked_at]
            assert len(fired) >= 2, f"the shard stalled behind the held row: {fired}"
            assert len(late) >= 2, f"the held job's claims waited for the lock: {late}"
            await wait_for(
                lambda: _any_run_after(sched, "held", held_at), 10, what="the held job firing on"
            )
        finally:
            await blocker.close()


async def _has_runs(sched: SchedEnv, job_ids: set[str]) -> bool:
    return {r["job_id"] for r in await sched.runs()} >= job_ids


def _published(sched: SchedEnv, job_id: str | None = None) -> list[tuple[RunEnvelope, int]]:
    """The run envelopes on the priority topics so far (of one job), each with its record
    timestamp: the instant the leader produced it."""
    found = []
    for level in PRIORITIES:
        for msg in drain(sched.stack.kafka, sched.topics.runs(level)):
            env = RunEnvelope.decode(msg.value() or b"")
            if job_id is None or env.job_id == job_id:
                found.append((env, msg.timestamp()[1]))
    return found


async def _published_count(sched: SchedEnv, job_id: str, n: int) -> bool:
    loop = asyncio.get_running_loop()
    return len(await loop.run_in_executor(None, _published, sched, job_id)) >= n


async def _dispatched(sched: SchedEnv, job_id: str, attempt: int) -> bool:
    """The job's one run is pending at `attempt` and an envelope of that attempt is out."""
    row = await _run_row(sched, job_id)
    if row is None or (row["attempt"], row["status"]) != (attempt, "pending"):
        return False
    loop = asyncio.get_running_loop()
    found = await loop.run_in_executor(None, _published, sched, job_id)
    return any(env.attempt == attempt for env, _ in found)


async def _set_next_run_at(sched: SchedEnv, job_id: str, ms: int) -> None:
    """Move a job's next_run_at (as after an outage), as a new version so the feed carries it."""
    await sched.fetch(
        "UPDATE jobs SET version = version + 1,"
        " next_run_at = 'epoch'::timestamptz + $3::bigint * interval '1 millisecond'"
        " WHERE tenant = $1 AND job_id = $2 RETURNING 1",
        sched.tenant,
        job_id,
        ms,
    )


async def test_edits_pauses_resumes_deletes_are_honoured_within_a_tick_or_two(
    sched: SchedEnv,
) -> None:
    """a job registered 2 s ahead fires on time; pause stops it, resume restarts it, an edit
    of the schedule moves it and a delete ends it, each within a tick or two of the commit"""
    async with running_scheduler(sched, "solo"):
        at_ms = (now_ms() // 1000 + 2) * 1000
        await sched.register(
            {"id": "soon", "at": format_ms(at_ms), "handler": "demo.echo"}, _every_second("tick")
        )
        await wait_for(lambda: _published_count(sched, "soon", 1), 10, what="soon fired")
        (soon,) = await sched.runs("soon")
        assert 0 <= soon["created_ms"] - at_ms < WITHIN_MS, "a job registered 2 s ahead was late"

        await sched.op("pause", "tick")
        paused_at = now_ms()
        await asyncio.sleep(1.5)
        assert all(r["ms"] <= paused_at + WITHIN_MS for r in await sched.runs("tick"))

        await sched.op("resume", "tick")
        resumed_at = now_ms()
        await wait_for(lambda: _any_run_after(sched, "tick", resumed_at), 5, what="tick resumed")
        first_after = min(r["ms"] for r in await sched.runs("tick") if r["ms"] > resumed_at)
        assert first_after - resumed_at <= 1200

        await sched.register(_every_second("tick", schedule="*/2 * * * * *"))
        edited_at = now_ms()
        await asyncio.sleep(3.2)
        later = [r["ms"] for r in await sched.runs("tick") if r["ms"] > edited_at + WITHIN_MS]
        assert later and all(ms % 2000 == 0 for ms in later), later

        await sched.op("delete", "tick")
        deleted_at = now_ms()
        await asyncio.sleep(1.5)
        assert all(r["ms"] <= deleted_at + WITHIN_MS for r in await sched.runs("tick"))


async def _any_run_after(sched: SchedEnv, job_id: str, after_ms: int) -> bool:
    return any(r["ms"] > after_ms for r in await sched.runs(job_id))


# 2026's European DST transitions: spring forward 29 March 01:00Z, fall back 25 October 01:00Z.
SPRING_DAY_MS = 1_774_742_400_000  # 2026-03-29T00:00:00Z
AUTUMN_DAY_MS = 1_792_886_400_000  # 2026-10-25T00:00:00Z
HOUR_MS = 3_600_000


async def test_dst_gap_and_overlap_policies_hold_through_real_claims(sched: SchedEnv) -> None:
    """a Berlin 02:30 job claimed from before the spring gap to now shifts or skips the gap
    day and fires once or twice on the autumn overlap day, as its DST policies say"""
    policies = {
        "shift-first": {"gap": "shift", "overlap": "first"},
        "skip-last": {"gap": "skip", "overlap": "last"},
        "shift-both": {"gap": "shift", "overlap": "both"},
    }
    async with running_scheduler(sched, "solo"):
        await sched.register(
            *(
                {
                    "id": job_id,
                    "schedule": "30 2 * * *",
                    "timezone": "Europe/Berlin",
                    "handler": "demo.echo",
                    "dst": dst,
                    "misfire": {"policy": "run_all", "grace_ms": 0, "max_catchup": 1000},
                }
                for job_id, dst in policies.items()
            )
        )
        start = SPRING_DAY_MS - 24 * HOUR_MS + HOUR_MS + 30 * 60_000  # 28 March 02:30 CET
        for job_id in policies:
            await _set_next_run_at(sched, job_id, start)

        async def claimed() -> bool:
            rows = await sched.runs()
            return {r["job_id"] for r in rows if r["ms"] > AUTUMN_DAY_MS + 2 * HOUR_MS} == set(
                policies
            )

        await wait_for(claimed, 15, what="the catch-up claimed")

    def on_day(rows: list[object], day_ms: int) -> list[int]:
        return [r["ms"] - day_ms for r in rows if day_ms <= r["ms"] < day_ms + 24 * HOUR_MS]  # type: ignore[attr-defined]

    spring = {j: on_day(await sched.runs(j), SPRING_DAY_MS) for j in policies}
    autumn = {j: on_day(await sched.runs(j), AUTUMN_DAY_MS) for j in policies}
    assert spring == {"shift-first": [HOUR_MS], "skip-last": [], "shift-both": [HOUR_MS]}
    half = 30 * 60_000
    assert autumn == {
        "shift-first": [half],  # 02:30 CEST
        "skip-last": [HOUR_MS + half],  # 02:30 CET
        "shift-both": [half, HOUR_MS + half],
    }
    rows = await sched.runs("shift-first")
    assert all(r["status"] == "pending" for r in rows)


async def test_misfire_policies_skip_run_once_run_all_and_one_span_row(sched: SchedEnv) -> None:
    """after ten missed minutes skip records them skipped, run_once runs the oldest, run_all
    runs max_catchup and skips the rest; 30 missed minutes of seconds become 1,000 skipped
    rows plus ONE summary row"""
    minute = 60_000
    async with running_scheduler(sched, "solo"):
        await sched.register(
            *(
                {
                    "id": policy,
                    "schedule": "* * * * *",
                    "handler": "demo.echo",
                    "misfire": {"policy": policy, "grace_ms": 1000, "max_catchup": 3},
                }
                for policy in ("skip", "run_once", "run_all")
            ),
            _every_second("seconds", misfire={"policy": "skip", "grace_ms": 1000}),
        )
        now = now_ms()
        back = (now // minute - 10) * minute
        for job_id in ("skip", "run_once", "run_all"):
            await _set_next_run_at(sched, job_id, back)
        await _set_next_run_at(sched, "seconds", (now // 1000 - 1800) * 1000)

        async def claimed() -> bool:
            rows = await sched.runs()
            return {r["job_id"] for r in rows if r["ms"] <= back} >= {"skip", "run_once", "run_all"}

        await wait_for(claimed, 10, what="the misfires claimed")
        await asyncio.sleep(1)
    late_before = back + 10 * minute - 1000

    def missed(job_id: str, rows: list[object]) -> list[tuple[str, str | None]]:
        return [
            (r["status"], r["skip_reason"])  # type: ignore[index]
            for r in rows
            if r["job_id"] == job_id and r["ms"] < late_before  # type: ignore[index]
        ]

    rows = await sched.runs()
    assert missed("skip", rows) == [("skipped", "misfire")] * 10
    assert missed("run_once", rows) == [("pending", None)] + [("skipped", "misfire")] * 9
    assert missed("run_all", rows) == [("pending", None)] * 3 + [("skipped", "max_catchup")] * 7
    seconds = [r for r in rows if r["job_id"] == "seconds"]
    spans = [r for r in seconds if (r["skip_reason"] or "").startswith("misfire: every")]
    assert len(spans) == 1, "a span of skips must be one summary row"
    assert sum(1 for r in seconds if r["skip_reason"] == "misfire") == 1000
    assert len(seconds) < 1100


async def _run_row(sched: SchedEnv, job_id: str) -> Any:
    rows = await sched.runs(job_id)
    return rows[0] if rows else None


@pytest.mark.parametrize("fault", ["scheduler_after_claim", "scheduler_after_publish"])
async def test_next_leader_adopts_the_pending_runs_of_a_leader_that_died(
    sched: SchedEnv, fault: str
) -> None:
    """a leader that dies after the claim commits (before or after publishing) leaves a pending
    row; the next leader adopts it at its takeover, without waiting for the publish lease, and
    publishes it with the same run key and attempt"""
    sched.env["TICKWHEEL_PUBLISH_LEASE_S"] = "3600"
    at_ms = (now_ms() // 1000 + 2) * 1000
    await sched.register({"id": "once", "at": format_ms(at_ms), "handler": "demo.echo"})
    crashing = sched.spawn("crashing", TICKWHEEL_FAULT=fault)
    assert await asyncio.get_running_loop().run_in_executor(None, crashing.wait, 30) == 86
    row = await _run_row(sched, "once")
    assert row["status"] == "pending" and row["published_ms"] is None
    before = _published(sched, "once")
    assert len(before) == (1 if fault == "scheduler_after_publish" else 0)
    async with running_scheduler(sched, "survivor"):
        await wait_for(
            lambda: _published_count(sched, "once", len(before) + 1),
            20,
            what="the next leader published the run",
        )
    row = await _run_row(sched, "once")
    assert (row["status"], row["attempt"]) == ("pending", 1)
    found = _published(sched, "once")
    assert {env.run_key for env, _ in found} == {run_key(sched.tenant, "once", at_ms)}
    assert all(env.attempt == 1 for env, _ in found)
    assert len(found) == len(before) + 1
    assert found[-1][0].epoch == row["epoch"], "published under the adopting leader's epoch"


async def test_a_run_not_started_within_its_publish_lease_is_published_again(
    sched: SchedEnv,
) -> None:
    """the safety net: a run nobody started within the publish lease (here 1 s: no worker
    runs) is published again by its own leader, same attempt, once per lease"""
    sched.env["TICKWHEEL_PUBLISH_LEASE_S"] = "1"
    at_ms = (now_ms() // 1000 + 1) * 1000
    async with running_scheduler(sched, "solo"):
        await sched.register({"id": "once", "at": format_ms(at_ms), "handler": "demo.echo"})
        await wait_for(
            lambda: _published_count(sched, "once", 2), 15, what="the run published again"
        )
    found = _published(sched, "once")
    assert {env.attempt for env, _ in found} == {1}
    assert found[1][1] - found[0][1] >= 1000, "published again before its lease lapsed"
    row = await _run_row(sched, "once")
    assert (row["status"], row["attempt"]) == ("pending", 1)


async def test_sweeper_redispatches_lapsed_running_runs_and_dead_letters_the_last_attempt(
    sched: SchedEnv,
) -> None:
    """a running run whose worker lease lapsed is dispatched again as attempt + 1; on its last
    attempt it becomes dead and its dead letter lands on the DLQ"""
    at_ms = (now_ms() // 1000 + 1) * 1000
    async with running_scheduler(sched, "solo"):
        await sched.register(
            {"id": "once", "at": format_ms(at_ms), "handler": "demo.echo", "max_attempts": 2}
        )
        await wait_for(lambda: _published_count(sched, "once", 1), 10, what="first publish")
        lapse = (
            "UPDATE job_runs SET status = 'running', worker = 'w1', started_at = now(),"
            " lease_until = now() - interval '1 second' WHERE tenant = $1 AND job_id = 'once'"
        )
        await sched.fetch(lapse, sched.tenant)

        async def attempt_is(n: int, status: str) -> bool:
            row = await _run_row(sched, "once")
            return bool(row["attempt"] == n and row["status"] == status)

        await wait_for(lambda: _dispatched(sched, "once", 2), 10, what="attempt 2 published")
        await sched.fetch(lapse, sched.tenant)
        await wait_for(lambda: attempt_is(2, "dead"), 10, what="the run declared dead")
    (dead,) = await sched.fetch(
        "SELECT last_error FROM job_runs WHERE tenant = $1 AND job_id = 'once'", sched.tenant
    )
    assert "lease lapsed" in dead["last_error"]
    attempts = [
        env.attempt for env, _ in consume_runs(sched.stack.kafka, sched.topics.runs("normal"))
    ]
    assert attempts == [1, 2]
    letters = _consume_dead_letters(sched)
    assert len(letters) == 1
    assert letters[0].attempts == 2 and "lease lapsed" in letters[0].error
    assert letters[0].run.run_key == run_key(sched.tenant, "once", at_ms)


async def test_a_retry_at_with_microseconds_is_dispatched(sched: SchedEnv) -> None:
    """a retrying run whose retry_at has microseconds (as workers and replays write it) is
    re-dispatched, not left retrying because the wheel's millisecond value never matches"""
    at_ms = (now_ms() // 1000 + 1) * 1000
    async with running_scheduler(sched, "solo"):
        await sched.register({"id": "once", "at": format_ms(at_ms), "handler": "demo.echo"})
        await wait_for(lambda: _published_count(sched, "once", 1), 10, what="first publish")
        rows = await sched.fetch(
            "UPDATE job_runs SET status = 'retrying', last_error = 'boom', lease_until = NULL,"
            " retry_at = date_trunc('second', now()) + interval '1.300123 seconds'"
            " WHERE tenant = $1 AND job_id = 'once' RETURNING retry_at",
            sched.tenant,
        )
        assert rows[0]["retry_at"].microsecond % 1000 != 0

        await wait_for(lambda: _dispatched(sched, "once", 2), 10, what="the retry dispatched")


async def test_due_retries_go_out_through_the_wheel_as_the_next_attempt(sched: SchedEnv) -> None:
    """a retrying run is re-dispatched when its retry_at is reached, never before, as attempt
    + 1 under the same run key"""
    at_ms = (now_ms() // 1000 + 1) * 1000
    async with running_scheduler(sched, "solo"):
        await sched.register({"id": "once", "at": format_ms(at_ms), "handler": "demo.echo"})
        await wait_for(lambda: _published_count(sched, "once", 1), 10, what="first publish")
        retry_ms = now_ms() + 1500
        await sched.fetch(
            "UPDATE job_runs SET status = 'retrying', last_error = 'boom', lease_until = NULL,"
            " retry_at = 'epoch'::timestamptz + $2::bigint * interval '1 millisecond'"
            " WHERE tenant = $1 AND job_id = 'once'",
            sched.tenant,
            retry_ms,
        )

        await wait_for(lambda: _dispatched(sched, "once", 2), 10, what="the retry dispatched")
    found = _published(sched, "once")
    assert [env.attempt for env, _ in found] == [1, 2]
    assert found[1][1] >= retry_ms, "a retry went out before its retry_at"


async def test_overlap_skip_and_buffer_one_count_runs_in_flight(sched: SchedEnv) -> None:
    """with a run still in flight, overlap skip records the next occurrences skipped and
    buffer_one holds one back (unpublished) until the run ends, then publishes it"""
    async with running_scheduler(sched, "solo"):
        await sched.register(
            _every_second("skip", overlap="skip"), _every_second("buffer", overlap="buffer_one")
        )
        await asyncio.sleep(3.2)
        rows = await sched.runs()
        out = {env.run_key for env, _ in _published(sched)}
        skip = [r for r in rows if r["job_id"] == "skip"]
        assert skip[0]["status"] == "pending"
        assert run_key(sched.tenant, "skip", skip[0]["ms"]) in out
        assert [(r["status"], r["skip_reason"]) for r in skip[1:]] == [("skipped", "overlap")] * (
            len(skip) - 1
        )
        buffer = [r for r in rows if r["job_id"] == "buffer"]
        assert buffer[0]["status"] == "pending"
        assert run_key(sched.tenant, "buffer", buffer[0]["ms"]) in out
        assert buffer[1]["status"] == "pending"
        assert run_key(sched.tenant, "buffer", buffer[1]["ms"]) not in out, "held, yet published"
        assert {r["skip_reason"] for r in buffer[2:]} == {"overlap"}
        held_ms = buffer[1]["ms"]
        await sched.fetch(
            "UPDATE job_runs SET status = 'succeeded', finished_at = now()"
            " WHERE tenant = $1 AND job_id = 'buffer' AND scheduled_at ="
            " 'epoch'::timestamptz + $2::bigint * interval '1 millisecond'",
            sched.tenant,
            buffer[0]["ms"],
        )

        async def released() -> bool:
            loop = asyncio.get_running_loop()
            found = await loop.run_in_executor(None, _published, sched, "buffer")
            return any(env.scheduled_at == held_ms for env, _ in found)

        await wait_for(released, 5, what="the buffered run released")


def _consume_dead_letters(sched: SchedEnv) -> list[DeadLetter]:
    from confluent_kafka import Consumer

    cons = Consumer(
        {
            "bootstrap.servers": sched.stack.kafka,
            "group.id": f"dlq-{time.time_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    cons.subscribe([sched.topics.dlq])
    letters: list[DeadLetter] = []
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline and not letters:
            msg = cons.poll(0.5)
            if msg is not None and not msg.error():
                letters.append(DeadLetter.decode(msg.value() or b""))
        end = time.monotonic() + 1
        while time.monotonic() < end:
            msg = cons.poll(0.2)
            if msg is not None and not msg.error():
                letters.append(DeadLetter.decode(msg.value() or b""))
    finally:
        cons.close()
    return letters


async def test_session_expiry_drops_the_wheels_and_the_process_rejoins(sched: SchedEnv) -> None:
    """a dropped connection (SUSPENDED) keeps leadership and epochs; an expired session (LOST)
    drops every shard, and the process registers again and leads with new epochs"""
    async with running_scheduler(sched, "solo") as (scheduler, _):
        await sched.register(_every_second("tick"))
        await wait_for(lambda: _published_count(sched, "tick", 1), 10, what="tick fired")
        assert scheduler.election is not None
        leaders = "SELECT shard_id, epoch FROM shard_leaders"
        before = {r["shard_id"]: r["epoch"] for r in await sched.fetch(leaders)}
        loop = asyncio.get_running_loop()
        dispatching_when_suspended: list[bool] = []
        on_state = scheduler.election._on_state

        def watch(state: str) -> None:
            on_state(state)
            if state == "SUSPENDED":
                dispatching_when_suspended.extend(
                    leader.dispatching.is_set() for leader in scheduler.leaders.values()
                )

        scheduler.election._on_state = watch
        await loop.run_in_executor(None, drop_connection, scheduler.election.client)
        await wait_for(lambda: scheduler.election.connected, 10, what="reconnected")
        await asyncio.sleep(0.5)
        same = {r["shard_id"]: r["epoch"] for r in await sched.fetch(leaders)}
        assert same == before and len(scheduler.leaders) == 8
        assert dispatching_when_suspended == [False] * 8, "SUSPENDED must stop dispatching"
        assert all(leader.dispatching.is_set() for leader in scheduler.leaders.values())

        await loop.run_in_executor(None, expire_session, scheduler.election.client, sched.stack.zk)

        async def rejoined() -> bool:
            rows = await sched.fetch("SELECT shard_id, epoch, owner FROM shard_leaders")
            return len(scheduler.leaders) == 8 and all(
                r["epoch"] > before[r["shard_id"]] and r["owner"] == "solo" for r in rows
            )

        await wait_for(rejoined, 20, what="the process led again with new epochs")
        rejoined_at = now_ms()
        await wait_for(
            lambda: _any_run_after(sched, "tick", rejoined_at), 5, what="tick fired again"
        )


async def test_shard_zero_leader_keeps_daily_job_runs_partitions_ready(sched: SchedEnv) -> None:
    """the leader of shard 0 creates the job_runs partitions of the coming days and applies
    the retention (a partition older than TICKWHEEL_RETENTION_DAYS is dropped)"""
    import datetime as dt

    today = dt.datetime.now(dt.UTC).date()
    day = today + dt.timedelta(days=7)
    name = f"job_runs_p{day:%Y%m%d}"
    old_day = today - dt.timedelta(days=40)
    old_name = f"job_runs_p{old_day:%Y%m%d}"
    exists = "SELECT to_regclass($1) IS NOT NULL AS present"
    await sched.fetch(f'DROP TABLE IF EXISTS "{name}"')
    await sched.fetch("SELECT job_runs_ensure_partitions($1::date, 1)", old_day)
    assert not (await sched.fetch(exists, name))[0]["present"]
    assert (await sched.fetch(exists, old_name))[0]["present"]
    sched.env["TICKWHEEL_RETENTION_DAYS"] = "30"
    async with running_scheduler(sched, "solo"):

        async def present() -> bool:
            return bool((await sched.fetch(exists, name))[0]["present"])

        async def old_dropped() -> bool:
            return not (await sched.fetch(exists, old_name))[0]["present"]

        await wait_for(present, 10, what=f"{name} created")
        await wait_for(old_dropped, 10, what=f"{old_name} dropped by the retention")


async def test_a_registered_job_runs_end_to_end_through_a_worker(
    sched: SchedEnv, tmp_path: Path
) -> None:
    """scheduler and `tickwheel worker` together: every occurrence of a job is executed once
    and its run row ends succeeded (the worker side of the run lifecycle honours ours)"""
    log = tmp_path / "executions.log"
    log.touch()
    worker = sched.spawn_command(
        "worker",
        ["worker", "--handlers", "worker_handlers", "--id", "w1"],
        TW_TEST_LOG=str(log),
        PYTHONPATH=str(Path(__file__).parent),
        TICKWHEEL_KAFKA_SESSION_TIMEOUT_MS="6000",
    )
    async with running_scheduler(sched, "solo"):
        await sched.register(_every_second("tick", handler="test.record"))

        async def three_succeeded() -> bool:
            rows = await sched.runs("tick")
            return sum(1 for r in rows if r["status"] == "succeeded") >= 3

        await wait_for(three_succeeded, 30, what="three runs succeeded")
    assert worker.poll() is None, sched.log_text("worker")
    done = [r for r in await sched.runs("tick") if r["status"] == "succeeded"]
    executed = log.read_text().split("\n")
    for row in done:
        key = run_key(sched.tenant, "tick", row["ms"])
        assert executed.count(f"{key} 1") == 1, f"{key} ran {executed.count(f'{key} 1')} times"
