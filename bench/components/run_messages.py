"""What a run costs in Kafka messages: one message per run, or several runs of a claim in one.

Issue 52 names a lever: a Kafka message that carries several runs of one claim (same priority
and partition; each run still named by its run key). Before building it, this measures what it
could save, on the dev stack's broker, with the envelopes leaders publish today
(`envelopes.run.encode_run`, sealed, with their headers):

    one     N messages, one run each, as `shards/outbox.py` produces them (headers run_key,
            epoch, seal; `publish_confirmed`, 5,000 runs a publish as a claim), then consumed
            in batches of 500 and each decoded as a worker does (`RunEnvelope.decode`, the
            seal opened)
    k       N / k messages of k runs each (the runs' envelopes as a JSON array, one seal over
            the value, headers epoch and seal), consumed the same way, each message's runs
            decoded from the array (`RunEnvelope.from_dict` per run)

For each: the producer's and the consumer's process CPU (Python and librdkafka's threads) and the
broker's (its JVM, from /proc) per run, while producing and while consuming. The topic is made
and deleted here; nothing else should run meanwhile.

    .venv/bin/python -m tickwheel.bench.components.run_messages [--runs 100000] [--k 100] \
        [--json docs/results/run_messages.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
import uuid
from typing import Any

import orjson

from tickwheel.config import load_settings
from tickwheel.domain import run_key
from tickwheel.envelopes.run import RunEnvelope, encode_run, run_headers
from tickwheel.kafka.admin import create_topics, delete_topics
from tickwheel.kafka.clients import consumer, producer
from tickwheel.kafka.producing import ONLY_ERROR_REPORTS, Outgoing, publish_confirmed
from tickwheel.run_seal import SEAL_HEADER, RunSeal

PARTITIONS = 6
CLAIM_RUNS = 5_000  # runs a leader's claim statement carries at most
EPOCH = 7
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _broker_pid() -> int:
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if b"kafka.Kafka" in f.read():
                        return int(name)
            except OSError:
                continue
    raise RuntimeError("no Kafka broker process found")


def envelopes(runs: int) -> list[tuple[str, bytes]]:
    """(run key, envelope) of `runs` one-off runs of 100 tenants, as a leader encodes them."""
    out = []
    at = 1_796_600_000_000
    for i in range(runs):
        tenant, job = f"t{i % 100:02d}", f"job-{i:07d}"
        key = run_key(tenant, job, at)
        value = encode_run(
            key, tenant, job, at, 1, EPOCH, "normal", '{"order": 42}', 30_000, "bench.noop",
            None, "schedule",
        )  # fmt: skip
        out.append((key, value))
    return out


def produce(
    bootstrap: str, topic: str, runs: list[tuple[str, bytes]], k: int, seal: RunSeal
) -> None:
    """Publish as a leader does (`publish_confirmed` on a producer reporting failures only),
    one confirmed publish per claim's worth (`CLAIM_RUNS`)."""
    prod = producer(bootstrap, **ONLY_ERROR_REPORTS)
    epoch = str(EPOCH).encode()
    for start in range(0, len(runs), CLAIM_RUNS):
        claim = runs[start : start + CLAIM_RUNS]
        partition = (start // CLAIM_RUNS) % PARTITIONS  # a claim's runs: one shard's partition
        messages = []
        for first in range(0, len(claim), k):
            part = claim[first : first + k]
            headers: list[tuple[str, str | bytes | None]]
            if k == 1:
                key, value = part[0]
                headers = list(run_headers(key, epoch))
            else:
                value = b"[" + b",".join(v for _, v in part) + b"]"
                headers = [("epoch", epoch)]
            headers.append((SEAL_HEADER, seal.seal(value)))
            messages.append(Outgoing(topic, value, headers=headers, partition=partition))
        if publish_confirmed(prod, messages, distinct_values=True):
            raise RuntimeError("not acknowledged")


def consume(bootstrap: str, topic: str, runs: int, k: int, seal: RunSeal) -> None:
    cons = consumer(bootstrap, f"bench-{uuid.uuid4().hex[:8]}", **{"auto.offset.reset": "earliest"})
    cons.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 120
    try:
        while seen < runs:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumed {seen} of {runs}")
            for msg in cons.consume(500, 0.1):
                if msg.error() is not None:
                    continue
                raw = msg.value() or b""
                headers = msg.headers()
                if not isinstance(headers, list) or not seal.opens(raw, headers):
                    raise RuntimeError("seal did not open")
                if k == 1:
                    RunEnvelope.decode(raw)
                    seen += 1
                else:
                    for obj in orjson.loads(raw):
                        RunEnvelope.from_dict(obj)
                        seen += 1
    finally:
        cons.close()


def measure(bootstrap: str, runs: list[tuple[str, bytes]], k: int, broker: int) -> dict[str, Any]:
    seal = RunSeal(b"k" * 32)
    topic = f"bench-runs-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, [topic], partitions=PARTITIONS, replication=1)
    try:
        figures: dict[str, Any] = {"runs_per_message": k, "messages": -(-len(runs) // k)}
        for phase in ("produce", "consume"):
            own, jvm, wall = _cpu_self(), _cpu_of(broker), time.monotonic()
            if phase == "produce":
                produce(bootstrap, topic, runs, k, seal)
            else:
                consume(bootstrap, topic, len(runs), k, seal)
            per_run = 1e6 / len(runs)
            figures[f"{phase}_client_us_per_run"] = round((_cpu_self() - own) * per_run, 1)
            figures[f"{phase}_broker_us_per_run"] = round((_cpu_of(broker) - jvm) * per_run, 1)
            figures[f"{phase}_wall_s"] = round(time.monotonic() - wall, 2)
        return figures
    finally:
        delete_topics(bootstrap, [topic])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=100, help="runs per message of the batched side")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    bootstrap = load_settings().effective_kafka
    broker = _broker_pid()
    runs = envelopes(args.runs)
    report: dict[str, Any] = {
        "command": f"python -m tickwheel.bench.components.run_messages --runs {args.runs} "
        f"--k {args.k} --rounds {args.rounds}",
        "envelope_bytes": len(runs[0][1]),
        "rounds": [],
    }
    for _ in range(args.rounds):
        report["rounds"].append([measure(bootstrap, runs, k, broker) for k in (1, args.k)])
    print(json.dumps(report, indent=1))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=1)


if __name__ == "__main__":
    main()
