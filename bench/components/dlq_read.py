"""How long the operators' dead-letter view takes on a large dead-letter topic.

`GET /v1/ops/dead-letters` (and `tickwheel dlq ls|replay`) reads the DLQ topic up to its end as
it is now, without a consumer group (registry_api/ops/dlq.py `read_dead_letters`), then keeps
the latest letter per run key that the filters select (`select`). Its cost follows the letters
on the topic since `since`, not the ledger. This harness puts `--letters` dead letters (the
size a worker writes: an envelope with a small payload and an error line) on a topic of its own
in the dev stack's Kafka, spread over the last `--days` days by their timestamps, then times
the read as the view does it: the whole topic, and `since` the last 24 hours; the first call,
then `--repeat` more. The topic is deleted at the end.

    .venv/bin/python -m tickwheel.bench.components.dlq_read [--letters 100000] [--days 7] \
        [--repeat 5] [--json docs/results/dlq_read_100000.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from typing import Any

from tickwheel.clock import now_ms
from tickwheel.config import load_settings
from tickwheel.envelopes.dead_letters import DeadLetter
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.kafka.admin import create_topics, delete_topics
from tickwheel.kafka.clients import producer
from tickwheel.kafka.producing import Outgoing, publish_confirmed
from tickwheel.registry_api.ops.dlq import DlqFilter, read_dead_letters, select

DAY_MS = 86_400_000
TIMEOUT_S = 30.0


def letters(count: int, days: int, now: int) -> list[DeadLetter]:
    """`count` dead letters of 100 tenants' jobs, dead evenly over the last `days` days."""
    out = []
    for i in range(count):
        dead_at = now - (count - i) * days * DAY_MS // count
        tenant, job = f"t{i % 100:02d}", f"job-{i % 5000:05d}"
        scheduled = dead_at - 60_000
        run = RunEnvelope(
            f"{tenant}/{job}@{scheduled}", tenant, job, scheduled, 3, 7, "normal",
            {"order": i, "note": "a payload of a few fields"}, 30_000, handler="billing.charge",
        )  # fmt: skip
        error = f"RuntimeError: upstream answered 503 Service Unavailable (attempt 3 of 3) #{i}"
        out.append(DeadLetter(run, error, 3, dead_at))
    return out


def publish(bootstrap: str, topic: str, items: list[DeadLetter]) -> None:
    """The letters, stamped with their death, through `publish_confirmed`."""
    messages = [
        Outgoing(topic, item.encode(), key=item.run.job_id, timestamp_ms=item.dead_at)
        for item in items
    ]
    if publish_confirmed(producer(bootstrap), messages, timeout_s=120):
        raise RuntimeError("dead letters not acknowledged")


def timed(bootstrap: str, topic: str, since_ms: int | None, repeat: int) -> dict[str, Any]:
    """The view's read and selection (50 shown), first call and `repeat` more, in ms."""
    times, matching = [], 0
    for _ in range(repeat + 1):
        started = time.perf_counter()
        found, _ = read_dead_letters(bootstrap, topic, timeout_s=TIMEOUT_S, since_ms=since_ms)
        matching = len(select(found, DlqFilter(since_ms=since_ms)))
        times.append((time.perf_counter() - started) * 1000)
    rest = times[1:] or times
    return {
        "since_ms": since_ms,
        "matching": matching,
        "first_ms": round(times[0], 1),
        "median_ms": round(statistics.median(rest), 1),
        "max_ms": round(max(rest), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--letters", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    bootstrap = load_settings().effective_kafka
    topic = f"bench-dlq-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, [topic], partitions=3, replication=1)
    try:
        now = now_ms()
        publish(bootstrap, topic, letters(args.letters, args.days, now))
        report = {
            "command": "python -m tickwheel.bench.components.dlq_read "
            f"--letters {args.letters} --days {args.days} --repeat {args.repeat}",
            "letters": args.letters,
            "days": args.days,
            "whole_topic": timed(bootstrap, topic, None, args.repeat),
            "since_24h": timed(bootstrap, topic, now - DAY_MS, args.repeat),
        }
    finally:
        delete_topics(bootstrap, [topic])
    print(json.dumps(report, indent=1))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=1)


if __name__ == "__main__":
    main()
