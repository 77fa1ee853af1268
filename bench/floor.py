"""The floor: the least work tickwheel's design needs for a hot second, measured beside it.

One claimer process and two consumer processes, on scratch tables of their own (in the
benchmark's scratch database) and a scratch topic (the scratch `runs.normal`, stamped on append):

    claimer    from T0, until no job is due: ONE statement per 5,000 due jobs — UPDATE the jobs
               (done) and INSERT their run rows — committed, then one Kafka message per run
               (the idempotent producer of every tickwheel process, acks=all), confirmed by one
               flush with error-only delivery reports
    consumers  one consumer group: batches of up to 500 messages, the no-op "run", ONE UPDATE
               of the batch's rows to succeeded (an `unnest` of the keys), and only then the
               batch's offsets stored (committed in the background)

It keeps the design's shape where it costs — I1 (a message only after its row committed) and I5
(an offset only after its row's write) — and leaves out everything the hot second does not need
to be correct: shards and their leaders, the timing wheel, a worker's claim before it runs,
every column and index of the run ledger beyond the primary key, headers and a payload in the
message. So it is a floor, not a strawman: the same bytes would have to move in any design that
keeps a run row per run and a message per run.

Figures (`FloorResult`): *completed* is a row's `finished_at` minus T0 (the instant every job is
due and the claimer starts); *cpu_s* the whole machine's busy CPU from T0 to the last completion
(Postgres, Kafka and the three processes together, `whole_machine`), and per part.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Message, TopicPartition

from tickwheel.bench.analysis import MS_PER_S, RunRecord, Spread, finite
from tickwheel.bench.load import job_id
from tickwheel.bench.scratch import TENANT, Scratch
from tickwheel.bench.supervisor import (
    Supervisor,
    SupervisorError,
    cpu_seconds,
    machine_cpu_seconds,
)
from tickwheel.clock import ms_to_datetime, now_ms
from tickwheel.db import KEYED_LOOKUPS
from tickwheel.domain import run_key
from tickwheel.kafka.clients import consumer, producer
from tickwheel.queries import QUERIES

CLAIM_BATCH = 5000  # due jobs per claim statement
RESULT_BATCH = 500  # messages per consume and per result statement
CONSUMERS = 2
CONSUME_TIMEOUT_S = 0.05
READY_TIMEOUT_S = 60.0  # seconds for the consumers to join their group
SETTLE_AFTER_JOIN_S = 3.0  # a second member's join rebalances the first: let it settle
START_DELAY_S = 2.0  # seconds from starting the claimer to T0
LOAD_RATE_PER_S = 50_000  # jobs loaded into the floor's table per second, assumed for T0

FLOOR_TIMEOUT_S = 1800.0
POLL_S = 0.25
READ_TIMEOUT_S = 600.0  # seconds to read the floor's topic back
ASSIGNED = re.compile(rb"floor consumer assigned (\d+) partitions")


@dataclass(frozen=True)
class FloorResult:
    jobs: int
    t0_ms: int
    claimed: Spread
    published: Spread
    completed: Spread
    cpu_s: dict[str, float]
    rows: list[RunRecord]

    @property
    def completed_max_s(self) -> float:
        return self.completed.max_s

    @property
    def machine_cpu_s(self) -> float:
        return self.cpu_s.get("whole_machine", 0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "claim_batch": CLAIM_BATCH,
            "result_batch": RESULT_BATCH,
            "consumers": CONSUMERS,
            "claimed_max_s": finite(self.claimed.max_s),
            "published_max_s": finite(self.published.max_s),
            "completed_p50_s": finite(self.completed.p50_s),
            "completed_p99_s": finite(self.completed.p99_s),
            "completed_max_s": finite(self.completed.max_s),
            "completed_count": self.completed.count,
            "cpu_seconds_t0_to_done": {k: round(v, 2) for k, v in self.cpu_s.items()},
        }


# --- the processes ---------------------------------------------------------------------------


def _until_signalled() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def floor_connection(dsn: str) -> asyncpg.Connection:
    """A session of the floor's (its claimer's and each consumer's): key lookups only, as
    tickwheel's workers'. Left to itself the planner reaches the rows a statement names by a
    scan of the whole table: the claim joined its 5,000 due jobs with `floor_jobs` by a hash
    join over a scan of every job, at every size tried (one scan costs less than 5,000 index
    probes in its model), three times as slow as through the primary key at 1,000,000 jobs
    (D-233); the result write, with statistics taken while the table was empty, scanned every
    run for each batch (two of five runs took several times longer)."""
    return await asyncpg.connect(dsn, server_settings=KEYED_LOOKUPS)


async def claim_until_drained(dsn: str, kafka: str, topic: str, start_at_ms: int) -> int:
    """The claimer: claim and publish batches from `start_at_ms` until no job is due, then
    wait for SIGTERM (so that the harness reads its CPU). Returns the runs claimed."""
    stop = _until_signalled()
    conn = await floor_connection(dsn)
    prod = producer(kafka, **{"delivery.report.only.error": True})
    failures: list[str] = []

    def on_error(err: Any, _msg: Any) -> None:
        failures.append(str(err))

    claimed = 0
    try:
        await asyncio.sleep(max(0.0, (start_at_ms - now_ms()) / MS_PER_S))
        while True:
            rows = await conn.fetch(QUERIES["floor_claim"], CLAIM_BATCH)
            if not rows:
                break
            for job, ms in rows:
                prod.produce(
                    topic,
                    key=job,
                    value=orjson.dumps({"job_id": job, "scheduled_ms": ms, "attempt": 1}),
                    on_delivery=on_error,
                )
            prod.flush(30)
            if failures or len(prod):
                raise RuntimeError(f"floor: publishes not acknowledged: {failures[:3]}")
            claimed += len(rows)
        await stop.wait()
    finally:
        await conn.close()
    return claimed


async def consume_until_stopped(dsn: str, kafka: str, topic: str, group: str) -> int:
    """A consumer: batches of runs marked succeeded, offsets stored after the write."""
    stop = _until_signalled()
    conn = await floor_connection(dsn)
    cons: Consumer = consumer(kafka, group, **{"partition.assignment.strategy": "range"})

    def on_assign(_c: Consumer, parts: list[TopicPartition]) -> None:
        print(f"floor consumer assigned {len(parts)} partitions", flush=True)

    cons.subscribe([topic], on_assign=on_assign)
    done = 0
    try:
        while not stop.is_set():
            messages: list[Message] = [
                m for m in cons.consume(RESULT_BATCH, CONSUME_TIMEOUT_S) if m.error() is None
            ]
            if not messages:
                await asyncio.sleep(0)  # let the signal handler run
                continue
            jobs, instants = [], []
            for msg in messages:
                body = orjson.loads(msg.value() or b"{}")
                jobs.append(body["job_id"])
                instants.append(body["scheduled_ms"])
            await conn.execute(QUERIES["floor_results"], jobs, instants)
            last: dict[tuple[str, int], int] = {}
            for msg in messages:
                last[(msg.topic() or "", msg.partition() or 0)] = (msg.offset() or 0) + 1
            cons.store_offsets(offsets=[TopicPartition(t, p, o) for (t, p), o in last.items()])
            done += len(messages)
    finally:
        cons.close()
        await conn.close()
    return done


def appended(kafka: str, topic: str) -> list[int | None]:
    """The broker's append instant (unix ms) of every message on `topic`, read to its end."""
    cons = consumer(kafka, f"floor-read-{uuid.uuid4().hex}", **{"enable.auto.commit": False})
    instants: list[int | None] = []
    try:
        metadata = cons.list_topics(topic, timeout=10)
        ends: dict[int, int] = {}
        start = []
        for partition in metadata.topics[topic].partitions:
            low, high = cons.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high > low:
                ends[partition] = high
                start.append(TopicPartition(topic, partition, low))
        cons.assign(start)
        deadline = time.monotonic() + READ_TIMEOUT_S
        while ends and time.monotonic() < deadline:
            for msg in cons.consume(10_000, 1.0):
                if msg.error() is not None:
                    continue
                kind, stamp = msg.timestamp()
                instants.append(stamp if kind == TIMESTAMP_LOG_APPEND_TIME else None)
                if (msg.offset() or 0) + 1 >= ends.get(msg.partition() or 0, 0):
                    ends.pop(msg.partition() or 0, None)
    finally:
        cons.close()
    return instants


# --- the harness -----------------------------------------------------------------------------


def _assigned(fleet: Supervisor, names: list[str]) -> bool:
    for name, child in fleet.children.items():
        if name in names:
            try:
                text = child.log_path.read_bytes()
            except OSError:
                return False
            if not ASSIGNED.search(text):
                return False
    return True


async def _postgres_cpu(conn: asyncpg.Connection) -> dict[str, float]:
    mine = conn.get_server_pid()  # the harness's own polling is not the floor's cost
    pids = [r["pid"] for r in await conn.fetch(QUERIES["bench_backends"]) if r["pid"] != mine]
    return {f"postgres-{pid}": cpu_seconds(pid) for pid in pids}


def _spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    spent: dict[str, float] = {}
    for name, seconds in after.items():
        kind = re.sub(r"-\d+$", "", name)
        spent[kind] = spent.get(kind, 0.0) + seconds - before.get(name, 0.0)
    return spent


async def run_floor(
    res: Scratch, jobs: int, fleet: Supervisor, progress: Callable[[int], None]
) -> FloorResult:
    """Load `jobs` (the measured run's job ids) into the floor's tables, run the floor's three
    processes from T0 until every run succeeded, and read the figures back from the rows."""
    topic = res.topics.runs("normal")
    conn = await asyncpg.connect(res.dsn)
    try:
        await conn.execute(QUERIES["floor_schema"])
        names = [f"floor-consumer-{k}" for k in range(CONSUMERS)]
        for name in names:
            fleet.start(name, ["bench", "floor-consumer", "--topic", topic])
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _assigned(fleet, names):
            fleet.check()
            if time.monotonic() > deadline:
                raise SupervisorError(
                    f"the floor's consumers did not join within {READY_TIMEOUT_S}s"
                )
            await asyncio.sleep(POLL_S)
        await asyncio.sleep(SETTLE_AFTER_JOIN_S)
        # T0 leaves time to load the jobs (due at T0) and start the claimer; a load that took
        # longer makes the floor late, never early: its figures count from T0 all the same.
        t0_ms = now_ms() + int((START_DELAY_S + jobs / LOAD_RATE_PER_S) * MS_PER_S)
        await conn.execute(
            QUERIES["floor_jobs_load"], [job_id(i) for i in range(jobs)], ms_to_datetime(t0_ms)
        )
        await conn.execute(QUERIES["floor_analyze"])
        fleet.start(
            "floor-claimer",
            ["bench", "floor-claimer", "--start-at-ms", str(t0_ms), "--topic", topic],
        )
        await asyncio.sleep(max(0.0, (t0_ms - now_ms()) / MS_PER_S))
        before = {**fleet.cpu(), **await _postgres_cpu(conn)}
        machine_before = machine_cpu_seconds()
        harness_before = cpu_seconds(os.getpid())
        harness_backend_before = cpu_seconds(conn.get_server_pid())
        deadline = time.monotonic() + FLOOR_TIMEOUT_S
        while (done := await conn.fetchval(QUERIES["floor_progress"])) < jobs:
            progress(done)
            fleet.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the floor completed {done} of {jobs} runs")
            await asyncio.sleep(POLL_S)
        progress(done)
        after = {**fleet.cpu(), **await _postgres_cpu(conn)}
        cpu = _spent(before, after)
        # The harness's own polling (its process and its backend) is not the floor's work.
        harness = cpu_seconds(os.getpid()) - harness_before
        harness += cpu_seconds(conn.get_server_pid()) - harness_backend_before
        cpu["harness"] = harness
        cpu["whole_machine"] = machine_cpu_seconds() - machine_before - harness
        fleet.stop([*names, "floor-claimer"])
        rows = [
            RunRecord(
                run_key=run_key(TENANT, r["job_id"], r["scheduled_ms"]),
                scheduled_ms=r["scheduled_ms"],
                claimed_ms=r["claimed_ms"],
                published_ms=None,
                started_ms=r["finished_ms"],
                finished_ms=r["finished_ms"],
                status=r["status"],
                attempt=1,
            )
            for r in await conn.fetch(QUERIES["floor_runs"])
        ]
    finally:
        await conn.close()

    def since_t0(values: list[int | None]) -> list[float]:
        return [(v - t0_ms) / MS_PER_S for v in values if v is not None]

    return FloorResult(
        jobs=jobs,
        t0_ms=t0_ms,
        claimed=Spread.of(since_t0([r.claimed_ms for r in rows]), jobs),
        published=Spread.of(since_t0(appended(res.kafka, topic)), jobs),
        completed=Spread.of(
            since_t0([r.finished_ms for r in rows if r.status == "succeeded"]), jobs
        ),
        cpu_s=cpu,
        rows=rows,
    )
