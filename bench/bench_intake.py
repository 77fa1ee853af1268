"""Registrations per second through Kafka into Postgres (issue 5), beside a per-message baseline.

Produces N registrations (distinct jobs; ten shared cron expressions, one in ten with an `H`
field, a few zones) to a fresh topic, then times the intake from its first poll until every
offset is committed, with the configured batch size and with batches of one (the baseline:
one transaction per message). Needs the dev stack (`tickwheel dev up`).

    .venv/bin/python bench/bench_intake.py [--count 100000] [--baseline-count 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from confluent_kafka import Consumer, TopicPartition

from tickwheel import db
from tickwheel.config import load_settings
from tickwheel.kafka import create_topics, delete_topics, producer
from tickwheel.registry_api.service import intake_group, make_intake
from tickwheel.registry_api.store import RegistryStore
from tickwheel.topics import Topics

RESULTS = Path(__file__).parent / "results"
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
    cons = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        tps = cons.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return sum(max(0, tp.offset) for tp in tps)
    finally:
        cons.close()


async def _one_run(dsn: str, kafka: str, count: int, batch: int) -> dict[str, Any]:
    admin = await asyncpg.connect(dsn.rsplit("/", 1)[0] + "/postgres")
    name = f"bench_{uuid.uuid4().hex[:10]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    bench_dsn = dsn.rsplit("/", 1)[0] + f"/{name}"
    topics = Topics(f"bench{uuid.uuid4().hex[:8]}")
    create_topics(kafka, topics.all(), partitions=PARTITIONS, replication=1)
    try:
        conn = await asyncpg.connect(bench_dsn)
        await db.migrate(conn)
        await conn.close()
        pool = await asyncpg.create_pool(bench_dsn, min_size=2, max_size=4)
        store = RegistryStore(pool, shards=64)
        tenant = "bench"
        await store.create_tenant(tenant)

        prod = producer(kafka)
        started = time.perf_counter()
        for i in range(count):
            prod.produce(
                topics.registrations, key=f"job-{i}".encode(), value=_registration(tenant, i)
            )
            if i % 10_000 == 0:
                prod.poll(0)
        prod.flush(120)
        produce_s = time.perf_counter() - started

        settings = load_settings(
            dsn=bench_dsn, kafka=kafka, topic_prefix=topics.prefix, intake_batch=batch, shards=64
        )
        intake = make_intake(store, settings)
        stop = asyncio.Event()
        started = time.perf_counter()
        task = asyncio.create_task(intake.run(stop))
        group = intake_group(settings)
        while _committed_total(kafka, group, topics.registrations) < count:
            await asyncio.sleep(0.2)
            if task.done():
                raise RuntimeError(f"intake stopped: {task.exception()}")
        elapsed = time.perf_counter() - started
        stop.set()
        await task
        await intake.close()
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
    finally:
        delete_topics(kafka, topics.all())
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--baseline-count", type=int, default=5_000)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args()
    s = load_settings()
    batched = await _one_run(s.effective_dsn, s.effective_kafka, args.count, args.batch)
    baseline = await _one_run(s.effective_dsn, s.effective_kafka, args.baseline_count, 1)
    result = {
        "machine": f"{platform.processor() or platform.machine()}, 2 cores shared with the "
        "Kafka, ZooKeeper and Postgres of the dev stack",
        "python": platform.python_version(),
        "batched": batched,
        "baseline_per_message": baseline,
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
        ]
    )
    (RESULTS / "intake.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    asyncio.run(main())
