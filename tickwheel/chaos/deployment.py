"""The harness's own deployment: a private stack (`DevStack` in its own directory and ports)
and the tickwheel processes it starts. Nothing here touches a service or process it did not
start; `close` stops all of it and is called from a `finally`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from tickwheel.chaos.checker import WORKER_DIED, WORKER_STOPPED
from tickwheel.chaos.handlers import LOG_ENV, WORKER_ENV
from tickwheel.config import Settings, load_settings
from tickwheel.stack import DevStack
from tickwheel.topics import Topics

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")
SHARDS = 8
ZK_SESSION_MS = 4000  # the private ZooKeeper's minimum (2 x its 500 ms... bounded at 1 s min)
KAFKA_SESSION_MS = 6000  # the smallest consumer group session the settings accept
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class Ports:
    # Above Linux's default ephemeral range (32768-60999): a port in it can be taken at any
    # moment by some process's outgoing connection, and a restarted service then cannot bind
    # it (a run failed so when Kafka's port was 60092).
    pg: int = 61432
    kafka: int = 61092
    kafka_controller: int = 61093
    zk: int = 61181


@dataclass
class Deployment:
    """Private services and the processes of one chaos run."""

    root: Path
    ports: Ports
    echo: object = print
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    stack: DevStack | None = None
    # Every process that ended, by pid: killed or exited on its own (WORKER_DIED), or stopped
    # by SIGTERM (WORKER_STOPPED). The checker attributes re-executions with it.
    ended: dict[int, str] = field(default_factory=dict)

    @property
    def settings(self) -> Settings:
        base = load_settings()
        return base.model_copy(
            update={
                "dsn": None,
                "kafka": None,
                "zk": None,
                "devstack_dir": self.root,
                "dev_pg_port": self.ports.pg,
                "dev_kafka_port": self.ports.kafka,
                "dev_kafka_controller_port": self.ports.kafka_controller,
                "dev_zk_port": self.ports.zk,
                "topic_partitions": 4,
                "topic_prefix": "chaos",
            }
        )

    @property
    def dsn(self) -> str:
        return self.settings.effective_dsn

    @property
    def topics(self) -> Topics:
        return Topics("chaos")

    @property
    def handler_log(self) -> Path:
        return self.root / "executions.log"

    def env(self) -> dict[str, str]:
        s = self.settings
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWHEEL_")}
        env.update(
            {
                "TICKWHEEL_DSN": s.effective_dsn,
                "TICKWHEEL_KAFKA": s.effective_kafka,
                "TICKWHEEL_ZK": s.effective_zk,
                "TICKWHEEL_TOPIC_PREFIX": "chaos",
                "TICKWHEEL_SHARDS": str(SHARDS),
                "TICKWHEEL_TICK_MS": "50",
                "TICKWHEEL_HORIZON_S": "10",
                "TICKWHEEL_RESYNC_S": "3",
                "TICKWHEEL_SWEEP_INTERVAL_MS": "500",
                "TICKWHEEL_PUBLISH_LEASE_S": "5",
                "TICKWHEEL_LEASE_S": "3",
                "TICKWHEEL_ZK_SESSION_TIMEOUT_MS": str(ZK_SESSION_MS),
                "TICKWHEEL_KAFKA_SESSION_TIMEOUT_MS": str(KAFKA_SESSION_MS),
                "TICKWHEEL_SCHEDULER_DB_CONNECTIONS": "4",
                "TICKWHEEL_WORKER_GRACE_S": "2",
                "TICKWHEEL_WORKER_CONCURRENCY": "16",
                LOG_ENV: str(self.handler_log),
            }
        )
        return env

    # the private stack ---------------------------------------------------------------------

    def start_stack(self, jars_from: Path | None) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        jars = self.root / "jars"
        if jars_from is not None and not jars.exists() and (jars_from / ".pom-digest").is_file():
            jars.symlink_to(jars_from.resolve(), target_is_directory=True)
        self.stack = DevStack(self.settings, echo=lambda line: self._say(line))
        self.stack.up()
        out = subprocess.run(
            [TICKWHEEL, "db", "migrate"], env=self.env(), capture_output=True, text=True
        )
        if out.returncode != 0:
            raise RuntimeError(f"migrating the private database failed: {out.stderr.strip()}")

    def _say(self, line: str) -> None:
        if callable(self.echo):
            self.echo(line)

    # processes -------------------------------------------------------------------------------

    def spawn(self, name: str, argv: list[str], **extra_env: str) -> subprocess.Popen[bytes]:
        logs = self.root / "proc-logs"
        logs.mkdir(exist_ok=True)
        env = {**self.env(), **extra_env, WORKER_ENV: name}
        with (logs / f"{name}.log").open("ab") as sink:
            proc = subprocess.Popen(
                [TICKWHEEL, *argv],
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C of the harness reaches only the harness
            )
        self.procs[name] = proc
        return proc

    def spawn_scheduler(self, name: str) -> subprocess.Popen[bytes]:
        return self.spawn(name, ["scheduler", "--id", name])

    def spawn_worker(self, name: str, **extra_env: str) -> subprocess.Popen[bytes]:
        argv = ["worker", "--handlers", "tickwheel.chaos.handlers", "--id", name]
        return self.spawn(name, argv, **extra_env)

    def spawn_registry(self, name: str = "registry") -> subprocess.Popen[bytes]:
        return self.spawn(name, ["registry", "--no-http"])

    def signal(self, name: str, sig: int) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.kill(proc.pid, sig)

    def kill(self, name: str) -> None:
        """kill -9 a process the harness started, and reap it."""
        self.signal(name, signal.SIGKILL)
        self.procs[name].wait(10)
        self.ended[self.procs[name].pid] = WORKER_DIED

    def stop(self, name: str) -> int | None:
        """SIGTERM (after SIGCONT, in case it is paused), then SIGKILL past the grace."""
        proc = self.procs.pop(name, None)
        if proc is None:
            return None
        if proc.poll() is not None:
            self.ended[proc.pid] = WORKER_DIED
            return proc.returncode
        self.ended[proc.pid] = WORKER_STOPPED
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
            os.kill(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.ended[proc.pid] = WORKER_DIED
            proc.kill()
            return proc.wait(10)

    def dead(self) -> dict[str, int]:
        """Processes that exited on their own: name -> exit code."""
        exited = {n: p for n, p in self.procs.items() if p.poll() is not None}
        for proc in exited.values():
            self.ended[proc.pid] = WORKER_DIED
        return {n: p.returncode for n, p in exited.items()}

    def log_tail(self, name: str, lines: int = 5) -> str:
        path = self.root / "proc-logs" / f"{name}.log"
        if not path.is_file():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        """Stop every process, then the private services: always, also after Ctrl-C."""
        for name in list(self.procs):
            with contextlib.suppress(Exception):
                self.stop(name)
        if self.stack is not None:
            self.stack.down()

    # database --------------------------------------------------------------------------------

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record]:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = await asyncpg.connect(self.dsn, timeout=5)
                break
            except (OSError, asyncpg.PostgresError):  # Postgres restarting: try again
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        try:
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()
