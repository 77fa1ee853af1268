"""The peers: how each is built, migrated, loaded with N jobs and run.

Each peer is a folder of sources beside this module (`graphile/`, `river/`), copied into the
user's cache (`$XDG_CACHE_HOME/tickwheel/peers/<folder>`) and built there once per version of
those sources, since the installed package may be read-only. A peer's worker process takes a
records file and a ready file: its handler's first act appends one 12-byte record per run
(little-endian uint32 job index, int64 unix microseconds), and it writes the ready file, holding
the peer's version, once it is up.

The settings are the peers' tuned ones, as their users would run a burst: graphile-worker with
a local queue of 500 and batched completions (its defaults fetch one job at a time), River
with a 2 ms fetch cooldown and a 20 ms fetch poll (its defaults: 100 ms and 1 s).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

BUILD_TIMEOUT_S = 900.0
STEP_TIMEOUT_S = 600.0
STAMP = ".tickwheel-built"


class PeerError(RuntimeError):
    """A peer could not be built or run; the message says which step and shows its output."""


@dataclass(frozen=True)
class Peer:
    """One system to measure beside tickwheel."""

    name: str
    folder: str
    tools: tuple[str, ...]
    settings: str

    def missing_tools(self) -> list[str]:
        return [tool for tool in self.tools if shutil.which(tool) is None]

    def home(self) -> Path:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return cache / "tickwheel" / "peers" / self.folder

    def build(self) -> Path:
        """The built peer's folder; builds it when its sources changed since the last build."""
        sources = resources.files("tickwheel.bench.peers") / self.folder
        files = sorted(
            (f.name, f.read_bytes())
            for f in sources.iterdir()
            if f.is_file() and not f.name.endswith((".py", ".pyc"))
        )
        digest = hashlib.sha256(b"".join(name.encode() + data for name, data in files))
        home = self.home()
        stamp = home / STAMP
        if stamp.exists() and stamp.read_text() == digest.hexdigest():
            return home
        home.mkdir(parents=True, exist_ok=True)
        for name, data in files:
            (home / name).write_bytes(data)
        for command in self.build_commands():
            _step(command, home, f"building {self.name}", BUILD_TIMEOUT_S)
        stamp.write_text(digest.hexdigest())
        return home

    def build_commands(self) -> list[list[str]]:
        raise NotImplementedError

    def migrate(self, home: Path, dsn: str) -> None:
        raise NotImplementedError

    def add_command(self, home: Path, dsn: str, jobs: int, t0_ms: int) -> list[str]:
        raise NotImplementedError

    def worker_command(self, home: Path, dsn: str, records: Path, ready: Path) -> list[str]:
        raise NotImplementedError


GRAPHILE_CONCURRENCY = 24
GRAPHILE_LOCAL_QUEUE = 500
GRAPHILE_POLL_MS = 100


class Graphile(Peer):
    def build_commands(self) -> list[list[str]]:
        return [["npm", "ci", "--no-audit", "--no-fund", "--silent"]]

    def migrate(self, home: Path, dsn: str) -> None:
        tool = str(home / "node_modules" / ".bin" / "graphile-worker")
        _step([tool, "--schema-only", "-c", dsn], home, "creating graphile-worker's schema")

    def add_command(self, home: Path, dsn: str, jobs: int, t0_ms: int) -> list[str]:
        return ["node", "add.mjs", dsn, str(jobs), str(t0_ms)]

    def worker_command(self, home: Path, dsn: str, records: Path, ready: Path) -> list[str]:
        return [
            "node", "worker.mjs", dsn, str(records), str(ready),
            str(GRAPHILE_CONCURRENCY), str(GRAPHILE_LOCAL_QUEUE), str(GRAPHILE_POLL_MS),
        ]  # fmt: skip


RIVER_MAX_WORKERS = 200
RIVER_FETCH_COOLDOWN = "2ms"
RIVER_FETCH_POLL = "20ms"
RIVER_POOL = 20


class River(Peer):
    def build_commands(self) -> list[list[str]]:
        return [["go", "build", "-o", "riverpeer", "."]]

    def migrate(self, home: Path, dsn: str) -> None:
        _step([str(home / "riverpeer"), "migrate", _pooled(dsn)], home, "migrating River")

    def add_command(self, home: Path, dsn: str, jobs: int, t0_ms: int) -> list[str]:
        return [str(home / "riverpeer"), "add", _pooled(dsn), str(jobs), str(t0_ms)]

    def worker_command(self, home: Path, dsn: str, records: Path, ready: Path) -> list[str]:
        return [
            str(home / "riverpeer"), "work", _pooled(dsn), str(records), str(ready),
            str(RIVER_MAX_WORKERS), RIVER_FETCH_COOLDOWN, RIVER_FETCH_POLL,
        ]  # fmt: skip


PEERS: dict[str, Peer] = {
    "graphile": Graphile(
        "graphile-worker",
        "graphile",
        ("node", "npm"),
        f"concurrency {GRAPHILE_CONCURRENCY}, local queue {GRAPHILE_LOCAL_QUEUE}, "
        f"poll {GRAPHILE_POLL_MS} ms, batched completions",
    ),
    "river": River(
        "River",
        "river",
        ("go",),
        f"{RIVER_MAX_WORKERS} workers, fetch cooldown {RIVER_FETCH_COOLDOWN}, "
        f"fetch poll {RIVER_FETCH_POLL}, pool {RIVER_POOL}",
    ),
}


def _pooled(dsn: str) -> str:
    """River's pgx DSN: the pool's size is a parameter of it."""
    return f"{dsn}{'&' if '?' in dsn else '?'}pool_max_conns={RIVER_POOL}"


def _step(command: list[str], cwd: Path, doing: str, timeout_s: float = STEP_TIMEOUT_S) -> None:
    """Run one build or setup step; its failure is a `PeerError` with the output's tail."""
    try:
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PeerError(f"{doing}: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise PeerError(f"{doing} failed (exit {done.returncode}): " + " | ".join(tail))
