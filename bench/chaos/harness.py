"""The rounds: workload, one fault at a seeded moment, drain, check; and the terminal table of a
run's report. The options and the seeded plan are plan.py's, reading the run topics is
run_topics.py's. See docs/RELIABILITY.md."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import Callable
from typing import Any

import orjson

from tickwheel.bench.chaos.checker import (
    VERDICTS,
    FaultEvent,
    Ledger,
    check_round,
    summarize,
)
from tickwheel.bench.chaos.deployment import (
    PARTITIONS,
    PREFIX,
    REPLICATED,
    SHARDS,
    Deployment,
)
from tickwheel.bench.chaos.faults import (
    CUT_KINDS,
    FAULTS,
    PROXIED,
    SCHEDULERS,
    WORKERS,
    FaultContext,
)
from tickwheel.bench.chaos.observers import (
    PROBE_PARTITIONS,
    LeaderWatch,
    OffsetWatch,
    ProduceProbe,
)
from tickwheel.bench.chaos.plan import Options, plan
from tickwheel.bench.chaos.run_topics import RunTopics, skip_to_ends
from tickwheel.bench.chaos.workload import (
    FOLD_S,
    Workload,
    dst_jobs,
    fold_at,
    make_workload,
)
from tickwheel.bench.chaos.zones import fold_zone, utc_zone, write_zone, zone_name
from tickwheel.bench.ledger import RunRow, read_executions
from tickwheel.clock import now_ms
from tickwheel.deployment import worker_group
from tickwheel.domain import PRIORITIES
from tickwheel.kafka.admin import create_topics
from tickwheel.kafka.clients import producer
from tickwheel.queries import QUERIES

BURST_LEAD_MS = 3000  # the burst falls due this long after its registrations are sent
REGISTER_TIMEOUT_S = 60.0
REVIVE_EVERY_S = 1.0  # how often a round looks for a registry that exited on its own
STEADY_AFTER_FAULT_S = 3.0  # steady load keeps running this long after a fault has healed
STEADY_JUDGED_MS = 7000  # steady load after the jobs landed: 2 judged seconds past the margins
DRAIN_TIMEOUT_S = 60.0  # the bound of "lost": no terminal state this long after the round
WARM_UP_TIMEOUT_S = 90.0
PAUSE_AFTER_BURST_MS = 1500  # the round's paused job is paused this long after the burst
FOLD_LEAD_S = FOLD_S + 3  # the DST fold starts this long after the burst, at the earliest
PROBE_TOPIC = f"{PREFIX}.probe"  # the produce probe's own topic, replicated as the run topics


class Harness:
    """One chaos run. With `deployment` (a private stack already up, as a test suite shares
    one between runs) it starts and stops only the processes; else it owns the stack too."""

    def __init__(
        self,
        options: Options,
        echo: Callable[[str], None],
        deployment: Deployment | None = None,
    ) -> None:
        self.options = options
        self.echo = echo
        self.plan = plan(options)
        dst_rounds = [n for n, (k, _, _) in enumerate(self.plan, start=1) if k == "dst_failover"]
        self.own_stack = deployment is None
        self.deployment = deployment or Deployment(options.root, options.ports, echo=echo)
        self.deployment.broken = options.broken
        self.deployment.dispatch_window = options.dispatch_window
        self.deployment.zone_dir = options.root / "zones" if dst_rounds else None
        self.deployment.reset_processes()
        self.dst_rounds = dst_rounds
        self.rng = random.Random(options.seed * 7919 + 1)
        self.tag = f"s{options.seed}t{int(time.time()) % 100000}"
        self.completed: list[dict[str, Any]] = []

    def run(self) -> dict[str, Any]:
        """Start the private stack, run the rounds, stop everything (also on Ctrl-C)."""
        try:
            if self.own_stack:
                self.deployment.start_stack(self.options.jars_from)
            return asyncio.run(self._rounds())
        except KeyboardInterrupt:
            self.echo(f"interrupted: the report covers the {len(self.completed)} rounds done")
            return {**summarize(self.completed), "interrupted": True}
        except Exception:
            # Before the processes stop: what each was doing when the run failed (a hung
            # loop logs nothing; its stacks show where it waits).
            for path in self.deployment.dump_stacks():
                self.echo(f"stacks of a running process: {path}")
            raise
        finally:
            if self.own_stack:
                self.echo("stopping the chaos deployment and its private stack")
                self.deployment.close()
            else:
                self.deployment.stop_processes()

    async def _rounds(self) -> dict[str, Any]:
        dep = self.deployment
        if dep.zone_dir is not None:
            # Zone names are read once per process: each DST round's zone exists before any
            # process starts, as plain UTC until its round writes the fold.
            for n in self.dst_rounds:
                write_zone(dep.zone_dir, zone_name(n), utc_zone())
        if CUT_KINDS & set(self.options.kinds):
            await dep.start_proxies(list(PROXIED))
        replication = 3 if dep.kind == REPLICATED else 1
        create_topics(dep.kafka, [PROBE_TOPIC], PROBE_PARTITIONS, replication)
        self.leaders = LeaderWatch(dep.dsn)
        self.leaders.start()
        topics = [dep.topics.runs(p) for p in PRIORITIES]
        self.offsets = OffsetWatch(dep.kafka, worker_group(PREFIX), topics, PARTITIONS)
        self.offsets.start()
        self.probe = ProduceProbe(dep.kafka, PROBE_TOPIC)
        self.probe.start()
        try:
            starts = await self._retire_earlier(topics)
            for name in SCHEDULERS:
                dep.spawn_scheduler(name)
            for name in WORKERS:
                dep.spawn_worker(name)
            dep.spawn_registry()
            await self._warm_up()
            self.run_topics = RunTopics(dep.kafka, topics, starts)
            try:
                return await self._each_round()
            finally:
                self.run_topics.close()
        finally:
            await self.leaders.close()
            await asyncio.to_thread(self.offsets.close)
            await asyncio.to_thread(self.probe.close)
            await dep.close_proxies()

    async def _each_round(self) -> dict[str, Any]:
        rounds = self.completed
        for n, (kind, phase, victim) in enumerate(self.plan, start=1):
            detail = await self._round(n, kind, phase, victim)
            rounds.append(detail)
            r = detail["result"]
            self.echo(
                f"round {n:>3} {kind:<27} {phase:<6} lost {r['lost']} dup-succ "
                f"{r['duplicate_successes']} early {r['early']} unexpected {r['unexpected']} "
                f"stale {r['stale_claims']} unexplained {r['reexecutions']['unexplained']} "
                f"beyond-held {r['reexecuted_beyond_held']} offsets-ahead {r['offsets_ahead']} "
                f"dup-exec {r['duplicate_execution_rate']:.4f} gaps {r['failover_gaps_s']} "
                f"probe {detail['probe']['longest_ack_s']}s"
            )
        return summarize(rounds)

    async def _retire_earlier(self, topics: list[str]) -> dict[tuple[str, int], int]:
        """What earlier invocations left on a kept `--dir`, retired before any process of this
        one starts: their jobs and unfinished runs (an interrupted invocation leaves its round's
        cron jobs firing, and their runs would be judged against this one's rounds), and their
        messages on the run topics — the workers' group and the checker start at the topics'
        ends (a flood's republished runs once queued ~900,000 messages there, which the
        workers would have to read past before this invocation's first run). Returns where
        this invocation's messages begin on each run topic partition."""
        [row] = await self.deployment.fetch(QUERIES["chaos_retire_earlier"])
        starts, skipped = await asyncio.to_thread(
            skip_to_ends, self.deployment.kafka, worker_group(PREFIX), topics
        )
        if row["jobs"] or row["runs"] or skipped:
            self.echo(
                f"retired what earlier invocations left on this stack: {row['jobs']} jobs, "
                f"{row['runs']} unfinished runs, {skipped} unread messages on the run topics"
            )
        return starts

    async def _warm_up(self) -> None:
        """Wait until every shard has a leader and a registration has gone all the way to an
        executed run (the registry's and the workers' consumer groups have joined)."""
        deadline = time.monotonic() + WARM_UP_TIMEOUT_S
        dep = self.deployment
        while True:
            rows = await dep.fetch(QUERIES["ops_shard_leaders"])
            if sum(1 for r in rows if r["owner"]) == SHARDS:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the shards got no leaders within the warm-up bound")
            await asyncio.sleep(0.5)
        tenant = f"{self.tag}warm"
        await dep.fetch(QUERIES["bench_tenant"], tenant)
        workload = make_workload(tenant, SHARDS, 1, ((now_ms() + BURST_LEAD_MS) // 1000) * 1000)
        await asyncio.to_thread(self._register, workload)
        while not any(e.returned for e in read_executions(dep.handler_log, tenant)):
            if time.monotonic() > deadline:
                raise RuntimeError("no run was executed within the warm-up bound")
            await asyncio.sleep(0.5)
        await dep.fetch(QUERIES["chaos_jobs_delete"], tenant, workload.cron_ids)

    def _register(self, workload: Workload) -> None:
        prod = producer(self.deployment.kafka)
        topic = self.deployment.topics.registrations
        for doc in workload.documents():
            body = {"op": "upsert", "tenant": workload.tenant, "job": doc}
            prod.produce(topic, key=str(doc["id"]).encode(), value=orjson.dumps(body))
        if prod.flush(60) != 0:
            raise RuntimeError("registrations not acknowledged by Kafka within 60 s")

    async def _registered(self, workload: Workload) -> int:
        """When (unix ms) every job of the workload was in the database, or the bound passed
        (the jobs missing then show up as lost occurrences)."""
        want = len(workload.documents())
        deadline = time.monotonic() + REGISTER_TIMEOUT_S
        while time.monotonic() < deadline:
            rows = await self.deployment.fetch(QUERIES["chaos_jobs_count"], workload.tenant)
            if rows[0]["n"] >= want:
                break
            await asyncio.sleep(0.2)
        return now_ms()

    async def _pause_later(self, workload: Workload, at_ms: int) -> int:
        """Pause the round's paused job at `at_ms`, or once it is stored if that is later (a
        killed registry stores the round's jobs late: a pause before that matched no row, and
        the job then ran unpaused, judged unexpected); returns when the pause landed."""
        await asyncio.sleep(max(0.0, (at_ms - now_ms()) / 1000))
        deadline = time.monotonic() + REGISTER_TIMEOUT_S
        while not await self.deployment.fetch(
            QUERIES["chaos_jobs_pause"], workload.tenant, [workload.paused_id]
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {workload.paused_id} was never stored to be paused")
            await asyncio.sleep(0.2)
        return now_ms()

    async def _round(self, n: int, kind: str, phase: str, victim: int) -> dict[str, Any]:
        dep = self.deployment
        fault = FAULTS[kind]
        tenant = f"{self.tag}r{n}"
        await dep.fetch(QUERIES["bench_tenant"], tenant)
        start_ms = now_ms()
        burst_ms = ((start_ms + BURST_LEAD_MS) // 1000) * 1000
        dst = None
        if fault.timing == "fold":
            assert dep.zone_dir is not None
            at = fold_at(burst_ms + FOLD_LEAD_S * 1000)
            write_zone(dep.zone_dir, zone_name(n), fold_zone(at, FOLD_S))
            dst = dst_jobs(tenant, zone_name(n), at, SHARDS)
        workload = make_workload(
            tenant, SHARDS, self.options.burst, burst_ms, dst, self.options.burst_sleep_ms
        )
        ctx = FaultContext(
            dep,
            victim,
            lambda line: self.echo(f"  [{n}] {line}"),
            n,
            None if dst is None else dst.shard,
        )
        armed_first = kind in CUT_KINDS and fault.timing == "registration"
        moment_ms = now_ms()
        fault_task: asyncio.Task[list[FaultEvent]] | None = None
        if armed_first:  # the cut must be armed before the registry sees the batch
            fault_task = asyncio.create_task(fault.run(ctx))
            await asyncio.sleep(0)
        await asyncio.to_thread(self._register, workload)
        registered_ms = now_ms()
        if fault_task is None:
            if fault.timing == "registration":
                moment_ms = registered_ms + self.rng.randint(0, 300)
            elif dst is not None:
                moment_ms = dst.fold.at_ms - FOLD_S * 1000 + self.rng.randint(1000, 4000)
            elif phase == "burst":
                moment_ms = burst_ms + self.rng.randint(-200, 600)
            else:
                moment_ms = burst_ms + self.rng.randint(2000, 3500)
            fault_task = asyncio.create_task(self._fault_at(kind, moment_ms, ctx))
        revived: dict[str, int] = {}
        reviver = asyncio.create_task(self._revive_meanwhile({"registry"}, revived))
        pause = asyncio.create_task(self._pause_later(workload, burst_ms + PAUSE_AFTER_BURST_MS))
        landed_ms = await self._registered(workload)
        events: list[FaultEvent] = await fault_task
        paused_ms = await pause
        # Steady load for a while after the fault healed and after the jobs landed (a killed
        # registry stores them late), so that every round judges steady occurrences; a DST
        # round's load runs past both copies of its fold.
        until_ms = max(now_ms() + 1000 * STEADY_AFTER_FAULT_S, landed_ms + STEADY_JUDGED_MS)
        if dst is not None:
            until_ms = max(until_ms, dst.fold.at_ms + (FOLD_S + 4) * 1000)
        await asyncio.sleep(max(0.0, (until_ms - now_ms()) / 1000))
        caught_up_s = await self._caught_up(workload)
        await dep.fetch(QUERIES["chaos_jobs_delete"], tenant, workload.cron_ids)
        deleted_ms = now_ms()
        events = [dataclasses.replace(e, until_ms=deleted_ms) for e in events]
        expected = workload.expected(landed_ms, deleted_ms, paused_ms)
        unfinished = await self._drain(tenant, expected)
        reviver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reviver
        exited = {**revived, **self._revive()}
        end_ms = now_ms()
        rows = [
            RunRow(tenant, **dict(r)) for r in await dep.fetch(QUERIES["bench_ledger_runs"], tenant)
        ]
        executions = read_executions(dep.handler_log, tenant)
        await asyncio.to_thread(self.run_topics.catch_up)
        envelopes = self.run_topics.by_tenant.pop(tenant, [])
        # Offsets are audited while the workers' group is steady: until the fault's instant
        # if the fault moves partitions (or a process died on its own), else the whole round.
        audit_end = moment_ms if fault.moves_partitions or exited else end_ms
        ledger = Ledger(
            expected,
            rows,
            executions,
            events,
            envelopes,
            dep.ended(),
            allowed=workload.allowed(start_ms, deleted_ms, paused_ms),
            takeovers=self.leaders.takeovers(),
            offset_audits=self.offsets.between(start_ms, audit_end),
        )
        result = check_round(ledger)
        probe = await asyncio.to_thread(self.probe.window, start_ms, deleted_ms)
        return {
            "round": n,
            "fault": kind,
            "phase": phase,
            "fault_offset_ms": moment_ms - burst_ms,
            "expected": len(expected),
            "registered_after_ms": landed_ms - registered_ms,
            "unfinished_after_drain": unfinished,
            "caught_up_after_s": caught_up_s,
            "exited_on_their_own": exited,
            "notes": ctx.notes,
            "probe": probe.as_dict(),
            "result": result.as_dict(),
        }

    async def _caught_up(self, workload: Workload) -> float:
        """Wait until no active cron job of the round has an unclaimed occurrence due more
        than a second ago (bounded by the drain bound), so that deleting the jobs cancels no
        occurrence the round judges; returns how long that took, seconds. A leader that never
        catches up shows as lost runs."""
        started = time.monotonic()
        while time.monotonic() - started < DRAIN_TIMEOUT_S:
            rows = await self.deployment.fetch(
                QUERIES["chaos_jobs_behind"], workload.tenant, workload.cron_ids
            )
            if not rows[0]["behind"]:
                break
            await asyncio.sleep(0.2)
        return round(time.monotonic() - started, 3)

    async def _fault_at(self, kind: str, moment_ms: int, ctx: FaultContext) -> list[FaultEvent]:
        await asyncio.sleep(max(0.0, (moment_ms - now_ms()) / 1000))
        return await FAULTS[kind].run(ctx)

    async def _drain(self, tenant: str, expected: frozenset[str]) -> int:
        jobs, instants = [], []
        for key in expected:
            head, ms = key.rsplit("@", 1)
            jobs.append(head.split("/", 1)[1])
            instants.append(int(ms))
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        left = len(expected)
        while time.monotonic() < deadline:
            rows = await self.deployment.fetch(QUERIES["chaos_unfinished"], tenant, jobs, instants)
            left = rows[0]["n"]
            if left == 0:
                break
            await asyncio.sleep(0.5)
        return int(left)

    async def _revive_meanwhile(self, names: set[str], exited: dict[str, int]) -> None:
        """During a round, start `names` again as soon as one exits on its own, as a supervisor
        would (a registry whose intake stalled exits for that, and the round waits for its
        registrations); each exit is added to `exited`. Workers and schedulers are revived at
        the round's end only: the faults that crash them restart them themselves."""
        while True:
            exited.update(self._revive(names))
            await asyncio.sleep(REVIVE_EVERY_S)

    def _revive(self, names: set[str] | None = None) -> dict[str, int]:
        """Processes (of `names`, or all) that exited on their own (a finding: I9 says they must
        not linger half-dead, and after a service restart they should reconnect), started
        again."""
        exited = {}
        for child in self.deployment.procs.exited(names):
            exited[child.name] = child.popen.returncode
            self.echo(
                f"  {child.name} exited on its own with {exited[child.name]}: {child.tail(3)}"
            )
            if child.name in SCHEDULERS:
                self.deployment.spawn_scheduler(child.name)
            elif child.name in WORKERS:
                self.deployment.spawn_worker(child.name)
            elif child.name == "registry":
                self.deployment.spawn_registry()
        return exited


def table(report: dict[str, Any]) -> str:
    """The terminal summary: one line per round, then the totals."""
    lines = [
        f"{'round':>5}  {'fault':<27} {'phase':<6} {'expected':>8} {'lost':>4} "
        f"{'dupSucc':>7} {'early':>5} {'unexp':>5} {'stale':>5} {'unexpl':>6} {'>held':>5} "
        f"{'offs':>4} {'dupExec%':>8} {'late p99 ms':>11} {'gap s':>6} {'ack s':>6}"
    ]
    for d in report["detail"]:
        r = d["result"]
        gaps = [g for g in r["failover_gaps_s"].values() if g is not None]
        gap = f"{max(gaps):.2f}" if gaps else "-"
        lines.append(
            f"{d['round']:>5}  {d['fault']:<27} {d['phase']:<6} {d['expected']:>8} "
            f"{r['lost']:>4} {r['duplicate_successes']:>7} {r['early']:>5} "
            f"{r['unexpected']:>5} {r['stale_claims']:>5} "
            f"{r['reexecutions']['unexplained']:>6} {r['reexecuted_beyond_held']:>5} "
            f"{r['offsets_ahead']:>4} {100 * r['duplicate_execution_rate']:>8.3f} "
            f"{r['lateness_ms']['p99']:>11} {gap:>6} {d['probe']['longest_ack_s']:>6.2f}"
        )
    gap_max = report["failover_gap_max_s"]
    totals = "  ".join(f"{v.replace('_', ' ')} {report[v]}" for v in VERDICTS)
    lines.append(
        f"rounds {report['rounds']}  faults {report['faults']}  {totals}  "
        f"duplicate execution rate {100 * report['duplicate_execution_rate']:.3f}%  "
        f"(handler returned twice {100 * report['duplicate_completion_rate']:.3f}%; "
        f"re-executions by cause {report['reexecutions']})  "
        f"failover gap max {'-' if gap_max is None else f'{gap_max:.2f}'} s"
    )
    for fault, kind in report["reexecutions_by_fault"].items():
        causes = ", ".join(f"{c} {n}" for c, n in kind["causes"].items() if n)
        lines.append(
            f"re-executed under {fault}: {kind['reexecutions']} of {kind['executed']} executed "
            f"({100 * kind['rate']:.3f}%){f': {causes}' if causes else ''}"
        )
    return "\n".join(lines)
