"""The handlers `tickwheel demo` runs its workers with (`--handlers tickwheel.demo_handlers`).

Every execution appends `<run_key> <attempt> <ok|failed>` to `executions.log` in the folder
named by TICKWHEEL_DEMO_DIR: the demo's summary counts executions from this record, not from
the ledger it checks. Lines are short single writes to a file opened for appending, so two
worker processes never interleave inside a line.

`demo.flaky` fails until the file `fixed` exists in that folder (the demo creates it to "fix
the bug" before replaying the dead-letter topic).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tickwheel import handler

DEMO_DIR_ENV = "TICKWHEEL_DEMO_DIR"
EXECUTIONS_FILE = "executions.log"
FIXED_FILE = "fixed"


def _folder() -> Path:
    return Path(os.environ[DEMO_DIR_ENV])


def _note(ctx: Any, outcome: str) -> None:
    line = f"{ctx.run_key} {ctx.attempt} {outcome}\n".encode()
    fd = os.open(_folder() / EXECUTIONS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@handler("demo.record")
def record(ctx: Any, _payload: Any) -> None:
    """Succeeds, and notes the execution."""
    _note(ctx, "ok")


@handler("demo.flaky")
def flaky(ctx: Any, _payload: Any) -> None:
    """Fails (retryably) until the demo has "fixed" it."""
    if not (_folder() / FIXED_FILE).exists():
        _note(ctx, "failed")
        raise RuntimeError("export service rejected the batch (the demo's bug, not fixed yet)")
    _note(ctx, "ok")
