"""The faults: each acts on the harness's own deployment only, and returns the events the
checker measures a failover gap for. Each leaves the deployment whole again before it
returns (a killed process is started again, a paused one continued, a service restarted)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tickwheel.bench.chaos.checker import FaultEvent
from tickwheel.bench.chaos.deployment import ZK_SESSION_MS, Deployment
from tickwheel.clock import now_ms
from tickwheel.queries import QUERIES
from tickwheel.stack import DevStack
from tickwheel.stack.kafka import probe_kafka
from tickwheel.stack.zookeeper import probe_zookeeper

SCHEDULERS = ("sched-a", "sched-b")
WORKERS = ("worker-1", "worker-2")
RESTART_DOWN_S = 1.0  # how long a restarted service stays down
ZK_EXPIRY_SLACK_S = 2.5  # past the session: the server's expiry tick and the takeover
SERVICE_START_TIMEOUT_S = 90.0  # a restarted service must answer its probe within this
ARMED_WAIT_S = 30.0  # how long an armed worker may take to reach its crash point


@dataclass
class FaultContext:
    deployment: Deployment
    victim_index: int  # seeded: which of two processes to hit
    log: Callable[[str], None]


FaultFn = Callable[[FaultContext], Awaitable[list[FaultEvent]]]


async def _owned_shards(ctx: FaultContext, member: str) -> frozenset[int]:
    rows = await ctx.deployment.fetch(QUERIES["ops_shard_leaders"])
    return frozenset(r["shard_id"] for r in rows if r["owner"] == member)


async def leader_kill(ctx: FaultContext) -> list[FaultEvent]:
    """kill -9 of a shard leader; it is started again once its session has expired."""
    victim = SCHEDULERS[ctx.victim_index % 2]
    shards = await _owned_shards(ctx, victim)
    at = now_ms()
    ctx.deployment.procs.kill(victim)
    ctx.log(f"kill -9 {victim} (shards {sorted(shards)})")
    await asyncio.sleep(ZK_SESSION_MS / 1000 + ZK_EXPIRY_SLACK_S)
    ctx.deployment.spawn_scheduler(victim)
    return [FaultEvent("leader_kill", at, shards)]


async def leader_pause(ctx: FaultContext) -> list[FaultEvent]:
    """SIGSTOP of a leader past its ZooKeeper session, then SIGCONT: it must be fenced."""
    victim = SCHEDULERS[ctx.victim_index % 2]
    shards = await _owned_shards(ctx, victim)
    at = now_ms()
    ctx.deployment.procs.signal(victim, signal.SIGSTOP)
    ctx.log(f"SIGSTOP {victim} (shards {sorted(shards)})")
    await asyncio.sleep(ZK_SESSION_MS / 1000 + ZK_EXPIRY_SLACK_S)
    ctx.deployment.procs.signal(victim, signal.SIGCONT)
    ctx.log(f"SIGCONT {victim}")
    return [FaultEvent("leader_pause", at, shards)]


async def worker_kill(ctx: FaultContext) -> list[FaultEvent]:
    """kill -9 of a worker with handlers in flight; started again a second later."""
    victim = WORKERS[ctx.victim_index % 2]
    at = now_ms()
    ctx.deployment.procs.kill(victim)
    ctx.log(f"kill -9 {victim}")
    await asyncio.sleep(1.0)
    ctx.deployment.spawn_worker(victim)
    return [FaultEvent("worker_kill", at, None, "start")]


async def worker_crash_after_results(ctx: FaultContext) -> list[FaultEvent]:
    """A worker leaves the group (SIGTERM) and comes back armed to die between its result
    write and its offset commit: it takes back partitions, writes its first results and dies
    there (kill -9 at that point, as a power cut would); it is then started again unarmed."""
    victim = WORKERS[ctx.victim_index % 2]
    ctx.deployment.procs.stop([victim])
    proc = ctx.deployment.spawn_worker(victim, TICKWHEEL_FAULT="worker_after_results").popen
    ctx.log(f"{victim} restarted armed at worker_after_results")
    deadline = time.monotonic() + ARMED_WAIT_S
    while proc.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    at = now_ms()
    code = proc.poll()
    ctx.log(f"{victim} exited with {code} (86: at the crash point)")
    ctx.deployment.procs.stop([victim])
    ctx.deployment.spawn_worker(victim)
    return [FaultEvent("worker_crash_after_results", at, None, "start")]


async def rebalance(ctx: FaultContext) -> list[FaultEvent]:
    """A third worker joins the consumer group mid-burst, and leaves again."""
    at = now_ms()
    ctx.deployment.spawn_worker("worker-3")
    ctx.log("worker-3 joined")
    await asyncio.sleep(8.0)
    code = ctx.deployment.procs.stop(["worker-3"]).get("worker-3")
    ctx.log(f"worker-3 left (exit {code})")
    return [FaultEvent("rebalance", at, None, "start")]


def _stack(ctx: FaultContext) -> DevStack:
    stack = ctx.deployment.stack
    assert stack is not None, "faults on services need the private stack"
    return stack


async def _restart_jvm(ctx: FaultContext, name: str) -> int:
    """Stop one of the private JVMs (SIGTERM), start it again, wait for its health probe;
    returns when it went down (unix ms). The probe, not the PID file, says it is back."""
    stack = _stack(ctx)
    service = stack.kafka if name == "kafka" else stack.zookeeper
    address = stack.s.effective_kafka if name == "kafka" else stack.s.effective_zk
    probe = probe_kafka if name == "kafka" else probe_zookeeper
    at = now_ms()
    await asyncio.to_thread(service.jvm.stop)
    ctx.log(f"{name} stopped")
    await asyncio.sleep(RESTART_DOWN_S)
    await asyncio.to_thread(service.start)
    deadline = time.monotonic() + SERVICE_START_TIMEOUT_S
    while (problem := await asyncio.to_thread(probe, address)) is not None:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{name} not healthy {SERVICE_START_TIMEOUT_S}s after a restart: {problem}"
            )
        await asyncio.sleep(0.5)
    ctx.log(f"{name} up after {(now_ms() - at) / 1000:.1f}s")
    return at


async def kafka_restart(ctx: FaultContext) -> list[FaultEvent]:
    """The broker stops (SIGTERM) and starts again."""
    return [FaultEvent("kafka_restart", await _restart_jvm(ctx, "kafka"))]


async def postgres_restart(ctx: FaultContext) -> list[FaultEvent]:
    """Postgres stops (pg_ctl stop, fast: connections are cut) and starts again."""
    stack = _stack(ctx)
    at = now_ms()
    await asyncio.to_thread(stack.postgres.stop)
    ctx.log("postgres stopped")
    await asyncio.sleep(RESTART_DOWN_S)
    await asyncio.to_thread(stack.up)
    ctx.log("postgres up")
    return [FaultEvent("postgres_restart", at)]


async def zookeeper_restart(ctx: FaultContext) -> list[FaultEvent]:
    """ZooKeeper stops and starts again: leaders suspend, then resume or hand over."""
    return [FaultEvent("zookeeper_restart", await _restart_jvm(ctx, "zookeeper"))]


async def registry_kill(ctx: FaultContext) -> list[FaultEvent]:
    """kill -9 of the registry while it applies the round's registration batch (the harness
    produced the batch just before); started again a second later."""
    at = now_ms()
    ctx.deployment.procs.kill("registry")
    ctx.log("kill -9 registry")
    await asyncio.sleep(1.0)
    ctx.deployment.spawn_registry()
    return [FaultEvent("registry_kill", at)]


FAULTS: dict[str, FaultFn] = {
    "leader_kill": leader_kill,
    "leader_pause": leader_pause,
    "worker_kill": worker_kill,
    "worker_crash_after_results": worker_crash_after_results,
    "rebalance": rebalance,
    "kafka_restart": kafka_restart,
    "postgres_restart": postgres_restart,
    "zookeeper_restart": zookeeper_restart,
    "registry_kill": registry_kill,
}
# Faults whose moment is the registration batch itself, not the burst or the steady load.
AT_REGISTRATION = frozenset({"registry_kill"})
