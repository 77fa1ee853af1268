"""What the harness reads back: run rows, messages on the run topics, scheduler metrics.

The figures come from what the database and the broker hold, never from the processes' own
accounts; the schedulers' metrics are read only to know when their wheels are loaded.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field

import asyncpg
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, TopicPartition

from tickwheel.bench.analysis import RunRecord
from tickwheel.domain import PRIORITIES, run_key
from tickwheel.kafka.clients import consumer
from tickwheel.queries import QUERIES
from tickwheel.topics import Topics

CONSUME_BATCH = 10_000
CONSUME_TIMEOUT_S = 1.0
READ_TIMEOUT_S = 600.0  # seconds to read the run topics to their end
METRICS_TIMEOUT_S = 2.0
WHEEL_ENTRIES_METRIC = "tickwheel_scheduler_wheel_entries"


async def fetch_runs(conn: asyncpg.Connection) -> list[RunRecord]:
    return [
        RunRecord(
            run_key=run_key(r["tenant"], r["job_id"], r["scheduled_ms"]),
            scheduled_ms=r["scheduled_ms"],
            claimed_ms=r["claimed_ms"],
            published_ms=r["published_ms"],
            started_ms=r["started_ms"],
            finished_ms=r["finished_ms"],
            status=r["status"],
            attempt=r["attempt"],
        )
        for r in await conn.fetch(QUERIES["bench_runs"])
    ]


@dataclass
class Deliveries:
    """What the run topics hold, per `run_key` header ('' for a message without one)."""

    counts: Counter[str] = field(default_factory=Counter)
    first_append_ms: dict[str, int] = field(default_factory=dict)  # broker time, unix ms


def run_deliveries(kafka: str, topics: Topics) -> Deliveries:
    """Read the three run topics from the start to their end offsets at the time of the call:
    messages per run key and, for each, the earliest broker append time (the scratch topics
    stamp messages on append, scratch.stamp_on_append)."""
    names = [topics.runs(p) for p in PRIORITIES]
    cons = consumer(kafka, f"bench-count-{uuid.uuid4().hex}", **{"enable.auto.commit": False})
    found = Deliveries()
    try:
        metadata = cons.list_topics(timeout=10)
        ends: dict[tuple[str, int], int] = {}
        assignment = []
        for name in names:
            for partition in metadata.topics[name].partitions:
                low, high = cons.get_watermark_offsets(TopicPartition(name, partition), timeout=10)
                if high > low:
                    ends[(name, partition)] = high
                    assignment.append(TopicPartition(name, partition, low))
        cons.assign(assignment)
        deadline = time.monotonic() + READ_TIMEOUT_S
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"run topics not read to their end within {READ_TIMEOUT_S}s")
            for msg in cons.consume(CONSUME_BATCH, CONSUME_TIMEOUT_S):
                if msg.error():
                    continue
                key = _run_key_header(msg.headers())
                found.counts[key] += 1
                kind, stamp = msg.timestamp()
                if kind == TIMESTAMP_LOG_APPEND_TIME:
                    first = found.first_append_ms.get(key)
                    found.first_append_ms[key] = stamp if first is None else min(first, stamp)
                where = (msg.topic() or "", msg.partition() or 0)
                if where in ends and (msg.offset() or 0) + 1 >= ends[where]:
                    del ends[where]
    finally:
        cons.close()
    return found


def _run_key_header(headers: object) -> str:
    """The `run_key` header of a message ('' when it has none)."""
    pairs = list(headers.items()) if isinstance(headers, dict) else headers
    for name, value in pairs if isinstance(pairs, list) else []:
        if name == "run_key" and value is not None:
            return value.decode() if isinstance(value, bytes) else value
    return ""


def wheel_entries(port: int) -> int | None:
    """Sum of a scheduler's wheel entries over its shards (None: metrics not readable)."""
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/metrics", timeout=METRICS_TIMEOUT_S
        ) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    total = 0.0
    found = False
    for line in text.splitlines():
        if line.startswith(WHEEL_ENTRIES_METRIC + "{") or line.startswith(
            WHEEL_ENTRIES_METRIC + " "
        ):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    return int(total) if found else None
