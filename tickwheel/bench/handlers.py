"""Handlers of the benchmark's jobs: `tickwheel worker --handlers tickwheel.bench.handlers`."""

from __future__ import annotations

import asyncio
from typing import Any

from tickwheel import Context, handler

MS_PER_S = 1000.0


@handler("bench.noop")
async def noop(ctx: Context, payload: Any) -> None:
    """Does nothing: the run costs only what the system around it costs."""


@handler("bench.sleep")
async def sleep(ctx: Context, payload: Any) -> None:
    """Waits `payload["ms"]` milliseconds without holding a CPU (I/O-bound work)."""
    await asyncio.sleep(int(payload.get("ms", 0)) / MS_PER_S)
