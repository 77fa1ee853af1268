"""`tickwheel demo`: the system end to end on the local stack, narrated.

What exists so far is shown working against the real services: a tenant is created, a
registry process is started, one job is registered over HTTP and one by producing to Kafka, a
malformed registration is rejected onto the rejected topic, and both jobs are read back with
their computed shard and next fire time. Later parts (shard leaders, workers, DLQ) join here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from tickwheel.config import Settings
from tickwheel.kafka import consumer, producer
from tickwheel.topics import Topics

READY_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for(check: Callable[[], Any], what: str, timeout_s: float = READY_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"demo: {what} did not happen within {timeout_s}s")


def run(settings: Settings, say: Callable[[str], None]) -> None:
    exe = str(Path(sys.executable).parent / "tickwheel")
    tenant = f"demo-{uuid.uuid4().hex[:6]}"
    out = subprocess.run([exe, "tenant", "add", tenant], capture_output=True, text=True, check=True)
    api_key = out.stdout.strip().splitlines()[-1]
    say(f"1. created tenant {tenant} (API key {api_key[:10]}…)")

    port = _free_port()
    registry = subprocess.Popen(
        [exe, "registry", "--port", str(port)], stderr=subprocess.DEVNULL, env=dict(os.environ)
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(
            lambda: httpx.get(f"{base}/healthz", timeout=2).status_code == 200, "registry health"
        )
        say(
            f"2. registry serving HTTP on {base} and consuming "
            f"{Topics(settings.topic_prefix).registrations}"
        )
        auth = {"Authorization": f"Bearer {api_key}"}
        job = {
            "id": "invoice-42",
            "schedule": "0 9 * * MON-FRI",
            "timezone": "Europe/Berlin",
            "handler": "billing.send_invoice",
            "payload": {"invoice": 42},
        }
        resp = httpx.post(f"{base}/v1/jobs", json=job, headers=auth, timeout=10)
        say(
            f"3. POST /v1/jobs → {resp.status_code}: next_run_at "
            f"{resp.json().get('next_run_at')}, version {resp.json().get('version')}"
        )

        topics = Topics(settings.topic_prefix)
        prod = producer(settings.effective_kafka)
        kafka_job = {"id": "nightly-report", "schedule": "H 2 * * *", "handler": "reports.run"}
        prod.produce(
            topics.registrations,
            key=b"nightly-report",
            value=orjson.dumps({"op": "upsert", "tenant": tenant, "job": kafka_job}),
        )
        bad = orjson.dumps(
            {
                "op": "upsert",
                "tenant": tenant,
                "job": {"id": "broken", "schedule": "every day", "handler": "x"},
            }
        )
        prod.produce(topics.registrations, key=b"broken", value=bad)
        prod.flush(10)
        say("4. produced two registrations to Kafka: one valid, one with a bad schedule")

        def landed() -> Any:
            resp = httpx.get(f"{base}/v1/jobs/nightly-report", headers=auth, timeout=2)
            return resp.json() if resp.status_code == 200 else None

        got = _wait_for(landed, "the Kafka registration to land")
        say(
            f"5. Kafka job landed: schedule {got['schedule']!r} (H resolved per job), "
            f"next_run_at {got['next_run_at']}"
        )
        reason = _find_rejection(settings, topics.rejected, bad)
        say(f"6. rejected onto {topics.rejected}: {reason}")
        listing = httpx.get(f"{base}/v1/jobs", headers=auth, timeout=5).json()
        say(f"7. GET /v1/jobs lists {[j['id'] for j in listing['items']]}")
    finally:
        registry.send_signal(signal.SIGTERM)
        registry.wait(30)
    say("demo done; `tickwheel dev down` stops the stack")


def _find_rejection(settings: Settings, topic: str, original: bytes) -> str:
    import base64

    cons = consumer(
        settings.effective_kafka, f"demo-{uuid.uuid4()}", **{"enable.auto.commit": False}
    )
    cons.subscribe([topic])
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = cons.poll(0.5)
            if msg is None or msg.error():
                continue
            body = orjson.loads(msg.value() or b"{}")
            if base64.b64decode(body.get("original", "")) == original:
                return str(body["reason"])
        raise RuntimeError("demo: the rejection did not appear")
    finally:
        cons.close()
