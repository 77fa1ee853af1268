"""The real processes a benchmark runs (`tickwheel scheduler`, `worker`, `registry`).

Each is a child process with the scratch environment and its stderr (JSON log lines) in a file
of its own. `Fleet` is a context manager: on the way out, whatever happened, every child gets
SIGTERM, then SIGKILL after a grace period. A child that exits while the benchmark still needs
it is an error naming it with the tail of its log.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

STOP_GRACE_S = 20.0  # seconds between SIGTERM and SIGKILL
LOG_TAIL_BYTES = 2000
PAGE_KIB = 1024


class FleetError(RuntimeError):
    """A child process ended while the benchmark needed it."""


def tickwheel_command() -> list[str]:
    """The `tickwheel` console script of this interpreter's environment."""
    beside = Path(sys.executable).parent / "tickwheel"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("tickwheel")
    if found is None:
        raise FleetError("the `tickwheel` command is not installed beside this Python")
    return [found]


@dataclass
class Child:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    def tail(self) -> str:
        try:
            data = self.log_path.read_bytes()[-LOG_TAIL_BYTES:]
        except OSError:
            return ""
        return data.decode(errors="replace")


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (Linux /proc), bytes; 0 when it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * PAGE_KIB
    except (OSError, ValueError, IndexError):
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used (Linux /proc), seconds; 0 when unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def machine_cpu_seconds() -> float:
    """CPU time every core of the machine spent busy (not idle or waiting on I/O), seconds."""
    try:
        ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle, iowait = ticks[3], ticks[4]
    return (sum(ticks[:8]) - idle - iowait) / os.sysconf("SC_CLK_TCK")


class Fleet:
    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = {**os.environ, **env}
        self.log_dir = log_dir
        self.children: list[Child] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, args: list[str], extra_env: dict[str, str] | None = None) -> Child:
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("wb") as sink:
            popen = subprocess.Popen(
                [*tickwheel_command(), *args],
                env={**self.env, **(extra_env or {})},
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        child = Child(name, popen, log_path)
        self.children.append(child)
        return child

    def check(self) -> None:
        for child in self.children:
            code = child.popen.poll()
            if code is not None:
                raise FleetError(
                    f"{child.name} exited with code {code}; its log ({child.log_path}) ends:\n"
                    + child.tail()
                )

    def rss(self, prefix: str) -> int:
        """Total resident memory of the running children whose name starts with `prefix`."""
        return sum(
            rss_bytes(c.popen.pid)
            for c in self.children
            if c.name.startswith(prefix) and c.popen.poll() is None
        )

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each running child, by name."""
        return {c.name: cpu_seconds(c.popen.pid) for c in self.children if c.popen.poll() is None}

    def stop(self, names: list[str] | None = None, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM the (named) running children, SIGKILL those still alive after `grace_s`."""
        chosen = [c for c in self.children if names is None or c.name in names]
        for child in chosen:
            if child.popen.poll() is None:
                child.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in chosen:
            try:
                child.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.popen.kill()
                child.popen.wait()
        self.children = [c for c in self.children if c not in chosen]

    def __enter__(self) -> Fleet:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
