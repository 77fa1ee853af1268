"""The handlers every harness's workers run: `tickwheel worker --handlers tickwheel.bench.handlers`.

    bench.noop, bench.sleep    the benchmarks' jobs: nothing, or `payload["ms"]` of waiting;
                               they record nothing (a benchmark measures the system around them)
    chaos.record, demo.record  note the execution, hold the slot `payload["sleep_ms"]` (so a
                               kill lands mid-handler), note its end
    demo.flaky                 the same, but fails (retryably) until the harness has "fixed" it
                               by creating the file `fixed` in the harness's folder

The execution log — one format for every harness, read by ledger.py — is `executions.log` in
the folder named by TICKWHEEL_BENCH_DIR, one line per event:

    <event> <run_key> <attempt> <worker> <pid>

`event` is `began` when the handler starts and `ok` or `failed` when it returns or raises;
`worker` is the process's name (TICKWHEEL_BENCH_WORKER, set by supervisor.py). Each line is one
O_APPEND write of a short line, so lines of concurrent workers never interleave; a handler
killed mid-run leaves its `began` line without an end, which is how the checkers count
executions across a kill -9.

This module is imported only by the workers that name it: `tickwheel` itself never imports it,
so no other worker's handler registry holds these names.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from tickwheel import Context, handler
from tickwheel.bench.ledger import BEGAN, FAILED, OK
from tickwheel.bench.supervisor import WORKER_NAME_ENV

DIR_ENV = "TICKWHEEL_BENCH_DIR"
EXECUTIONS_FILE = "executions.log"
FIXED_FILE = "fixed"
MS_PER_S = 1000.0


def _folder() -> Path:
    return Path(os.environ[DIR_ENV])


def note(event: str, ctx: Context) -> None:
    """Append one event of this execution to the execution log."""
    worker = os.environ.get(WORKER_NAME_ENV, "worker")
    line = f"{event} {ctx.run_key} {ctx.attempt} {worker} {os.getpid()}\n"
    fd = os.open(_folder() / EXECUTIONS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


async def _hold(payload: Any) -> None:
    ms = payload.get("sleep_ms", 0) if isinstance(payload, dict) else 0
    await asyncio.sleep(ms / MS_PER_S)


@handler("bench.noop")
async def noop(ctx: Context, payload: Any) -> None:
    """Does nothing: the run costs only what the system around it costs."""


@handler("bench.sleep")
async def sleep(ctx: Context, payload: Any) -> None:
    """Waits `payload["ms"]` milliseconds without holding a CPU (I/O-bound work)."""
    await asyncio.sleep(int(payload.get("ms", 0)) / MS_PER_S)


async def _record(ctx: Context, payload: Any) -> None:
    note(BEGAN, ctx)
    await _hold(payload)
    note(OK, ctx)


@handler("chaos.record")
async def chaos_record(ctx: Context, payload: Any) -> None:
    """Note the start, hold the slot `sleep_ms`, note the end (the chaos workload's jobs)."""
    await _record(ctx, payload)


@handler("demo.record")
async def demo_record(ctx: Context, payload: Any) -> None:
    """The same for the demo's jobs."""
    await _record(ctx, payload)


@handler("demo.flaky")
async def demo_flaky(ctx: Context, payload: Any) -> None:
    """Fails (retryably) until the harness has "fixed" it."""
    note(BEGAN, ctx)
    await _hold(payload)
    if not (_folder() / FIXED_FILE).exists():
        note(FAILED, ctx)
        raise RuntimeError("export service rejected the batch (the demo's bug, not fixed yet)")
    note(OK, ctx)
