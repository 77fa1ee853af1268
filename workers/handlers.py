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
from dataclasses import dataclass
from typing import Any, TypeVar

HandlerFn = Callable[["Context", Any], Any]
F = TypeVar("F", bound=HandlerFn)

_HANDLERS: dict[str, HandlerFn] = {}


class PermanentError(Exception):
    """Raised by a handler: do not retry this run; it goes to `dead` and the DLQ at once."""


class HandlerLoadError(ValueError):
    """A `--handlers` module that cannot be imported, or two handlers with one name."""


@dataclass(frozen=True)
class Context:
    """What a handler knows about the run it executes."""

    run_key: str  # <tenant>/<job_id>@<unix_ms>: also the idempotency key to pass downstream
    tenant: str
    job_id: str
    scheduled_at: dt.datetime  # aware, UTC
    attempt: int  # 1 on the first dispatch


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
