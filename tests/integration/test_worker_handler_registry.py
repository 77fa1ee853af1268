"""A worker's handler registry holds exactly what its `--handlers` modules registered: nothing of
the harnesses rides along with the command line, so a user's handler may take any name."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from .conftest import SchedEnv

pytestmark = pytest.mark.integration

STARTED_TIMEOUT_S = 60.0
USER_MODULE = """
from tickwheel import handler


@handler("chaos.record")  # the name of a harness handler: the user's own here
async def record(ctx, payload):
    return None


@handler("mine.hello")
def hello(ctx, payload):
    return None
"""


def _started(log: Path) -> dict[str, object] | None:
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(entry, dict) and entry.get("msg") == "worker started":
            return entry
    return None


def test_worker_registry_holds_only_the_handlers_it_was_given(
    sched: SchedEnv, tmp_path: Path
) -> None:
    """`tickwheel worker --handlers mine` starts with mine's chaos.record and mine.hello and no
    other handler (the harnesses' chaos.record was registered by every process before)"""
    (tmp_path / "mine.py").write_text(USER_MODULE)
    worker = sched.spawn_command(
        "worker", ["worker", "--handlers", "mine", "--id", "w1"], PYTHONPATH=str(tmp_path)
    )
    log = sched.logs["worker"]
    deadline = time.monotonic() + STARTED_TIMEOUT_S
    while (entry := _started(log)) is None:
        assert worker.poll() is None, sched.log_text("worker")
        assert time.monotonic() < deadline, sched.log_text("worker")
        time.sleep(0.2)
    assert entry["handlers"] == ["chaos.record", "mine.hello"]
    worker.terminate()
    assert worker.wait(60) == 0, sched.log_text("worker")
