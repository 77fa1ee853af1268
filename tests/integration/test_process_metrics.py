"""Metrics on every process (issue 25): a registry running only the Kafka intake exports the
intake's counters on a listener of its own, and a worker's metrics answer on a non-loopback
address when asked to bind it."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.error
import urllib.request

import asyncpg
import orjson
import pytest

from tickwheel.bench.supervisor import free_port
from tickwheel.kafka.clients import producer
from tickwheel.registry_api.store import RegistryStore
from tickwheel.signatures import sign

from .conftest import TEST_SHARDS, SchedEnv

pytestmark = pytest.mark.integration


def _scrape(host: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
        body: bytes = response.read()
        return body.decode()


def _scrape_until(host: str, port: int, wanted: list[str], timeout_s: float = 60.0) -> str:
    """The metrics once every line of `wanted` is in them (the process may still be starting)."""
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        try:
            text = _scrape(host, port)
        except (urllib.error.URLError, ConnectionError):
            text = ""
        if all(line in text for line in wanted):
            return text
        time.sleep(0.3)
    missing = [line for line in wanted if line not in text]
    raise AssertionError(f"not in the metrics within {timeout_s} s: {missing}\n{text[-3000:]}")


def _non_loopback_address() -> str:
    """This host's address on its default route (what another host would scrape)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("198.51.100.1", 9))  # no packet is sent: this only picks the route
        address: str = sock.getsockname()[0]
    assert not address.startswith("127."), "the test needs a non-loopback IPv4 address"
    return address


async def _tenant_key(dsn: str) -> tuple[str, str]:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
    try:
        name = f"m{time.monotonic_ns() % 10**10}"
        return name, await RegistryStore(pool, TEST_SHARDS).create_tenant(name)
    finally:
        await pool.close()


def test_a_registry_without_http_exports_the_intakes_metrics_on_its_own_listener(
    sched: SchedEnv,
) -> None:
    """`tickwheel registry --no-http --metrics-port P`: after one signed and one unsigned
    registration, P's /metrics counts one applied, one rejected for its signature, a batch's
    duration and the partitions' lag"""
    tenant, key = asyncio.run(_tenant_key(sched.dsn))
    port = free_port()
    proc = sched.spawn_command("registry", ["registry", "--no-http", "--metrics-port", str(port)])
    topic = sched.topics.registrations
    good = orjson.dumps(
        {
            "op": "upsert",
            "tenant": tenant,
            "job": {"id": "m", "at": "2031-01-01T00:00:00Z", "handler": "demo.echo"},
        }
    )
    unsigned = orjson.dumps({"op": "pause", "tenant": tenant, "id": "m"})
    prod = producer(sched.stack.kafka)
    prod.produce(topic, key=b"m", value=good, headers=[sign(good, key, topic=topic)])
    prod.produce(topic, key=b"m", value=unsigned)
    assert prod.flush(30) == 0
    text = _scrape_until(
        "127.0.0.1",
        port,
        [
            'tickwheel_registry_intake_registrations_total{result="applied"} 1.0',
            'tickwheel_registry_intake_registrations_total{result="rejected"} 1.0',
            'tickwheel_registry_intake_rejections_total{reason="signature"} 1.0',
        ],
    )
    assert proc.poll() is None, sched.log_text("registry")
    assert "tickwheel_registry_intake_batch_duration_seconds_count" in text
    assert 'tickwheel_registry_intake_lag{partition="' in text
    assert "tickwheel_http_requests_total{" not in text  # no HTTP part: nothing served there


def test_a_workers_metrics_answer_on_the_non_loopback_address_it_is_told_to_bind(
    sched: SchedEnv,
) -> None:
    """`tickwheel worker --metrics-host <this host's address>`: /metrics answers there (it
    answered on 127.0.0.1 only before), and not on loopback"""
    address = _non_loopback_address()
    port = free_port()
    sched.spawn_command(
        "worker",
        ["worker", "--id", "wm", "--metrics-host", address, "--metrics-port", str(port)],
    )
    text = _scrape_until(address, port, ["tickwheel_worker_"])
    assert "tickwheel_worker_" in text
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        _scrape("127.0.0.1", port)
