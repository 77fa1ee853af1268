"""`make demo` stays true: `tickwheel demo` runs end to end on the real stack."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tickwheel.kafka import delete_topics
from tickwheel.stack import Addresses
from tickwheel.topics import Topics

pytestmark = pytest.mark.integration

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")


def test_demo_runs_end_to_end(stack: Addresses, db_dsn: str) -> None:
    """the demo registers over HTTP and Kafka, sees the rejection, and exits 0"""
    topics = Topics(f"demo{uuid.uuid4().hex[:8]}")
    env = {**os.environ, "TICKWHEEL_DSN": db_dsn, "TICKWHEEL_TOPIC_PREFIX": topics.prefix}
    try:
        out = subprocess.run(
            [TICKWHEEL, "demo"], capture_output=True, text=True, timeout=180, check=False, env=env
        )
    finally:
        delete_topics(stack.kafka, [*topics.all(), topics.health])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "POST /v1/jobs → 201" in out.stdout
    assert "Kafka job landed" in out.stdout
    assert "rejected onto" in out.stdout and "has 2 fields" in out.stdout
    assert "['invoice-42', 'nightly-report']" in out.stdout
