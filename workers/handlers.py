"""The handler API: `@handler("name")` on `f(ctx, payload)`, and `PermanentError`.

    from tickwheel import handler, PermanentError

    @handler("billing.send_invoice")
    async def send_invoice(ctx, payload):      # or a plain `def`: it runs on a thread pool
        if payload.get("customer") is None:
            raise PermanentError("payload has no customer")   # dead at once, to the DLQ
        await invoices.send(payload["customer"], idempotency_key=ctx.run_key)

Any other exception is retryable until the run's `max_attempts`. A handler is registered when
its module is imported; `tickwheel worker --handlers module[,module]` imports the modules.
The registry is process-wide (a decorator at import time has nowhere else to put it); a worker
reads it through `resolve`.
"""

from __future__ import annotations

import datetime as dt
import importlib
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from tickwheel.clock import datetime_to_ms, ms_to_datetime

HandlerFn = Callable[["Context", Any], Any]
F = TypeVar("F", bound=HandlerFn)

_HANDLERS: dict[str, HandlerFn] = {}


class PermanentError(Exception):
    """Raised by a handler: do not retry this run; it goes to `dead` and the DLQ at once."""


class HandlerLoadError(ValueError):
    """A `--handlers` module that cannot be imported, or two handlers with one name."""


class Context:
    """What a handler knows about the run it executes (read-only).

    `run_key`: `<tenant>/<job_id>@<unix_ms>`, also the idempotency key to pass downstream;
    `tenant`, `job_id`; `scheduled_at`: the scheduled instant, an aware UTC datetime;
    `attempt`: 1 on the first dispatch. A worker makes one per run: `scheduled_at` is built
    only when a handler asks for it.
    """

    __slots__ = ("_attempt", "_job_id", "_run_key", "_scheduled_at", "_scheduled_ms", "_tenant")

    def __init__(
        self, run_key: str, tenant: str, job_id: str, scheduled_at: dt.datetime, attempt: int
    ) -> None:
        self._run_key, self._tenant, self._job_id = run_key, tenant, job_id
        self._scheduled_ms = datetime_to_ms(scheduled_at)
        self._scheduled_at: dt.datetime | None = scheduled_at
        self._attempt = attempt

    @classmethod
    def of_run(
        cls, run_key: str, tenant: str, job_id: str, scheduled_ms: int, attempt: int
    ) -> Context:
        ctx = cls.__new__(cls)
        ctx._run_key, ctx._tenant, ctx._job_id = run_key, tenant, job_id
        ctx._scheduled_ms, ctx._scheduled_at, ctx._attempt = scheduled_ms, None, attempt
        return ctx

    @property
    def run_key(self) -> str:
        return self._run_key

    @property
    def tenant(self) -> str:
        return self._tenant

    @property
    def job_id(self) -> str:
        return self._job_id

    @property
    def scheduled_at(self) -> dt.datetime:
        if self._scheduled_at is None:
            self._scheduled_at = ms_to_datetime(self._scheduled_ms)
        return self._scheduled_at

    @property
    def attempt(self) -> int:
        return self._attempt

    def __repr__(self) -> str:
        return f"Context(run_key={self._run_key!r}, attempt={self._attempt})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Context):
            return NotImplemented
        return (self._run_key, self._attempt) == (other._run_key, other._attempt)

    def __hash__(self) -> int:
        return hash((self._run_key, self._attempt))


def handler(name: str) -> Callable[[F], F]:
    """Register `fn` as the handler of jobs whose `handler` is `name`."""
    if not isinstance(name, str) or not name:
        raise HandlerLoadError("a handler name must be a non-empty string")

    def register(fn: F) -> F:
        existing = _HANDLERS.get(name)
        if existing is not None and existing is not fn:
            raise HandlerLoadError(
                f"handler {name!r} is defined twice: {_where(existing)} and {_where(fn)}"
            )
        _HANDLERS[name] = fn
        return fn

    return register


def resolve(name: str) -> HandlerFn | None:
    return _HANDLERS.get(name)


def is_async(fn: HandlerFn) -> bool:
    return inspect.iscoroutinefunction(fn)


def resolved(name: str) -> tuple[HandlerFn, bool] | None:
    """The handler of `name` and whether it is async, or None: `resolve` and `is_async` at
    once, remembered per function (a worker asks once per run)."""
    fn = _HANDLERS.get(name)
    if fn is None:
        return None
    known = _ASYNC.get(fn)
    if known is None:
        known = _ASYNC[fn] = inspect.iscoroutinefunction(fn)
    return fn, known


_ASYNC: dict[HandlerFn, bool] = {}


def names() -> list[str]:
    return sorted(_HANDLERS)


def load_modules(modules: Iterable[str]) -> list[str]:
    """Import each module (registering its handlers); return the handler names now known."""
    for module in modules:
        try:
            importlib.import_module(module)
        except HandlerLoadError:
            raise
        except Exception as exc:
            raise HandlerLoadError(
                f"--handlers: cannot import {module!r}: {type(exc).__name__}: {exc}"
            ) from None
    return names()


def _where(fn: HandlerFn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"
