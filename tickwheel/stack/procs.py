"""Process bookkeeping for the services `tickwheel dev` starts: PID files, liveness, stopping
exactly what we started (PIDs get reused, so the command line must still name our config)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

STOP_TIMEOUT_S = 30  # seconds a stopped service gets before SIGKILL
HEALTH_PROBE_TIMEOUT_S = 5.0  # seconds one health probe of a service may take


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is not running.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def wait_until(check: Callable[[], bool], timeout_s: float, interval_s: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval_s)
    return check()


def stop_pid(pid: int, marker: str) -> bool:
    """SIGTERM then SIGKILL `pid`, but only if it is still the process we started."""
    if not pid_alive(pid) or marker not in cmdline(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    if not wait_until(lambda: not pid_alive(pid), STOP_TIMEOUT_S):
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not pid_alive(pid), 5)
    return True


def tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text[-lines:])


def reason(exc: BaseException) -> str:
    """An exception as the first line of `Name: message`: what a failed probe reports."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
