"""One measured burst: N one-off jobs due around T0, run by real scheduler and worker processes.

The sequence (each step waits for the previous one; every process is stopped at the end,
whatever happened, by the `Supervisor`):

    1. scratch database and topics (scratch.py);
    2. start the schedulers and workers; wait until every shard has a leader, then read the
       schedulers' resident memory (the empty-wheel baseline of the memory per job);
    3. pick T0 = now + a lead time that covers registering N jobs and loading them into the
       wheels; register the jobs (bulk | kafka | http, load.py), due over [T0, T0 + spread);
    4. wait, up to T0, until the schedulers' wheels hold every job (their metrics) and read
       their memory again: (loaded - empty) / N is the memory per loaded job;
    5. from T0 on, poll progress until every run has succeeded or the settle time is over;
    6. stop the processes, read every run row and the run topics, and compute the figures
       (analysis.py) — from what Postgres and Kafka hold, not from the processes' accounts.

A T0 reached before the jobs were registered or loaded is reported (`t0_before_loaded`), never
hidden: those runs were then due before the system could know them, and their lateness counts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from tickwheel.bench import load
from tickwheel.bench.analysis import MS_PER_S, RunRecord
from tickwheel.bench.load import Handler
from tickwheel.bench.observe import fetch_runs, run_deliveries, wheel_entries
from tickwheel.bench.report import Bar
from tickwheel.bench.scratch import OTHER_TENANT, Scratch
from tickwheel.bench.supervisor import (
    Supervisor,
    cpu_seconds,
    free_ports,
    machine_cpu_seconds,
)
from tickwheel.clock import now_ms
from tickwheel.queries import QUERIES

LEADERS_TIMEOUT_S = 120.0
MIN_LEAD_S = 15.0  # seconds from registration start to T0, at least
# Conservative rates for the lead time: this machine measured ~15k/s bulk and Kafka and ~400/s
# HTTP when quiet, a third of that while other work ran. A lead that proves too short is
# reported, not hidden; --lead-s overrides the estimate.
LEAD_RATE_PER_S = {"bulk": 5_000, "kafka": 5_000, "http": 150}
WHEEL_LOAD_RATE_PER_S = 40_000  # jobs a scheduler's change feed loads per second, assumed
SETTLE_MIN_S = 60.0  # seconds after the last due instant before the harness gives up waiting
SETTLE_PER_JOB_S = 1 / 2_000
POLL_MIN_S, POLL_MAX_S, POLL_FACTOR = 0.5, 10.0, 10.0  # the progress poll's pace (`_follow`)
LINGER_AFTER_DONE_S = 1.0  # let late duplicates surface before stopping the processes
SCHEDULER_METRICS_PORT_BASE = 0  # 0: pick free ports


@dataclass(frozen=True)
class BurstConfig:
    jobs: int
    shards: int
    schedulers: int
    workers: int
    concurrency: int | None
    spread_ms: int
    handler: Handler
    registration: str
    partitions: int
    lead_s: float | None
    log_dir: Path
    horizon_s: int  # the schedulers' TICKWHEEL_HORIZON_S
    # A second tenant's jobs beside the burst (`tickwheel bench tenants`): `other_jobs` due
    # evenly over [T0, T0 + other_spread_ms), registered after the burst's, in bulk.
    other_jobs: int = 0
    other_spread_ms: int = 0

    @property
    def total_jobs(self) -> int:
        return self.jobs + self.other_jobs


@dataclass
class BurstResult:
    config: BurstConfig
    t0_ms: int
    expected: list[str]
    rows: list[RunRecord]
    deliveries: dict[str, int]
    first_append: dict[str, int]  # run key -> broker append time of its first message, ms
    registration_s: float
    registration_per_s: float
    loaded_at_ms: int | None  # when the wheels held every job (None: never seen)
    t0_before_loaded: bool
    scheduler_rss_empty: int
    scheduler_rss_loaded: int
    timed_out: bool
    loaded_jobs: int  # jobs the wheels were to hold before T0 (those within the horizon)
    # CPU seconds from T0 until every run succeeded: scheduler, workers, the scratch database's
    # Postgres backends, and the rest of the machine (Kafka, WAL, this harness, other work)
    cpu_s: dict[str, float]
    notes: list[str] = field(default_factory=list)

    @property
    def memory_per_job_bytes(self) -> float | None:
        if self.loaded_at_ms is None or not self.scheduler_rss_empty or not self.loaded_jobs:
            return None
        return (self.scheduler_rss_loaded - self.scheduler_rss_empty) / self.loaded_jobs

    def meta(self) -> dict[str, Any]:
        c = self.config
        return {
            "shards": c.shards,
            "schedulers": c.schedulers,
            "workers": c.workers,
            "concurrency": c.concurrency,
            "spread_ms": c.spread_ms,
            "handler": c.handler.name,
            "registration": c.registration,
            "partitions": c.partitions,
            "registration_s": round(self.registration_s, 2),
            "registration_per_s": round(self.registration_per_s),
            "loaded_before_t0_s": (
                round((self.t0_ms - self.loaded_at_ms) / MS_PER_S, 2)
                if self.loaded_at_ms is not None
                else None
            ),
            "t0_before_loaded": self.t0_before_loaded,
            "scheduler_rss_empty_bytes": self.scheduler_rss_empty,
            "scheduler_rss_loaded_bytes": self.scheduler_rss_loaded,
            "scheduler_bytes_per_loaded_job": (
                round(self.memory_per_job_bytes) if self.memory_per_job_bytes else None
            ),
            "timed_out": self.timed_out,
            "cpu_seconds_t0_to_done": {k: round(v, 2) for k, v in self.cpu_s.items()},
            "notes": self.notes,
        }


def lead_time_s(cfg: BurstConfig) -> float:
    if cfg.lead_s is not None:
        return cfg.lead_s
    register = cfg.jobs / LEAD_RATE_PER_S[cfg.registration]
    return MIN_LEAD_S + register + cfg.jobs / WHEEL_LOAD_RATE_PER_S


async def _wait_for_leaders(conn: asyncpg.Connection, fleet: Supervisor, shards: int) -> None:
    deadline = time.monotonic() + LEADERS_TIMEOUT_S
    while (led := await conn.fetchval(QUERIES["bench_shards_led"])) < shards:
        fleet.check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {led} of {shards} shards got a leader")
        await asyncio.sleep(0.25)


async def run_burst(res: Scratch, cfg: BurstConfig, say: Callable[[str], None]) -> BurstResult:
    notes: list[str] = []
    ports = free_ports(cfg.schedulers)
    with Supervisor(res.env(), cfg.log_dir) as fleet:
        for k, port in enumerate(ports):
            fleet.start(
                f"scheduler-{k}", ["scheduler", "--id", f"bench-s{k}", "--metrics-port", str(port)]
            )
        worker_args = ["worker", "--handlers", "tickwheel.bench.handlers"]
        if cfg.concurrency is not None:
            worker_args += ["--concurrency", str(cfg.concurrency)]
        for k in range(cfg.workers):
            fleet.start(f"worker-{k}", [*worker_args, "--id", f"bench-w{k}"])
        conn = await asyncpg.connect(res.dsn)
        try:
            say(f"waiting for {cfg.shards} shard leaders ...")
            await _wait_for_leaders(conn, fleet, cfg.shards)
            await asyncio.sleep(1.0)
            rss_empty = fleet.rss("scheduler")

            lead = lead_time_s(cfg)
            t0_ms = now_ms() + int(lead * MS_PER_S)
            dues = load.due_instants(cfg.jobs, t0_ms, cfg.spread_ms)
            docs = load.documents(dues, cfg.handler)
            expected = load.expected_run_keys(dues)
            other_dues = load.due_instants(cfg.other_jobs, t0_ms, cfg.other_spread_ms)
            if other_dues:
                await conn.execute(QUERIES["bench_tenant"], OTHER_TENANT)
                expected += load.expected_run_keys(other_dues, OTHER_TENANT)
            say(f"T0 in {lead:.0f} s; registering {cfg.jobs:,} jobs ({cfg.registration})")
            started = time.monotonic()
            with Bar(cfg.jobs, "registered") as bar:
                if cfg.registration == "bulk":
                    await load.register_bulk(res, docs, bar.set)
                elif cfg.registration == "kafka":
                    await load.register_kafka(res, docs, fleet, bar.set)
                else:
                    await load.register_http(res, docs, fleet, bar.set)
            registration_s = time.monotonic() - started
            if other_dues:
                say(f"registering {cfg.other_jobs:,} jobs of tenant {OTHER_TENANT} (bulk)")
                other_docs = load.documents(other_dues, cfg.handler)
                await load.register_bulk(res, other_docs, lambda _: None, OTHER_TENANT)
            if now_ms() >= t0_ms:
                notes.append("registration ended after T0: give a longer --lead-s")

            # Leaders load only their horizon: with a long spread, the later jobs come later.
            horizon_end_ms = now_ms() + cfg.horizon_s * 1000
            loadable = sum(1 for due in (*dues, *other_dues) if due < horizon_end_ms)
            loaded_at, rss_loaded = await _wait_for_wheels(fleet, ports, loadable, t0_ms, say)
            t0_before_loaded = loaded_at is None or loaded_at > t0_ms
            if t0_before_loaded:
                notes.append("T0 came before the wheels held every job")
            await asyncio.sleep(max(0.0, (t0_ms - now_ms()) / MS_PER_S))
            cpu_before = {**fleet.cpu(), **await _postgres_cpu(conn)}
            machine_before = machine_cpu_seconds()
            timed_out = await _follow(conn, fleet, cfg, t0_ms)
            cpu_after = {**fleet.cpu(), **await _postgres_cpu(conn)}
            cpu = _cpu_spent(cpu_before, cpu_after, machine_cpu_seconds() - machine_before)
            await asyncio.sleep(LINGER_AFTER_DONE_S)
            fleet.check()
            fleet.stop()
            rows = await fetch_runs(conn)
        finally:
            fleet.stop()
            await conn.close()
    say("reading the run topics ...")
    deliveries = run_deliveries(res.kafka, res.topics)
    return BurstResult(
        config=cfg,
        t0_ms=t0_ms,
        expected=expected,
        rows=rows,
        deliveries=dict(deliveries.counts),
        first_append=deliveries.first_append_ms,
        registration_s=registration_s,
        registration_per_s=cfg.jobs / registration_s if registration_s else 0.0,
        loaded_at_ms=loaded_at,
        t0_before_loaded=t0_before_loaded,
        scheduler_rss_empty=rss_empty,
        scheduler_rss_loaded=rss_loaded,
        timed_out=timed_out,
        loaded_jobs=loadable,
        cpu_s=cpu,
        notes=notes,
    )


async def _postgres_cpu(conn: asyncpg.Connection) -> dict[str, float]:
    """CPU seconds so far of each Postgres server process serving the scratch database."""
    mine = conn.get_server_pid()  # the harness's own polling is not the system's cost
    pids = [r["pid"] for r in await conn.fetch(QUERIES["bench_backends"])]
    return {
        f"{'harness_postgres' if pid == mine else 'postgres'}-{pid}": cpu_seconds(pid)
        for pid in pids
    }


def _cpu_spent(
    before: dict[str, float], after: dict[str, float], machine_s: float
) -> dict[str, float]:
    """CPU seconds per kind of process (`scheduler`, `worker`, `postgres` backends of the
    scratch database) and for everything else (Kafka, WAL writing, this harness, others)."""
    spent: dict[str, float] = {}
    for name, seconds in after.items():
        kind = name.rsplit("-", 1)[0]
        spent[kind] = spent.get(kind, 0.0) + seconds - before.get(name, 0.0)
    spent["rest_of_machine"] = machine_s - sum(spent.values())
    return spent


async def _wait_for_wheels(
    fleet: Supervisor, ports: list[int], jobs: int, t0_ms: int, say: Callable[[str], None]
) -> tuple[int | None, int]:
    """Until T0 - 1 s: wait for the wheels to hold every job; (when they did, scheduler RSS)."""
    with Bar(jobs, "in wheels") as bar:
        while now_ms() < t0_ms - 1000:
            fleet.check()
            counts = [wheel_entries(p) for p in ports]
            if any(c is None for c in counts):
                say("scheduler metrics not readable; not waiting for the wheels")
                return None, fleet.rss("scheduler")
            held = sum(c or 0 for c in counts)
            bar.set(min(held, jobs))
            if held >= jobs:
                return now_ms(), fleet.rss("scheduler")
            await asyncio.sleep(0.25)
    return None, fleet.rss("scheduler")


async def _follow(
    conn: asyncpg.Connection, fleet: Supervisor, cfg: BurstConfig, t0_ms: int
) -> bool:
    """From T0: progress bars until every run succeeded; True when the settle time ran out."""
    settle_s = SETTLE_MIN_S + cfg.total_jobs * SETTLE_PER_JOB_S + cfg.spread_ms / MS_PER_S
    deadline_ms = t0_ms + int(settle_s * MS_PER_S)
    await asyncio.sleep(max(0.0, (t0_ms - now_ms()) / MS_PER_S))
    with Bar(cfg.total_jobs, "claimed", "started", "completed") as bar:
        while True:
            fleet.check()
            asked = time.monotonic()
            row = await conn.fetchrow(QUERIES["bench_progress"])
            # The count reads every run row: a steady run's 1.5M cost ~0.7 s of Postgres a
            # poll, a third of a core at a fixed 2 s. Waiting ten times as long as the count
            # took keeps the harness's share under a tenth of a core, whatever the table holds.
            interval_s = min(POLL_MAX_S, max(POLL_MIN_S, POLL_FACTOR * (time.monotonic() - asked)))
            assert row is not None  # an aggregate always has its row
            for label in bar.labels:
                bar.put(label, row[label])
            if row["completed"] >= cfg.total_jobs:
                return False
            if now_ms() > deadline_ms:
                return True
            await asyncio.sleep(interval_s)
