"""Handlers for worker tests run as `tickwheel worker --handlers worker_handlers` subprocesses.

Each execution appends `<run_key> <attempt>` to the file named by TW_TEST_LOG, so a test can
count executions across processes (and across a kill -9).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from tickwheel import PermanentError, handler


def _note(ctx: Any) -> None:
    with open(os.environ["TW_TEST_LOG"], "a") as log:
        log.write(f"{ctx.run_key} {ctx.attempt}\n")


@handler("test.record")
async def record(ctx: Any, payload: Any) -> None:
    """Note the execution; sleep `sleep_first_s` on attempt 1; fail as `fail` says."""
    _note(ctx)
    if ctx.attempt == 1 and payload.get("sleep_first_s"):
        await asyncio.sleep(payload["sleep_first_s"])
    if payload.get("fail") == "permanent":
        raise PermanentError("refused by the test")


@handler("test.sync_record")
def sync_record(ctx: Any, _payload: Any) -> None:
    """A synchronous handler: runs on the worker's thread pool."""
    _note(ctx)


@handler("test.switchable")
async def switchable(ctx: Any, _payload: Any) -> None:
    """Note the execution; fail while the file named by TW_TEST_BROKEN exists (the test
    "fixes" the handler by removing it)."""
    _note(ctx)
    if os.path.exists(os.environ["TW_TEST_BROKEN"]):
        raise RuntimeError("the downstream is broken (test switch)")


@handler("test.sleep")
async def sleep(ctx: Any, payload: Any) -> None:
    """Note the execution, then sleep `sleep_s` (every attempt)."""
    _note(ctx)
    await asyncio.sleep(payload.get("sleep_s", 0))
