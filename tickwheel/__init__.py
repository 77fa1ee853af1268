"""tickwheel: a distributed job scheduler.

Timing is decided in memory (a hierarchical timing wheel per shard), once-ness in Postgres
(fenced lease UPDATEs keyed by run key), and execution by Kafka consumer groups.

The handler API is re-exported here: `from tickwheel import handler, PermanentError`. It is
loaded on first use (module `__getattr__`), so `import tickwheel` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Context", "PermanentError", "__version__", "handler"]

if TYPE_CHECKING:
    from tickwheel.workers.handlers import Context, PermanentError, handler

_HANDLER_API = frozenset({"Context", "PermanentError", "handler"})


def __getattr__(name: str) -> Any:
    if name in _HANDLER_API:
        from tickwheel.workers import handlers

        return getattr(handlers, name)
    raise AttributeError(f"module 'tickwheel' has no attribute {name!r}")
