"""What every long-running tickwheel process shares: GC settings and the process runner."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("tickwheel.runtime")

# Container objects allocated (net of those freed since) before the cyclic collector runs a
# young-generation pass. A pass scans every young object still alive, and the intake's batches
# keep theirs alive until the batch is written: at the default (700) a batch of 2,000
# registrations triggered hundreds of passes, at 50,000 still about ten per batch, which
# measured about a quarter of the intake's Python time (8-14 µs per registration). At 500,000
# a pass comes every few batches and mostly finds the finished batches freed by reference
# counting. Our data is acyclic by construction, so the garbage waiting for a pass is small.
GC_GEN0_THRESHOLD = 500_000  # allocations


def tune_gc() -> None:
    """Fewer, larger young-generation passes, and never re-scan what start-up allocated."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def awaiting(task: asyncio.Task[Any]) -> str:
    """Where a suspended task waits, outermost first: each coroutine down its `await` chain
    (file:line in function), then what the innermost awaits (a future's repr). For logs of a
    task that stopped making progress; `Task.print_stack` shows only the outermost frame."""
    lines = []
    step: Any = task.get_coro()
    while step is not None:
        frame = getattr(step, "cr_frame", None) or getattr(step, "gi_frame", None)
        if frame is None:
            lines.append(f"  awaiting a {type(step).__name__}")
            break
        code = frame.f_code
        lines.append(f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}")
        step = getattr(step, "cr_await", None) or getattr(step, "gi_yieldfrom", None)
    return "\n".join(lines)


# --- the process runner ------------------------------------------------------------------------
#
# Every long-running command (registry, scheduler, worker) runs its parts as named asyncio tasks
# under one `Process`. The rule (I9, no half-dead process): a part that ends while the process is
# not stopping — by an exception or by returning — is logged with its traceback, the process
# stops its other parts, and `run()` returns a non-zero exit code. Nothing is gathered with
# `return_exceptions=True` and forgotten. Parts report their state through `health`, which
# `/healthz` and the metrics read.


EXIT_OK = 0
EXIT_PART_DIED = 1
STOP_GRACE_S = 30.0  # seconds the parts get to finish after a stop, before they are cancelled


@dataclass
class PartState:
    """What one part of a process says about itself (for /healthz and metrics)."""

    name: str
    alive: bool = True
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    updated_at: float = field(default_factory=time.time)  # unix seconds

    def report(self, **detail: Any) -> None:
        self.detail.update(detail)
        self.updated_at = time.time()


class Process:
    """Named parts on one event loop, stopped together; see the rule above.

    `stop` is set by SIGINT/SIGTERM (when `run(signals=True)`), by `request_stop()`, or by a
    part's death. Closers registered with `on_close` run after every part has ended, newest
    first (release in the reverse order of acquisition).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.stop = asyncio.Event()
        self.health: dict[str, PartState] = {}
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._closers: list[Callable[[], Awaitable[Any]]] = []
        self._failed: list[str] = []

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> PartState:
        """Start a part; its end before `stop` counts as a death."""
        if name in self._tasks:
            raise ValueError(f"a part named {name!r} runs already")
        state = self.health.setdefault(name, PartState(name))
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}:{name}")
        self._tasks[name] = task
        task.add_done_callback(lambda t: self._ended(name, t))
        return state

    def state(self, name: str) -> PartState:
        """The health record of a part (created on first use, so a part can report early)."""
        return self.health.setdefault(name, PartState(name))

    def on_close(self, closer: Callable[[], Awaitable[Any]]) -> None:
        self._closers.append(closer)

    def request_stop(self) -> None:
        self.stop.set()

    @property
    def healthy(self) -> bool:
        return not self._failed and all(s.alive for s in self.health.values())

    def _ended(self, name: str, task: asyncio.Task[Any]) -> None:
        state = self.health[name]
        state.alive = False
        if task.cancelled():
            if not self.stop.is_set():
                state.error = "cancelled"
                self._failed.append(name)
                log.critical("part %s was cancelled; stopping %s", name, self.name)
        else:
            exc = task.exception()
            if exc is not None:
                state.error = f"{type(exc).__name__}: {exc}"
                self._failed.append(name)
                log.critical(
                    "part %s died; stopping %s",
                    name,
                    self.name,
                    exc_info=(type(exc), exc, exc.__traceback__),
                )
            elif not self.stop.is_set():
                state.error = "returned while the process was running"
                self._failed.append(name)
                log.critical("part %s ended unexpectedly; stopping %s", name, self.name)
        self.stop.set()

    async def run(self, *, signals: bool = True, grace_s: float = STOP_GRACE_S) -> int:
        """Wait for a stop, let the parts finish (cancel them after `grace_s`), run the closers.

        Returns EXIT_OK after a requested stop, EXIT_PART_DIED when a part died.
        """
        loop = asyncio.get_running_loop()
        if signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.stop.set)
        try:
            await self.stop.wait()
            pending = [t for t in self._tasks.values() if not t.done()]
            if pending:
                _, late = await asyncio.wait(pending, timeout=grace_s)
                for task in late:
                    log.warning(
                        "part %s did not stop within %.0fs; cancelling", task.get_name(), grace_s
                    )
                    task.cancel()
                if late:
                    await asyncio.wait(late)
        finally:
            for closer in reversed(self._closers):
                try:
                    await closer()
                except Exception:
                    log.exception("closing %s failed", self.name)
            if signals:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
        return EXIT_PART_DIED if self._failed else EXIT_OK
