"""The chaos workload's handler: `tickwheel worker --handlers tickwheel.chaos.handlers`.

Each execution appends `S <run_key> <attempt> <worker> <pid>` when it begins and `D …` when
it returns to the file named by TICKWHEEL_CHAOS_LOG (one O_APPEND write per line, so lines of
concurrent workers never interleave); the checker counts executions from it across kill -9.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from tickwheel import handler

LOG_ENV = "TICKWHEEL_CHAOS_LOG"
WORKER_ENV = "TICKWHEEL_CHAOS_WORKER"


def _note(mark: str, ctx: Any) -> None:
    worker = os.environ.get(WORKER_ENV, "worker")
    line = f"{mark} {ctx.run_key} {ctx.attempt} {worker} {os.getpid()}\n"
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@handler("chaos.record")
async def record(ctx: Any, payload: Any) -> None:
    """Note the start, hold the slot `sleep_ms` (so a kill lands mid-handler), note the end."""
    _note("S", ctx)
    await asyncio.sleep(payload.get("sleep_ms", 0) / 1000 if isinstance(payload, dict) else 0)
    _note("D", ctx)
