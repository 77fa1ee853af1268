"""The child processes a harness runs (`tickwheel scheduler`, `worker`, `registry`, …), and
free ports for them: one supervisor for the benchmarks, the chaos harness and the demo.

Each child is started in a session of its own (a Ctrl-C of the harness reaches only the
harness, which then stops its children in order), with the harness's environment plus
`TICKWHEEL_BENCH_WORKER=<its name>` (how the recording handlers name the process,
handlers.py), and its output appended to `<log_dir>/<name>.log`.

A child ends in one of three ways, and the supervisor remembers which by pid (`ended`), so
that a checker can tell a lapse it caused from one nobody explains:

    stopped   `stop`: SIGCONT (it may be paused), SIGTERM, then SIGKILL after the grace
    killed    `kill`: SIGKILL, as a crash would (its work is left to leases and redelivery)
    died      it exited on its own; `check` raises naming it with the tail of its log, and
              `exited` hands such children to a harness that restarts them

`Supervisor` is a context manager: on the way out, whatever happened, every child is stopped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType

# Longer than a worker's own drain on SIGTERM (TICKWHEEL_WORKER_GRACE_S, default 20 s) and its
# closing: a child still alive after it is hung.
STOP_GRACE_S = 30.0  # seconds between SIGTERM and SIGKILL
REAP_TIMEOUT_S = 10.0  # seconds a SIGKILLed child may take to be reaped
LOG_TAIL_BYTES = 2000
STACK_DUMP_TIMEOUT_S = 20.0  # seconds one `py-spy dump` may take
PAGE_KIB = 1024
WORKER_NAME_ENV = "TICKWHEEL_BENCH_WORKER"  # each child's name, read by handlers.py


class SupervisorError(RuntimeError):
    """A child process ended while the harness needed it."""


class Ending(StrEnum):
    STOPPED = "stopped"
    KILLED = "killed"
    DIED = "died"


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that were free a moment ago (bound at once, released)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    return free_ports(1)[0]


def tickwheel_command() -> list[str]:
    """The `tickwheel` console script of this interpreter's environment."""
    beside = Path(sys.executable).parent / "tickwheel"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("tickwheel")
    if found is None:
        raise SupervisorError("the `tickwheel` command is not installed beside this Python")
    return [found]


@dataclass
class Child:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    metrics_port: int | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int | None = None) -> str:
        """The end of its log: the last LOG_TAIL_BYTES, or the last `lines` lines."""
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        text = data[-LOG_TAIL_BYTES:].decode(errors="replace")
        return text if lines is None else "\n".join(text.splitlines()[-lines:])


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


class Supervisor:
    """The running children of one harness, by name (a name started again replaces its child)."""

    def __init__(self, env: Mapping[str, str], log_dir: Path, *, inherit: bool = True) -> None:
        """`env` is laid over this process's environment (`inherit`) or used alone."""
        self.env = {**os.environ, **env} if inherit else dict(env)
        self.log_dir = log_dir
        self.children: dict[str, Child] = {}
        self.ended: dict[int, Ending] = {}  # every child that ended, by pid
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(
        self,
        name: str,
        args: list[str],
        extra_env: Mapping[str, str] | None = None,
        metrics_port: int | None = None,
    ) -> Child:
        """`tickwheel ARGS…` as the child `name`."""
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as sink:
            popen = subprocess.Popen(
                [*tickwheel_command(), *args],
                env={**self.env, **(extra_env or {}), WORKER_NAME_ENV: name},
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        child = Child(name, popen, log_path, metrics_port)
        self.children[name] = child
        return child

    def _note_exits(self, names: Collection[str] | None = None) -> list[Child]:
        """Children (of `names`, or all) that ended without the supervisor ending them (now
        noted as died)."""
        found = []
        for child in self.children.values():
            if names is not None and child.name not in names:
                continue
            if child.popen.poll() is not None and child.pid not in self.ended:
                self.ended[child.pid] = Ending.DIED
                found.append(child)
        return found

    def check(self) -> None:
        """Raise `SupervisorError` if a child exited on its own (killed and stopped ones are the
        harness's doing)."""
        for child in self.children.values():
            code = child.popen.poll()
            if code is not None and self.ended.get(child.pid, Ending.DIED) is Ending.DIED:
                raise SupervisorError(
                    f"{child.name} exited with code {code}; its log ({child.log_path}) ends:\n"
                    + child.tail()
                )

    def exited(self, names: Collection[str] | None = None) -> list[Child]:
        """The children (of `names`, or all) that exited on their own since the last call, now
        forgotten, so that the harness may start them again (their exit code:
        `child.popen.returncode`)."""
        found = self._note_exits(names)
        for child in found:
            del self.children[child.name]
        return found

    def signal(self, name: str, sig: int) -> None:
        child = self.children[name]
        if child.alive():
            os.kill(child.pid, sig)

    def kill(self, name: str) -> Child:
        """kill -9 a child, and reap it."""
        child = self.children[name]
        self.signal(name, signal.SIGKILL)
        child.popen.wait(REAP_TIMEOUT_S)
        self.ended.setdefault(child.pid, Ending.KILLED)
        return child

    def stop(self, names: list[str] | None = None, grace_s: float = STOP_GRACE_S) -> dict[str, int]:
        """SIGTERM the (named) children, SIGKILL those still alive after `grace_s`; they are
        forgotten. Returns their exit codes."""
        chosen = [c for n, c in self.children.items() if names is None or n in names]
        self._note_exits()
        for child in chosen:
            if child.alive():
                self.ended[child.pid] = Ending.STOPPED
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGCONT)
                    os.kill(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in chosen:
            try:
                child.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.ended[child.pid] = Ending.KILLED
                child.popen.kill()
                child.popen.wait(REAP_TIMEOUT_S)
        for child in chosen:
            del self.children[child.name]
        return {c.name: c.popen.returncode for c in chosen}

    def dump_stacks(self) -> list[Path]:
        """Each running child's Python stacks, every thread (`py-spy dump`), written to
        `<name>.stacks` beside its log before a failed run stops them: what a hung loop was
        waiting on. None without py-spy (on PATH or beside this interpreter)."""
        beside = str(Path(sys.executable).parent)
        spy = shutil.which("py-spy") or shutil.which("py-spy", path=beside)
        if spy is None:
            return []
        written = []
        for name, child in self.children.items():
            if not child.alive():
                continue
            path = self.log_dir / f"{name}.stacks"
            with path.open("wb") as sink, contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(
                    [spy, "dump", "--pid", str(child.pid)],
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    timeout=STACK_DUMP_TIMEOUT_S,
                    check=False,
                )
            written.append(path)
        return written

    def rss(self, prefix: str) -> int:
        """Total resident memory of the running children whose name starts with `prefix`."""
        return sum(
            rss_bytes(c.pid) for n, c in self.children.items() if n.startswith(prefix) and c.alive()
        )

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each running child, by name."""
        return {n: cpu_seconds(c.pid) for n, c in self.children.items() if c.alive()}

    def pids(self) -> list[int]:
        return [c.pid for c in self.children.values() if c.alive()]

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
