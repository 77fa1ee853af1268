"""`tickwheel status` against a running deployment (a `tickwheel scheduler` subprocess)."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

import orjson
import pytest

from .conftest import TEST_SHARDS, TICKWHEEL, SchedEnv

pytestmark = pytest.mark.integration

READY_S = 30.0  # a scheduler subprocess starts, registers and leads its shards within this


def _status(sched: SchedEnv) -> tuple[int, dict[str, Any]]:
    out = subprocess.run(
        [TICKWHEEL, "status", "--json"],
        capture_output=True,
        timeout=30,
        check=False,
        env={**os.environ, **sched.env},
    )
    return out.returncode, orjson.loads(out.stdout)


def test_status_json_shows_every_shard_led_with_its_wheel(sched: SchedEnv) -> None:
    """with one scheduler running, status --json shows every shard held and owned by it at an
    epoch, the wheel sizes read from the metrics endpoint it advertises in ZooKeeper, the
    backlog of each run topic and no error"""
    sched.spawn("st-a", "--metrics-port", "0")
    deadline = time.monotonic() + READY_S
    while True:
        code, snap = _status(sched)
        shards = snap["shards"]
        if snap["shards_led"] == TEST_SHARDS and all(
            s["owner"] == "st-a" and s["wheel_entries"] is not None for s in shards
        ):
            break
        assert time.monotonic() < deadline, f"not every shard led with a wheel: {snap}"
        time.sleep(0.5)
    assert code == 0 and snap["errors"] == []
    assert len(shards) == TEST_SHARDS
    assert all(s["holder"] == "st-a" and s["epoch"] >= 1 for s in shards)
    [scheduler] = snap["schedulers"]
    assert scheduler["member"] == "st-a" and scheduler["metrics"] is not None
    assert scheduler["shards_led"] == TEST_SHARDS and scheduler["error"] is None
    assert [b["topic"] for b in snap["backlog"]] == [
        sched.topics.runs(p) for p in ("high", "normal", "low")
    ]
    assert snap["dlq_messages"] == 0 and snap["workers"] == []
