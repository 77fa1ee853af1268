"""The JVM servers of the stack (Kafka, ZooKeeper): found, spawned detached, tracked by PID file.

A JVM is ours while its PID file names a live process whose command line contains the stack's
root directory (every classpath and config we pass lies under it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tickwheel.stack.errors import INSTALL_HINTS, StackError
from tickwheel.stack.procs import cmdline, pid_alive, read_pid, stop_pid

JAVA_MIN_MAJOR = 17


def find_java() -> str:
    java = shutil.which("java")
    if not java:
        raise StackError("`java` not found on PATH; " + INSTALL_HINTS["java"])
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):  # "1.8" style
        major = int(match.group(2))
    if major < JAVA_MIN_MAJOR:
        raise StackError(
            f"`java` is version {major or 'unknown'}, Kafka 4 needs 17+; " + INSTALL_HINTS["java"]
        )
    return java


class Jvm:
    """One detached JVM named `name`: `<root>/run/<name>.pid`, `<root>/logs/<name>.log`."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.root = root
        self.pid_file = root / "run" / f"{name}.pid"
        self.log = root / "logs" / f"{name}.log"

    def pid(self) -> int | None:
        """The PID of our running JVM, or None."""
        pid = read_pid(self.pid_file)
        if pid is not None and pid_alive(pid) and str(self.root) in cmdline(pid):
            return pid
        return None

    def spawn(
        self, classpath: str, main_class: str, args: list[str], heap: str, extra_props: list[str]
    ) -> None:
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            find_java(),
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            *extra_props,
            "-cp",
            classpath,
            main_class,
            *args,
        ]
        with open(self.log, "ab") as log:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{proc.pid}\n")

    def stop(self) -> bool:
        """Stop the JVM its PID file names, if it is still ours; forget the PID file."""
        pid = read_pid(self.pid_file)
        if pid is None:
            return False
        stopped = stop_pid(pid, str(self.root))
        self.pid_file.unlink(missing_ok=True)
        return stopped
