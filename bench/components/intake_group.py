"""Registry processes in one consumer group: why two of them gave 9.5k/s in one run, 24.7k in
another (issue 14).

Runs N real `tickwheel registry --no-http` processes on 100,000 registrations in two ways:

- `together`: spawned together on a topic that already holds every registration (what
  intake.py's process rows do): the first member to join takes all partitions and
  starts, the second one's join costs a cooperative rebalance while work is under way;
- `joined`: the group is stable with every member holding partitions before the first
  registration is produced, so the members work side by side from the start.

Per process, the first and last batch it applied (from its log) show whether the members
overlapped; the rate is registrations / (last batch - first batch, any process).

    .venv/bin/python -m tickwheel.bench.components.intake_group [--processes 2] [--rounds 2] \
        [--count 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from confluent_kafka import ConsumerGroupState, TopicPartition

from tickwheel.bench.components import RESULTS
from tickwheel.config import load_settings
from tickwheel.kafka.clients import admin_client, consumer, producer
from tickwheel.testing import migrate, scratch_database_async, unique_topics

PARTITIONS = 6
POLL_S = 0.25


def _registration(i: int) -> bytes:
    job = {"id": f"job-{i}", "schedule": "*/5 * * * *", "handler": "bench.noop", "payload": {}}
    return orjson.dumps({"op": "upsert", "tenant": "bench", "job": job})


def _produce(kafka: str, topic: str, count: int) -> None:
    prod = producer(kafka)
    for i in range(count):
        prod.produce(topic, key=f"job-{i}".encode(), value=_registration(i))
        if i % 10_000 == 0:
            prod.poll(0)
    prod.flush(120)


def _batch_times(log: Path) -> list[float]:
    """Unix seconds of each batch a registry process logged as applied."""
    times = []
    for line in log.read_text().splitlines():
        if '"registrations batch"' in line:
            stamp = json.loads(line)["ts"].replace("Z", "+00:00")
            times.append(dt.datetime.fromisoformat(stamp).timestamp())
    return times


async def _wait_stable(kafka: str, group: str, members: int) -> None:
    admin = admin_client(kafka)
    while True:
        await asyncio.sleep(POLL_S)
        found = admin.describe_consumer_groups([group])[group].result()
        if (
            found.state == ConsumerGroupState.STABLE
            and len(found.members) == members
            and all(m.assignment.topic_partitions for m in found.members)
        ):
            return


async def one_run(mode: str, processes: int, count: int, logs: Path) -> dict[str, Any]:
    s = load_settings()
    kafka = s.effective_kafka
    async with scratch_database_async(s.effective_dsn, "bench") as database:
        with unique_topics(kafka, "bench", partitions=PARTITIONS) as topics:
            await migrate(database.dsn, deployment=topics.prefix, partitions=False)
            conn = await asyncpg.connect(database.dsn)
            await conn.execute("INSERT INTO tenants (name) VALUES ('bench')")
            await conn.close()
            group = f"{topics.prefix}.registry"
            if mode == "together":
                _produce(kafka, topics.registrations, count)
            env = {**os.environ, "TICKWHEEL_DSN": database.dsn, "TICKWHEEL_KAFKA": kafka}
            env["TICKWHEEL_TOPIC_PREFIX"] = topics.prefix
            env["TICKWHEEL_INTAKE_REQUIRE_SIGNATURE"] = "false"  # its only producer: us, unsigned
            exe = str(Path(sys.executable).parent / "tickwheel")
            paths = [logs / f"{mode}-{k}.log" for k in range(processes)]
            spawned = time.time()
            procs = []
            try:
                for path in paths:
                    with path.open("wb") as sink:
                        procs.append(
                            subprocess.Popen([exe, "registry", "--no-http"], env=env, stderr=sink)
                        )
                if mode == "joined":
                    await _wait_stable(kafka, group, processes)
                    _produce(kafka, topics.registrations, count)
                cons = consumer(kafka, group, **{"enable.auto.commit": False})
                parts = [TopicPartition(topics.registrations, p) for p in range(PARTITIONS)]
                try:
                    while sum(max(0, tp.offset) for tp in cons.committed(parts, 10)) < count:
                        if any(p.poll() is not None for p in procs):
                            raise RuntimeError("a registry process exited")
                        await asyncio.sleep(POLL_S)
                finally:
                    cons.close()
            finally:
                for p in procs:
                    p.send_signal(signal.SIGTERM)
                for p in procs:
                    p.wait(60)
    batches = [_batch_times(path) for path in paths]
    every = sorted(t for b in batches for t in b)
    span = every[-1] - every[0]
    span += span / len(every)  # the first batch's own duration, on average
    return {
        "mode": mode,
        "processes": processes,
        "count": count,
        # None: that process applied nothing (the others had finished before it got partitions)
        "first_batch_after_spawn_s": [round(b[0] - spawned, 2) if b else None for b in batches],
        "last_batch_after_spawn_s": [round(b[-1] - spawned, 2) if b else None for b in batches],
        "per_second": round(count / span),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--count", type=int, default=100_000)
    args = parser.parse_args()
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"tickwheel-intake-group-{os.getpid()}"
    logs.mkdir(parents=True, exist_ok=True)
    runs = []
    for _ in range(args.rounds):
        for mode in ("together", "joined"):
            run = await one_run(mode, args.processes, args.count, logs)
            print(json.dumps(run), flush=True)
            runs.append(run)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"intake_group_{args.processes}.json"
    out.write_text(json.dumps(runs, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
