"""Scheduler processes (`tickwheel scheduler` subprocesses): shards split within the bound, a
killed process's shards move within the session timeout, a paused leader is fenced out."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
import urllib.request
from collections import Counter
from typing import Any

import asyncpg
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from tickwheel.clock import format_ms
from tickwheel.deployment import zk_root
from tickwheel.sharding import shard_of
from tickwheel.shards.assignment import capacity
from tickwheel.stack.zookeeper import ZK_TICK_MS

from .conftest import ZK_TEST_SESSION_MS, SchedEnv, consume_runs, wait_for

pytestmark = pytest.mark.integration

# ZooKeeper expires sessions in buckets of its tickTime (ZK_TICK_MS on the dev stack), so an
# expiry comes up to one tick after the session timeout; the +1 s of the target is on top of it.
ZK_TICK_S = ZK_TICK_MS / 1000


def _zk_leaders(sched: SchedEnv) -> dict[int, str]:
    """shard -> holder, from the shard nodes in ZooKeeper (who leads right now)."""
    client = KazooClient(hosts=sched.stack.zk)
    client.start(timeout=10)
    try:
        path = f"{zk_root(sched.topics.prefix)}/shards"
        if not client.exists(path):
            return {}
        held = {}
        for child in client.get_children(path):
            try:
                data, _ = client.get(f"{path}/{child}")
            except NoNodeError:  # released between the listing and the read
                continue
            held[int(child)] = data.decode()
        return held
    finally:
        client.stop()
        client.close()


async def _pg_leaders(sched: SchedEnv) -> dict[int, tuple[str | None, int]]:
    rows = await sched.fetch("SELECT shard_id, owner, epoch FROM shard_leaders")
    return {r["shard_id"]: (r["owner"], r["epoch"]) for r in rows}


def _balanced(sched: SchedEnv, shards: int, members: set[str]) -> dict[int, str] | None:
    held = _zk_leaders(sched)
    per = Counter(held.values())
    balanced = max(per.values(), default=0) <= capacity(shards, len(members))
    return held if len(held) == shards and set(per) == members and balanced else None


def _jobs_covering(tenant: str, shards: int, per_shard: int = 1) -> list[str]:
    """Job ids such that every shard has `per_shard` of them."""
    found: dict[int, list[str]] = {s: [] for s in range(shards)}
    n = 0
    while any(len(v) < per_shard for v in found.values()):
        job_id = f"j{n}"
        bucket = found[shard_of(tenant, job_id, shards)]
        if len(bucket) < per_shard:
            bucket.append(job_id)
        n += 1
    return [j for ids in found.values() for j in ids]


def _doc(job_id: str, **extra: object) -> dict[str, object]:
    return {"id": job_id, "schedule": "* * * * * *", "handler": "demo.echo", **extra}


async def _assert_contiguous(
    sched: SchedEnv, from_ms: int, to_ms: int, one_offs: frozenset[str] = frozenset()
) -> list[Any]:
    """Every cron job of the tenant has exactly one row per second in [from_ms, to_ms]."""
    runs = await sched.runs()
    by_job: dict[str, list[int]] = {}
    for row in runs:
        if row["job_id"] in one_offs:
            continue
        by_job.setdefault(row["job_id"], []).append(row["ms"])
    for job_id, instants in by_job.items():
        start = max(from_ms, min(instants))  # a job registered late has no earlier occurrence
        window = [ms for ms in instants if start <= ms <= to_ms]
        expected = list(range(start, to_ms + 1, 1000))
        assert window == expected, f"{job_id}: {sorted(set(expected) - set(window))} missing"
    return list(runs)


async def test_two_then_three_schedulers_split_64_shards_within_the_bound(
    sched: SchedEnv,
) -> None:
    """two, then three processes lead all 64 shards, none more than ⌈64/n⌉, and every
    occurrence of the jobs gets exactly one run row and one envelope across the rebalance"""
    shards = 64
    sched.env["TICKWHEEL_SHARDS"] = str(shards)
    sched.env["TICKWHEEL_SWEEP_INTERVAL_MS"] = "2000"
    jobs = _jobs_covering(sched.tenant, shards)[::4]  # 16 jobs spread over the shards
    await sched.register(*(_doc(j) for j in jobs))
    sched.spawn("a")
    sched.spawn("b")
    await wait_for(lambda: _balanced(sched, shards, {"a", "b"}), 30, what="a and b balanced")
    start_ms = (int(time.time()) + 1) * 1000
    sched.spawn("c")
    held = await wait_for(
        lambda: _balanced(sched, shards, {"a", "b", "c"}), 30, what="a, b and c balanced"
    )
    assert max(Counter(held.values()).values()) <= 22
    await asyncio.sleep(1.5)
    end_ms = (int(time.time()) - 1) * 1000
    for proc in sched.procs:
        proc.send_signal(signal.SIGTERM)
    for proc in sched.procs:
        assert proc.wait(20) == 0
    runs = await _assert_contiguous(sched, start_ms, end_ms)
    published = Counter(
        env.run_key for env, _ in consume_runs(sched.stack.kafka, sched.topics.runs("normal"))
    )
    assert len(published) == len(runs)
    assert max(published.values()) == 1, "an occurrence was published twice"


async def test_kill_9_moves_shards_within_the_session_timeout(sched: SchedEnv) -> None:
    """the shards of a process killed with -9 are taken over within session + 1 s (+ the
    server's expiry tick); occurrences due in the gap fire late, once, by their misfire policy"""
    jobs = _jobs_covering(sched.tenant, 8)
    await sched.register(*(_doc(j, misfire={"policy": "run_once", "grace_ms": 1000}) for j in jobs))
    victim = sched.spawn("a")
    sched.spawn("b")
    held = await wait_for(lambda: _balanced(sched, 8, {"a", "b"}), 30, what="a and b balanced")
    lost = {s for s, owner in held.items() if owner == "a"}
    one_off_ms = (int(time.time()) + 2) * 1000
    one_off_id = next(
        j for j in (f"once{n}" for n in range(100)) if shard_of(sched.tenant, j, 8) in lost
    )
    await sched.register(
        {
            "id": one_off_id,
            "at": format_ms(one_off_ms),
            "handler": "demo.echo",
            "misfire": {"policy": "run_once", "grace_ms": 1000},
        }
    )
    await asyncio.sleep(0.5)
    before_ms = (int(time.time()) - 1) * 1000
    killed_at = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)

    async def taken() -> bool:
        leaders = await _pg_leaders(sched)
        return all(leaders[s][0] == "b" for s in lost)

    await wait_for(taken, 20, interval_s=0.05, what="b took a's shards")
    moved_s = time.monotonic() - killed_at
    assert moved_s <= ZK_TEST_SESSION_MS / 1000 + 1 + ZK_TICK_S, f"took {moved_s:.1f}s"
    await asyncio.sleep(2.5)
    after_ms = (int(time.time()) - 1) * 1000
    runs = await _assert_contiguous(sched, before_ms, after_ms, frozenset({one_off_id}))
    late = [r for r in runs if r["job_id"] == one_off_id]
    assert len(late) == 1 and late[0]["ms"] == one_off_ms
    assert late[0]["status"] in ("pending", "published")
    assert late[0]["created_ms"] - one_off_ms > 1000, "the one-off was not in the gap"
    skipped = [r for r in runs if r["status"] == "skipped"]
    assert all(r["skip_reason"] == "misfire" for r in skipped)
    # The gap was longer than the 1 s grace: every job of a lost shard had misfires, of which
    # run_once ran the oldest and recorded the others skipped.
    gap_skips = {r["job_id"] for r in skipped if r["shard_id"] in lost}
    assert gap_skips == {j for j in jobs if shard_of(sched.tenant, j, 8) in lost}
    print(f"kill -9: shards moved after {moved_s:.2f}s")


async def test_paused_leader_resumes_claims_nothing_and_steps_down(sched: SchedEnv) -> None:
    """a leader SIGSTOPped past its session is replaced; after SIGCONT its old epochs write no
    run row, it steps down, and it rejoins with new epochs"""
    jobs = _jobs_covering(sched.tenant, 8)
    await sched.register(*(_doc(j) for j in jobs))
    paused = sched.spawn("a")
    metrics_port = _free_port()
    sched.spawn("b", "--metrics-port", str(metrics_port))
    held = await wait_for(lambda: _balanced(sched, 8, {"a", "b"}), 30, what="a and b balanced")
    mine = {s for s, owner in held.items() if owner == "a"}
    old = await _pg_leaders(sched)
    old_epochs = {s: old[s][1] for s in mine}
    os.kill(paused.pid, signal.SIGSTOP)

    async def taken() -> bool:
        leaders = await _pg_leaders(sched)
        return all(leaders[s][0] == "b" for s in mine)

    await wait_for(taken, 20, interval_s=0.1, what="b took a's shards")
    takeover_ms = int(time.time() * 1000)
    await asyncio.sleep(1.5)  # a's due entries pile up in its frozen wheel
    os.kill(paused.pid, signal.SIGCONT)
    await wait_for(lambda: _balanced(sched, 8, {"a", "b"}), 30, what="a rejoined")
    await asyncio.sleep(1)
    stale = await sched.fetch(
        "SELECT count(*) AS n FROM job_runs r"
        " JOIN unnest($2::int[], $3::bigint[]) AS o(shard_id, epoch)"
        "   ON r.shard_id = o.shard_id AND r.epoch = o.epoch"
        " WHERE r.tenant = $1"
        "   AND r.created_at > 'epoch'::timestamptz + $4::bigint * interval '1 millisecond'",
        sched.tenant,
        list(old_epochs),
        list(old_epochs.values()),
        takeover_ms,
    )
    assert stale[0]["n"] == 0, "the paused leader claimed after the takeover"
    log = sched.log_text("a")
    assert "fenced out" in log or "zookeeper session lost" in log
    assert paused.poll() is None, "the resumed process died instead of rejoining"
    now = await _pg_leaders(sched)
    rejoined = [s for s, (owner, epoch) in now.items() if owner == "a"]
    assert rejoined and all(now[s][1] > old_epochs.get(s, 0) for s in rejoined)
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    taken = _metric(text, 'tickwheel_scheduler_leadership_changes_total{change="acquired"}')
    assert taken >= len(mine), "b's metrics do not count the shards it took over"
    assert _metric(text, "tickwheel_scheduler_claimed_runs_total") > 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"metric {name} not exposed")


async def test_takeover_ends_a_replaced_leaders_session_that_still_holds_the_shard_row(
    sched: SchedEnv,
) -> None:
    """a replaced leader's session frozen inside a fenced transaction, where Postgres's
    idle-in-transaction timeout does not reach it, is ended by the successor's takeover, which
    then leads the shard; a blocking session of any other program is left alone"""
    await sched.fetch(
        "INSERT INTO shard_leaders AS s (shard_id, epoch, owner) VALUES (0, 1, 'ghost'),"
        " (1, 1, 'ghost') ON CONFLICT (shard_id) DO UPDATE SET epoch = s.epoch + 1, owner = 'ghost'"
    )
    ghost = await asyncpg.connect(
        sched.dsn, server_settings={"application_name": "tickwheel-scheduler/ghost"}
    )
    bystander = await asyncpg.connect(sched.dsn, server_settings={"application_name": "psql"})
    try:
        ghost_tx, bystander_tx = ghost.transaction(), bystander.transaction()
        await ghost_tx.start()
        await ghost.fetch("SELECT epoch FROM shard_leaders WHERE shard_id = 0 FOR SHARE")
        await bystander_tx.start()
        await bystander.fetch("SELECT epoch FROM shard_leaders WHERE shard_id = 1 FOR SHARE")
        ghost_pid = ghost.get_server_pid()
        sched.spawn("b")

        async def led_zero() -> bool:
            return (await _pg_leaders(sched))[0][0] == "b"

        await wait_for(led_zero, 15, what="b leads shard 0 despite the ghost's lock")
        sessions = await sched.fetch("SELECT pid FROM pg_stat_activity WHERE pid = $1", ghost_pid)
        assert not sessions, "the ghost's session survived the takeover"
        assert "blocked the takeover" in sched.log_text("b")
        # Shard 1's row is held by a session that is no scheduler's: it is never ended.
        await asyncio.sleep(2)
        assert (await _pg_leaders(sched))[1][0] == "ghost"
        assert not bystander.is_closed()
        await bystander_tx.rollback()

        async def led_one() -> bool:
            return (await _pg_leaders(sched))[1][0] == "b"

        await wait_for(led_one, 15, what="b leads shard 1 once the bystander let go")
    finally:
        ghost.terminate()
        await bystander.close()
