"""Registrations per second through Kafka into Postgres (issue 5), beside a per-message baseline.

Produces N registrations (distinct jobs; ten shared cron expressions, one in ten with an `H`
field, a few zones) to a fresh topic, then times the intake from its first poll until every
offset is committed, with the configured batch size and with batches of one (the baseline:
one transaction per message). Needs the dev stack (`tickwheel dev up`).

    .venv/bin/python -m tickwheel.bench.components.intake [--count 100000] [--baseline-count 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from confluent_kafka import TopicPartition

from tickwheel.bench.components import RESULTS
from tickwheel.config import load_settings
from tickwheel.kafka.clients import consumer, producer
from tickwheel.registry_api.service import intake_group, make_intake
from tickwheel.registry_api.store import RegistryStore
from tickwheel.runtime import tune_gc
from tickwheel.testing import migrate, scratch_database_async, unique_topics
from tickwheel.topics import Topics

PARTITIONS = 6
EXPRESSIONS = [
    "*/5 * * * *",
    "0 * * * *",
    "0 9 * * MON-FRI",
    "30 2 * * *",
    "0 0 1 * *",
    "15 */2 * * *",
    "0 12 * * SAT,SUN",
    "*/15 9-17 * * 1-5",
    "0 6 L * *",
    "@hourly",
]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo"]


def _registration(tenant: str, i: int) -> bytes:
    schedule = "H H * * *" if i % 10 == 0 else EXPRESSIONS[i % len(EXPRESSIONS)]
    job = {
        "id": f"job-{i}",
        "schedule": schedule,
        "timezone": ZONES[i % len(ZONES)],
        "handler": "bench.noop",
        "payload": {"n": i},
    }
    return orjson.dumps({"op": "upsert", "tenant": tenant, "job": job})


def _committed_total(kafka: str, group: str, topic: str) -> int:
    cons = consumer(kafka, group, **{"enable.auto.commit": False})
    try:
        tps = cons.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return sum(max(0, tp.offset) for tp in tps)
    finally:
        cons.close()


@asynccontextmanager
async def _scratch(dsn: str, kafka: str, count: int) -> AsyncIterator[tuple[str, Topics, float]]:
    """A throwaway migrated database with tenant `bench` and fresh topics holding `count`
    registrations; yields (its DSN, the topics, seconds taken to produce); then cleans up."""
    async with scratch_database_async(dsn, "bench") as database:
        with unique_topics(kafka, "bench", partitions=PARTITIONS) as topics:
            await migrate(database.dsn, deployment=topics.prefix, partitions=False)
            conn = await asyncpg.connect(database.dsn)
            await conn.execute("INSERT INTO tenants (name) VALUES ('bench')")
            await conn.close()
            prod = producer(kafka)
            started = time.perf_counter()
            for i in range(count):
                prod.produce(
                    topics.registrations, key=f"job-{i}".encode(), value=_registration("bench", i)
                )
                if i % 10_000 == 0:
                    prod.poll(0)
            prod.flush(120)
            yield database.dsn, topics, time.perf_counter() - started


async def _one_run(dsn: str, kafka: str, count: int, batch: int) -> dict[str, Any]:
    async with _scratch(dsn, kafka, count) as (bench_dsn, topics, produce_s):
        pool = await asyncpg.create_pool(bench_dsn, min_size=2, max_size=4)
        store = RegistryStore(pool, shards=64)
        tenant = "bench"
        settings = load_settings(
            dsn=bench_dsn,
            kafka=kafka,
            topic_prefix=topics.prefix,
            intake_batch=batch,
            shards=64,
            intake_require_signature=False,  # its only producer: us, unsigned
        )
        tune_gc()  # as `tickwheel registry` does at start
        intake = make_intake(store, settings)
        settled = [0]
        first_batch_at: list[float] = []

        def on_batch(report: Any) -> None:
            first_batch_at[:] = first_batch_at or [time.perf_counter()]
            settled[0] += report.messages

        intake.on_batch = on_batch
        stop = asyncio.Event()
        started = time.perf_counter()
        task = asyncio.create_task(intake.run(stop))
        while settled[0] < count:
            await asyncio.sleep(0.02)
            if task.done():
                raise RuntimeError(f"intake stopped: {task.exception()}")
        elapsed = time.perf_counter() - started
        stop.set()
        await task
        await intake.close()
        # Offsets are stored only after the database write; on close they are committed.
        committed = _committed_total(kafka, intake_group(settings), topics.registrations)
        assert committed == count, f"{committed} of {count} offsets committed"
        stored = await pool.fetchval("SELECT count(*) FROM jobs WHERE tenant = $1", tenant)
        await pool.close()
        assert stored == count, f"{stored} of {count} jobs stored"
        return {
            "count": count,
            "batch": batch,
            "seconds": round(elapsed, 3),
            "per_second": round(count / elapsed),
            "produce_seconds": round(produce_s, 3),
        }


async def _processes_run(
    dsn: str, kafka: str, count: int, batch: int, processes: int
) -> dict[str, Any]:
    """The same load through N `tickwheel registry --no-http` processes in one group."""
    import os
    import signal
    import subprocess
    import sys

    procs: list[subprocess.Popen[bytes]] = []
    async with _scratch(dsn, kafka, count) as (bench_dsn, topics, _produce_s):
        try:
            env = {
                **os.environ,
                "TICKWHEEL_DSN": bench_dsn,
                "TICKWHEEL_KAFKA": kafka,
                "TICKWHEEL_TOPIC_PREFIX": topics.prefix,
                "TICKWHEEL_INTAKE_BATCH": str(batch),
                "TICKWHEEL_INTAKE_REQUIRE_SIGNATURE": "false",  # its only producer: us, unsigned
            }
            exe = str(Path(sys.executable).parent / "tickwheel")
            started = time.perf_counter()
            procs = [
                subprocess.Popen([exe, "registry", "--no-http"], env=env, stderr=subprocess.DEVNULL)
                for _ in range(processes)
            ]
            group = f"{topics.prefix}.registry"
            first: tuple[float, int] | None = None
            done = 0
            while done < count:
                await asyncio.sleep(0.25)
                done = _committed_total(kafka, group, topics.registrations)
                if first is None and done > 0:
                    first = (time.perf_counter(), done)
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError("a registry process exited")
            ended = time.perf_counter()
            assert first is not None
            steady = (count - first[1]) / (ended - first[0]) if ended > first[0] else 0.0
            return {
                "count": count,
                "processes": processes,
                "batch": batch,
                "seconds_from_spawn": round(ended - started, 3),
                "per_second_from_spawn": round(count / (ended - started)),
                "per_second_steady": round(steady),
            }
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(60)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--baseline-count", type=int, default=5_000)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument(
        "--processes",
        type=int,
        default=2,
        help="also run the load through this many registry processes",
    )
    args = parser.parse_args()
    s = load_settings()
    batched = await _one_run(s.effective_dsn, s.effective_kafka, args.count, args.batch)
    baseline = await _one_run(s.effective_dsn, s.effective_kafka, args.baseline_count, 1)
    scaled = [
        await _processes_run(s.effective_dsn, s.effective_kafka, args.count, args.batch, n)
        for n in sorted({1, args.processes})
    ]
    result = {
        "machine": f"{platform.processor() or platform.machine()}, 2 cores shared with the "
        "Kafka, ZooKeeper and Postgres of the dev stack",
        "python": platform.python_version(),
        "batched": batched,
        "baseline_per_message": baseline,
        "processes": scaled,
        "ratio": round(batched["per_second"] / baseline["per_second"], 1),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "intake.json").write_text(json.dumps(result, indent=2) + "\n")
    table = "\n".join(
        [
            "| intake | registrations | seconds | registrations/s |",
            "|---|---:|---:|---:|",
            f"| batched ({args.batch} per transaction) | {batched['count']:,} | "
            f"{batched['seconds']} | **{batched['per_second']:,}** |",
            f"| baseline: one transaction per message | {baseline['count']:,} | "
            f"{baseline['seconds']} | {baseline['per_second']:,} |",
            "",
            f"Ratio batched / baseline: **{result['ratio']}x**. Producing the batched run's "
            f"messages took {batched['produce_seconds']} s (not included).",
            "",
            "The same load through `tickwheel registry --no-http` processes in one consumer "
            "group (offsets polled every 0.25 s; steady = after the first commit, so without "
            "process start-up and group join):",
            "",
            "| processes | registrations | registrations/s from spawn | steady registrations/s |",
            "|---:|---:|---:|---:|",
            *(
                f"| {r['processes']} | {r['count']:,} | {r['per_second_from_spawn']:,} | "
                f"**{r['per_second_steady']:,}** |"
                for r in scaled
            ),
        ]
    )
    (RESULTS / "intake.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    asyncio.run(main())
