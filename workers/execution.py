"""Running one claimed run: the job's handler or HTTP target under its timeout, and what the
attempt came to (`Outcome`).

What runs is the job's content: a sealed envelope's (the leader's claim read it from the job's
row, tickwheel/run_seal.py), else as the worker's claim read it (`workers/store.py`), never
what an unsealed envelope carries.

    async handler  started at once, inside the dispatch (`begin`): a handler that finishes
                   without waiting on anything — most hot-second handlers do little, or answer
                   from memory — is done before `begin` returns, and costs no task, no timer
                   and no trip through the event loop (what Python 3.12 calls an eager task).
                   One that awaits goes on in a task of its own, from the point where it
                   waited, under the job's `timeout_ms` counted from its start.
    sync handler   on the worker's thread pool, in a task, under the timeout (a thread cannot
                   be stopped: past its timeout the attempt is recorded as timed out and the
                   thread runs on, its slot freed)
    HTTP target    `workers/targets.py`, in a task, under the timeout
    neither        (the job's row is gone, or no handler of that name is loaded) a permanent
                   failure at once

Every exception a handler raises becomes the outcome's error text (`PermanentError`: not to be
retried); a cancellation (shutdown past its grace) is not an outcome and propagates.
"""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import Coroutine, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from tickwheel.workers import handlers
from tickwheel.workers.handlers import Context, PermanentError
from tickwheel.workers.store import JobContent
from tickwheel.workers.targets import HttpTargets, RetryableTargetError


class Outcome(NamedTuple):
    """How an attempt ended: its error (None: it succeeded), whether the error is permanent,
    and how long it ran (seconds, monotonic)."""

    error: str | None
    permanent: bool
    seconds: float


SUCCEEDED_AT_ONCE = Outcome(None, False, 0.0)


def _failure(exc: BaseException, seconds: float) -> Outcome:
    if isinstance(exc, PermanentError):
        return Outcome(str(exc) or "PermanentError", True, seconds)
    if isinstance(exc, RetryableTargetError):
        return Outcome(str(exc), False, seconds)
    return Outcome(f"{type(exc).__name__}: {exc}", False, seconds)


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], waiting: Any) -> Generator[Any, Any, Any]:
    """Go on with a coroutine that was started by hand and is waiting on `waiting` (what it
    yielded: a future, or None for a bare yield), as the task driving this would have: hand
    `waiting` to the task, then resume the coroutine where it stopped — or throw into it what
    the task threw in meanwhile (a cancellation)."""
    try:
        yield waiting
    except BaseException as exc:  # a cancellation (or any throw): it belongs to the handler
        try:
            waiting = coro.throw(exc)
        except StopIteration as done:
            return done.value
        return (yield from _resume(coro, waiting))
    return (yield from coro.__await__())


class Execution:
    """Runs claimed runs; holds the pieces every run shares (the thread pool, the HTTP client)."""

    def __init__(self, threads: ThreadPoolExecutor, targets: HttpTargets) -> None:
        self.threads = threads
        self.targets = targets

    def begin(self, job: JobContent | None, ctx: Context) -> Outcome | Coroutine[Any, Any, Outcome]:
        """Start the run: its `Outcome` if it is over already, else a coroutine that finishes
        it (to be run as a task) and returns the outcome."""
        if job is None:  # the job's row is gone: nothing to run (a dead letter)
            return Outcome("its job no longer exists", True, 0.0)
        if job.target is not None:
            return self._finish(self.targets.call(job.target, job.payload, ctx.run_key), job)
        assert job.handler is not None
        found = handlers.resolved(job.handler)
        if found is None:
            return Outcome(
                f"no handler named {job.handler!r} is loaded in this worker (--handlers)",
                True,
                0.0,
            )
        fn, is_async = found
        if not is_async:
            loop = asyncio.get_running_loop()
            return self._finish(loop.run_in_executor(self.threads, fn, ctx, job.payload), job)
        started = time.monotonic()
        try:
            coro = fn(ctx, job.payload)
            waiting = coro.send(None)
        except StopIteration:
            return SUCCEEDED_AT_ONCE
        except Exception as exc:
            return _failure(exc, time.monotonic() - started)
        return self._finish(_resume(coro, waiting), job, started)

    async def _finish(self, work: Any, job: JobContent, started: float | None = None) -> Outcome:
        """Await `work` under the job's timeout (counted from `started`, else from now)."""
        started = time.monotonic() if started is None else started
        loop = asyncio.get_running_loop()
        deadline_at = loop.time() + job.timeout_ms / 1000 - (time.monotonic() - started)
        try:
            async with asyncio.timeout_at(deadline_at) as deadline:
                await work
        except TimeoutError as exc:
            seconds = time.monotonic() - started
            if deadline.expired():
                return Outcome(f"timed out after {job.timeout_ms} ms", False, seconds)
            return Outcome(f"TimeoutError: {exc}", False, seconds)
        except Exception as exc:
            return _failure(exc, time.monotonic() - started)
        return Outcome(None, False, time.monotonic() - started)
