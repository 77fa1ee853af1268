"""The faults: each acts on the harness's own deployment only, and returns the events the
checker measures a failover gap for. Each leaves the deployment whole again before it
returns (a killed process is started again, a paused one continued, a service restarted, a
failed-over Postgres given a new standby).

Which stack a fault runs on is `Fault.stacks`; the kinds a run draws from by default are
`DEFAULT_KINDS[stack]` (docs/RELIABILITY.md has the table).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path

from tickwheel.bench.chaos.checker import FaultEvent
from tickwheel.bench.chaos.deployment import (
    REPLICATED,
    SINGLE,
    STACKS,
    ZK_SESSION_MS,
    Deployment,
)
from tickwheel.clock import now_ms
from tickwheel.domain import PRIORITIES
from tickwheel.queries import QUERIES
from tickwheel.stack.kafka import Kafka, probe_kafka
from tickwheel.stack.procs import pid_alive
from tickwheel.stack.zookeeper import ZooKeeper, probe_zookeeper, zk_mode

SCHEDULERS = ("sched-a", "sched-b")
WORKERS = ("worker-1", "worker-2")
# Behind commit-cutting proxies when a dropped_reply fault is drawn: one of each writer.
PROXIED = ("registry", "sched-a", "worker-1")
SPLIT_BRAIN_SCHEDULER = "sched-z"
SPLIT_BRAIN_CHROOT = "/chaos-split-brain"  # its own ZooKeeper tree: it sees no other scheduler
CLOCK_SCHEDULER = "sched-a"
RESTART_DOWN_S = 1.0  # how long a restarted service stays down
ZK_EXPIRY_SLACK_S = 2.5  # past the session: the server's expiry tick and the takeover
SERVICE_START_TIMEOUT_S = 90.0  # a restarted service must answer its probe within this
ARMED_WAIT_S = 30.0  # how long an armed worker may take to reach its crash point
BROKER_DOWN_S = 5.0  # a killed broker is started again after this
BROKER_PAUSE_EXTRA_S = 3.0  # a paused broker stays stopped this long past its session
ZK_SERVER_DOWN_S = 2.0
PG_DETECT_S = 1.0  # between the primary's death and the standby's promotion
CLOCK_STEP_S = 30  # the scheduler's wall clock is this far ahead or behind
CLOCK_DWELL_S = 8.0  # how long the stepped scheduler leads
CLOCK_SETTLE_S = 2.0  # before the step, and after the step back
SPLIT_BRAIN_DWELL_S = 5.0
CUT_WAIT_S = 20.0  # how long an armed proxy may wait for its writer's commit
LIBFAKETIME = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
)
# What the proxy waits for, by writer: a statement of the transaction whose commit it cuts.
CUT_MARKERS = {
    "registry": "jobs_stage",  # the intake's batch: COPY into jobs_stage, then jobs_write_batch
    "sched-a": "FOR NO KEY UPDATE OF j SKIP LOCKED",  # the leader's claim (claim_due)
    "worker-1": "finished_at = CASE WHEN w.status IN",  # the worker's result write
}


@dataclass
class FaultContext:
    deployment: Deployment
    victim_index: int  # seeded: which process to hit (modulo how many there are)
    log: Callable[[str], None]
    round_no: int = 0
    dst_shard: int | None = None  # dst_failover: the DST jobs' shard
    notes: dict[str, object] = field(default_factory=dict)  # reported with the round


FaultFn = Callable[[FaultContext], Coroutine[object, object, list[FaultEvent]]]


@dataclass(frozen=True)
class Fault:
    run: FaultFn
    stacks: frozenset[str] = frozenset(STACKS)
    # When it strikes: "registration" (while the round's batch is applied: armed before it is
    # produced), "moment" (burst or steady, seeded), "fold" (inside the DST round's fold).
    timing: str = "moment"
    # It moves workers' partitions (a member comes or goes, a broker dies): the offsets audit
    # stops at its instant, since a moved partition's messages are read again legitimately.
    moves_partitions: bool = False


# --- processes -----------------------------------------------------------------------------


async def _owned_shards(ctx: FaultContext, member: str) -> frozenset[int]:
    rows = await ctx.deployment.fetch(QUERIES["ops_shard_leaders"])
    return frozenset(r["shard_id"] for r in rows if r["owner"] == member)


async def _held(ctx: FaultContext, worker: str) -> int:
    """The runs `running` under a worker's name: read right after it died."""
    rows = await ctx.deployment.fetch(QUERIES["chaos_runs_held"], worker)
    return int(rows[0]["n"])


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
    pid = ctx.deployment.procs.kill(victim).pid
    held = await _held(ctx, victim)
    ctx.log(f"kill -9 {victim} (holding {held} runs)")
    await asyncio.sleep(1.0)
    ctx.deployment.spawn_worker(victim)
    return [FaultEvent("worker_kill", at, None, "start", pid=pid, held=held)]


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
    held = await _held(ctx, victim) if code is not None else None
    ctx.log(f"{victim} exited with {code} (86: at the crash point), holding {held} runs")
    ctx.deployment.procs.stop([victim])
    ctx.deployment.spawn_worker(victim)
    pid = proc.pid if code is not None else None
    return [FaultEvent("worker_crash_after_results", at, None, "start", pid=pid, held=held)]


async def rebalance(ctx: FaultContext) -> list[FaultEvent]:
    """A third worker joins the consumer group mid-burst, and leaves again."""
    at = now_ms()
    ctx.deployment.spawn_worker("worker-3")
    ctx.log("worker-3 joined")
    await asyncio.sleep(8.0)
    code = ctx.deployment.procs.stop(["worker-3"]).get("worker-3")
    ctx.log(f"worker-3 left (exit {code})")
    return [FaultEvent("rebalance", at, None, "start")]


async def registry_kill(ctx: FaultContext) -> list[FaultEvent]:
    """kill -9 of the registry while it applies the round's registration batch (the harness
    produced the batch just before); started again a second later."""
    at = now_ms()
    ctx.deployment.procs.kill("registry")
    ctx.log("kill -9 registry")
    await asyncio.sleep(1.0)
    ctx.deployment.spawn_registry()
    return [FaultEvent("registry_kill", at)]


def libfaketime() -> str:
    """The multi-threaded libfaketime of Debian's `faketime` package."""
    for path in LIBFAKETIME:
        if Path(path).is_file():
            return path
    raise RuntimeError(
        "clock_step needs libfaketime (Debian: apt-get install faketime); not found in "
        + ", ".join(LIBFAKETIME)
    )


async def clock_step(ctx: FaultContext) -> list[FaultEvent]:
    """A leading scheduler's wall clock jumps 30 s ahead or behind (seeded), stays so, and
    jumps back. Leaders tick on the database's clock (I8): nothing may run early or be lost.

    The scheduler runs under libfaketime for the fault only (started again under it, and once
    more without it at the end): `FAKETIME_TIMESTAMP_FILE` holds the offset, read again every
    second, so writing it steps the running process's wall clock. Its monotonic clock is left
    alone (`FAKETIME_DONT_FAKE_MONOTONIC`), as a real clock step leaves it; libfaketime 0.9.10
    then fails every `time.sleep` (EINVAL), which a scheduler calls only to retry a lost
    ZooKeeper connection, which this fault does not cause."""
    library = libfaketime()
    step = CLOCK_STEP_S if ctx.victim_index % 2 == 0 else -CLOCK_STEP_S
    victim = CLOCK_SCHEDULER
    dep = ctx.deployment
    offset_file = dep.root / f"faketime-{victim}"
    offset_file.write_text("+0\n")
    dep.procs.stop([victim])
    dep.spawn_scheduler(
        victim,
        LD_PRELOAD=library,
        FAKETIME_TIMESTAMP_FILE=str(offset_file),
        FAKETIME_CACHE_DURATION="1",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
    )
    ctx.log(f"{victim} restarted under libfaketime")
    await asyncio.sleep(CLOCK_SETTLE_S)  # it leads its shards again
    at = now_ms()
    offset_file.write_text(f"{step:+d}\n")
    ctx.log(f"{victim}'s wall clock stepped {step:+d} s")
    ctx.notes["clock_step_s"] = step
    await asyncio.sleep(CLOCK_DWELL_S)
    offset_file.write_text("+0\n")
    ctx.log(f"{victim}'s wall clock stepped back")
    await asyncio.sleep(CLOCK_SETTLE_S)
    dep.procs.stop([victim])
    dep.spawn_scheduler(victim)
    return [FaultEvent("clock_step", at)]


async def split_brain(ctx: FaultContext) -> list[FaultEvent]:
    """A scheduler that believes it leads every shard: it elects itself in a ZooKeeper tree of
    its own (a chroot), as a second deployment pointed at another ensemble would. Only the
    epoch fence (I2) stands between it and the others: each takeover bumps the epoch, the
    replaced side is fenced out at its next transaction and takes the shard back. Stopped
    after a while."""
    from kazoo.client import KazooClient

    dep = ctx.deployment
    client = KazooClient(hosts=dep.zk, timeout=5)
    await asyncio.to_thread(client.start, 10)
    try:
        await asyncio.to_thread(client.ensure_path, SPLIT_BRAIN_CHROOT)
    finally:
        await asyncio.to_thread(client.stop)
        client.close()
    at = now_ms()
    dep.spawn_scheduler(SPLIT_BRAIN_SCHEDULER, TICKWHEEL_ZK=f"{dep.zk}{SPLIT_BRAIN_CHROOT}")
    ctx.log(f"{SPLIT_BRAIN_SCHEDULER} started on its own ZooKeeper tree")
    await asyncio.sleep(SPLIT_BRAIN_DWELL_S)
    code = dep.procs.stop([SPLIT_BRAIN_SCHEDULER]).get(SPLIT_BRAIN_SCHEDULER)
    ctx.log(f"{SPLIT_BRAIN_SCHEDULER} stopped (exit {code})")
    return [FaultEvent("split_brain", at)]


# --- a commit acknowledged into the void -------------------------------------------------------


async def _cut(ctx: FaultContext, writer: str, kind: str) -> list[FaultEvent]:
    """Arm the writer's proxy, wait for its next marked transaction to commit and be cut."""
    cutter = ctx.deployment.cutters[writer]
    cutter.arm(CUT_MARKERS[writer])
    at = now_ms()
    ctx.log(f"proxy of {writer} armed: its next commit's reply is cut")
    try:
        await asyncio.wait_for(cutter.fired.wait(), CUT_WAIT_S)
    except TimeoutError:
        cutter.disarm()
        ctx.log(f"{writer} committed nothing marked within {CUT_WAIT_S:.0f}s: no cut")
        ctx.notes["cut"] = False
        return [FaultEvent(kind, at)]
    cut = cutter.cuts[-1]
    ctx.notes["cut"] = True
    ctx.log(f"{writer}'s commit landed; its reply was cut")
    shards = await _owned_shards(ctx, writer) if writer in SCHEDULERS else None
    return [FaultEvent(kind, cut.at_ms, shards)]


async def dropped_reply_registry(ctx: FaultContext) -> list[FaultEvent]:
    """The registry's batch commits and the registry sees its connection drop: it applies
    the batch again (every registration at most once, none lost)."""
    return await _cut(ctx, "registry", "dropped_reply_registry")


async def dropped_reply_claim(ctx: FaultContext) -> list[FaultEvent]:
    """A leader's claim commits and the leader sees its connection drop: its entries go back
    into the wheel, where the claim finds them taken; the committed runs are the outbox."""
    return await _cut(ctx, "sched-a", "dropped_reply_claim")


async def dropped_reply_result(ctx: FaultContext) -> list[FaultEvent]:
    """A worker's result write commits and the worker sees its connection drop: it writes
    the results again (fenced: no second success) and only then stores the offsets."""
    return await _cut(ctx, "worker-1", "dropped_reply_result")


# --- a failover inside a repeated wall time ----------------------------------------------------


async def dst_failover(ctx: FaultContext) -> list[FaultEvent]:
    """kill -9 of the leader of the DST jobs' shard while their zone's wall clock repeats
    (the harness timed it inside the fold): the next leader must go on honouring each job's
    `dst.overlap` policy — each repeated wall time fires once (or, for `both`, once per copy)."""
    assert ctx.dst_shard is not None
    rows = await ctx.deployment.fetch(QUERIES["ops_shard_leaders"])
    owner = next((r["owner"] for r in rows if r["shard_id"] == ctx.dst_shard), None)
    victim = owner if owner in SCHEDULERS else SCHEDULERS[ctx.victim_index % 2]
    shards = await _owned_shards(ctx, victim)
    at = now_ms()
    ctx.deployment.procs.kill(victim)
    ctx.log(f"kill -9 {victim} inside the fold (shards {sorted(shards)})")
    await asyncio.sleep(ZK_SESSION_MS / 1000 + ZK_EXPIRY_SLACK_S)
    ctx.deployment.spawn_scheduler(victim)
    return [FaultEvent("dst_failover", at, shards)]


# --- single-node services ------------------------------------------------------------------


async def _await_probe(name: str, probe: Callable[[], str | None]) -> None:
    """Until `probe` finds the restarted service healthy; it must be within the bound."""
    deadline = time.monotonic() + SERVICE_START_TIMEOUT_S
    while (problem := await asyncio.to_thread(probe)) is not None:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{name} not healthy {SERVICE_START_TIMEOUT_S}s after a restart: {problem}"
            )
        await asyncio.sleep(0.5)


async def _restart_jvm(ctx: FaultContext, name: str) -> int:
    """Stop one of the private JVMs (SIGTERM), start it again, wait for its health probe;
    returns when it went down (unix ms). The probe, not the PID file, says it is back."""
    stack = ctx.deployment.single
    service = stack.kafka if name == "kafka" else stack.zookeeper
    address = stack.s.effective_kafka if name == "kafka" else stack.s.effective_zk
    probe = probe_kafka if name == "kafka" else probe_zookeeper
    at = now_ms()
    await asyncio.to_thread(service.jvm.stop)
    ctx.log(f"{name} stopped")
    await asyncio.sleep(RESTART_DOWN_S)
    await asyncio.to_thread(service.start)
    await _await_probe(name, lambda: probe(address))
    ctx.log(f"{name} up after {(now_ms() - at) / 1000:.1f}s")
    return at


async def kafka_restart(ctx: FaultContext) -> list[FaultEvent]:
    """The broker stops (SIGTERM) and starts again."""
    return [FaultEvent("kafka_restart", await _restart_jvm(ctx, "kafka"))]


async def postgres_restart(ctx: FaultContext) -> list[FaultEvent]:
    """Postgres stops (pg_ctl stop, fast: connections are cut) and starts again."""
    stack = ctx.deployment.single
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


# --- the replicated stack's services ---------------------------------------------------------


def _run_topics(ctx: FaultContext) -> list[str]:
    return [ctx.deployment.topics.runs(p) for p in PRIORITIES]


async def _await_broker(ctx: FaultContext, node_id: int, since_ms: int) -> None:
    """Until the broker answers again and every replica it holds is back in sync."""
    stack = ctx.deployment.replicated
    await _await_probe(f"broker {node_id}", lambda: stack.broker_problem(node_id))
    ctx.log(f"broker {node_id} back in sync after {(now_ms() - since_ms) / 1000:.1f}s")


async def _kill_and_restart(
    ctx: FaultContext, service: Kafka | ZooKeeper, what: str, down_s: float
) -> int:
    """kill -9 of one of the replicated stack's JVMs, started again `down_s` later; returns
    when it died (unix ms)."""
    pid = service.jvm.pid()
    at = now_ms()
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
    ctx.log(f"kill -9 {what}")
    await asyncio.sleep(down_s)
    await asyncio.to_thread(service.start)
    return at


async def broker_kill(ctx: FaultContext) -> list[FaultEvent]:
    """kill -9 of the broker that leads the most run-topic partitions, mid-burst; started
    again after BROKER_DOWN_S. Its partitions get new leaders among the in-sync replicas once
    the controller fences it (4 s without a heartbeat): no acknowledged message may be lost,
    producing may stall only that long."""
    stack = ctx.deployment.replicated
    leaders = await asyncio.to_thread(stack.partition_leaders, _run_topics(ctx))
    victim = max(sorted(stack.brokers), key=lambda b: leaders.get(b, 0))
    what = f"broker {victim} (leading {leaders.get(victim, 0)} run partitions)"
    at = await _kill_and_restart(ctx, stack.brokers[victim], what, BROKER_DOWN_S)
    ctx.notes["broker"] = victim
    await _await_broker(ctx, victim, at)
    return [FaultEvent("broker_kill", at)]


async def broker_pause(ctx: FaultContext) -> list[FaultEvent]:
    """SIGSTOP of one broker (seeded) past its session with the controller, then SIGCONT: it
    is fenced while frozen, and must catch up and rejoin the in-sync replicas by itself."""
    stack = ctx.deployment.replicated
    victim = sorted(stack.brokers)[ctx.victim_index % len(stack.brokers)]
    pid = stack.brokers[victim].jvm.pid()
    assert pid is not None, f"broker {victim} is not running"
    at = now_ms()
    os.kill(pid, signal.SIGSTOP)
    ctx.log(f"SIGSTOP broker {victim}")
    ctx.notes["broker"] = victim
    await asyncio.sleep(stack.cluster.session_ms / 1000 + BROKER_PAUSE_EXTRA_S)
    os.kill(pid, signal.SIGCONT)
    ctx.log(f"SIGCONT broker {victim}")
    await _await_broker(ctx, victim, at)
    return [FaultEvent("broker_pause", at)]


async def zk_leader_kill(ctx: FaultContext) -> list[FaultEvent]:
    """kill -9 of the ZooKeeper server that leads the ensemble: the other two elect a new
    leader, every session moves to a live server within its timeout, no shard changes hands;
    the dead server is started again and rejoins as a follower."""
    stack = ctx.deployment.replicated
    victim = await asyncio.to_thread(stack.zk_leader)
    if victim is None:
        raise RuntimeError("the ZooKeeper ensemble has no leader to kill")
    server = stack.zookeepers[victim]
    at = await _kill_and_restart(ctx, server, f"ZooKeeper leader {victim}", ZK_SERVER_DOWN_S)
    ctx.notes["zk_server"] = victim
    await _await_probe(f"zookeeper {victim}", lambda: _zk_serving(server.port))
    ctx.log(f"ZooKeeper {victim} serving again as {zk_mode(server.port)}")
    return [FaultEvent("zk_leader_kill", at)]


def _zk_serving(port: int) -> str | None:
    mode = zk_mode(port)
    return None if mode in ("leader", "follower") else f"mode {mode}"


async def pg_failover(ctx: FaultContext) -> list[FaultEvent]:
    """kill -9 of the Postgres primary mid-burst; a second later the synchronous standby is
    promoted. Every process must find the new primary by itself (its DSN lists both nodes,
    `target_session_attrs=read-write`); dispatch may stall, nothing committed may be lost.
    Then the dead node becomes the new primary's standby (a fresh base backup)."""
    stack = ctx.deployment.replicated
    old = stack.primary
    at = now_ms()
    pids = stack.kill_primary()
    ctx.log(f"kill -9 postgres-{old} ({len(pids)} processes)")
    await asyncio.sleep(PG_DETECT_S)
    started = time.monotonic()
    new = await asyncio.to_thread(stack.promote_standby)
    ctx.log(f"postgres-{new} promoted in {time.monotonic() - started:.1f}s")
    ctx.notes["promoted"] = new
    for pid in pids:
        while pid_alive(pid):
            await asyncio.sleep(0.05)
    started = time.monotonic()
    await asyncio.to_thread(stack.build_standby)
    ctx.log(f"postgres-{old} is the new standby ({time.monotonic() - started:.1f}s)")
    return [FaultEvent("pg_failover", at)]


FAULTS: dict[str, Fault] = {
    "leader_kill": Fault(leader_kill),
    "leader_pause": Fault(leader_pause),
    "worker_kill": Fault(worker_kill, moves_partitions=True),
    "worker_crash_after_results": Fault(worker_crash_after_results, moves_partitions=True),
    "rebalance": Fault(rebalance, moves_partitions=True),
    "kafka_restart": Fault(kafka_restart, frozenset({SINGLE}), moves_partitions=True),
    "postgres_restart": Fault(postgres_restart, frozenset({SINGLE}), moves_partitions=True),
    "zookeeper_restart": Fault(zookeeper_restart, frozenset({SINGLE})),
    "registry_kill": Fault(registry_kill, timing="registration"),
    "split_brain": Fault(split_brain),
    "clock_step": Fault(clock_step),
    "dropped_reply_registry": Fault(dropped_reply_registry, timing="registration"),
    "dropped_reply_claim": Fault(dropped_reply_claim),
    "dropped_reply_result": Fault(dropped_reply_result),
    "dst_failover": Fault(dst_failover, timing="fold"),
    "broker_kill": Fault(broker_kill, frozenset({REPLICATED}), moves_partitions=True),
    "broker_pause": Fault(broker_pause, frozenset({REPLICATED}), moves_partitions=True),
    "zk_leader_kill": Fault(zk_leader_kill, frozenset({REPLICATED})),
    "pg_failover": Fault(pg_failover, frozenset({REPLICATED}), moves_partitions=True),
}
# The kinds a run draws from unless told: 11 on the single stack (55 rounds see each 5
# times), 10 on the replicated one (50 rounds).
DEFAULT_KINDS = {
    SINGLE: (
        "leader_kill",
        "leader_pause",
        "worker_kill",
        "worker_crash_after_results",
        "rebalance",
        "kafka_restart",
        "postgres_restart",
        "zookeeper_restart",
        "registry_kill",
        "split_brain",
        "clock_step",
    ),
    REPLICATED: (
        "broker_kill",
        "broker_pause",
        "zk_leader_kill",
        "pg_failover",
        "leader_kill",
        "leader_pause",
        "dropped_reply_registry",
        "dropped_reply_claim",
        "dropped_reply_result",
        "dst_failover",
    ),
}
CUT_KINDS = frozenset(k for k in FAULTS if k.startswith("dropped_reply_"))


def have_faketime() -> bool:
    return shutil.which("faketime") is not None or any(Path(p).is_file() for p in LIBFAKETIME)
