"""librdkafka's log lines go through Python logging, never straight to the terminal."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from tickwheel.kafka.clients import LIBRDKAFKA_LOGGER, admin_client, consumer, producer

pytestmark = pytest.mark.unit

WAIT_S = 5.0


def _closed_port() -> str:
    """A loopback address nothing listens on: every connection attempt is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"127.0.0.1:{port}"


def _poll_until_logged(client: Any, caplog: pytest.LogCaptureFixture) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not caplog.records:
        client.poll(0.1)


CLIENTS: dict[str, Callable[[str], Any]] = {
    "producer": lambda bootstrap: producer(bootstrap),
    "consumer": lambda bootstrap: consumer(bootstrap, "log-probe"),
    "admin": lambda bootstrap: admin_client(bootstrap),
}


@pytest.mark.parametrize("kind", sorted(CLIENTS))
def test_client_logs_reach_python_logging_at_their_level(
    kind: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """a refused connection is an ERROR record of tickwheel.librdkafka, not a %3| stderr line"""
    caplog.set_level(logging.DEBUG, logger=LIBRDKAFKA_LOGGER.name)
    client = CLIENTS[kind](_closed_port())
    if kind == "consumer":
        client.subscribe(["log-probe"])
    _poll_until_logged(client, caplog)
    if kind == "consumer":
        client.close()
    records = [r for r in caplog.records if r.name == LIBRDKAFKA_LOGGER.name]
    assert records, f"the {kind} logged nothing within {WAIT_S}s"
    refused = [r for r in records if "Connection refused" in r.getMessage()]
    assert refused and all(r.levelno == logging.ERROR for r in refused)
    assert "%3|" not in capfd.readouterr().err


def test_quiet_admin_client_logs_nothing(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """a quiet client (the health probe's) logs nothing at all while its broker is down"""
    caplog.set_level(logging.DEBUG, logger=LIBRDKAFKA_LOGGER.name)
    client = admin_client(_closed_port(), quiet=True)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        client.poll(0.1)
    assert [r for r in caplog.records if r.name == LIBRDKAFKA_LOGGER.name] == []
    assert "|FAIL|" not in capfd.readouterr().err
