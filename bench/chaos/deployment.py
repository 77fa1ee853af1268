"""The harness's own deployment: a private stack (`DevStack` in its own directory and ports)
and the tickwheel processes it starts. Nothing here touches a service or process it did not
start; `close` stops all of it and is called from a `finally`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from tickwheel.bench.chaos.checker import WORKER_DIED, WORKER_STOPPED
from tickwheel.bench.handlers import DIR_ENV, EXECUTIONS_FILE
from tickwheel.bench.supervisor import Child, Ending, Supervisor
from tickwheel.config import Settings, load_settings
from tickwheel.stack import DevStack
from tickwheel.topics import Topics

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")  # `db migrate` of the private stack
SHARDS = 8
ZK_SESSION_MS = 4000  # the private ZooKeeper's minimum (2 x its 500 ms... bounded at 1 s min)
KAFKA_SESSION_MS = 6000  # the smallest consumer group session the settings accept


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
    stack: DevStack | None = None
    _procs: Supervisor | None = None  # made once the private stack is up (its env needs it)

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
        return self.root / EXECUTIONS_FILE

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
                DIR_ENV: str(self.root),
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

    @property
    def procs(self) -> Supervisor:
        if self._procs is None:
            self._procs = Supervisor(self.env(), self.root / "proc-logs", inherit=False)
        return self._procs

    def spawn(self, name: str, argv: list[str], **extra_env: str) -> Child:
        return self.procs.start(name, argv, extra_env)

    def spawn_scheduler(self, name: str) -> Child:
        return self.spawn(name, ["scheduler", "--id", name])

    def spawn_worker(self, name: str, **extra_env: str) -> Child:
        argv = ["worker", "--handlers", "tickwheel.bench.handlers", "--id", name]
        return self.spawn(name, argv, **extra_env)

    def spawn_registry(self, name: str = "registry") -> Child:
        return self.spawn(name, ["registry", "--no-http"])

    def ended(self) -> dict[int, str]:
        """Every process that ended, by pid, as the checker's causes: stopped by SIGTERM
        (WORKER_STOPPED), or killed or exited on its own (WORKER_DIED)."""
        return {
            pid: WORKER_STOPPED if how is Ending.STOPPED else WORKER_DIED
            for pid, how in self.procs.ended.items()
        }

    def close(self) -> None:
        """Stop every process, then the private services: always, also after Ctrl-C."""
        if self._procs is not None:
            with contextlib.suppress(Exception):
                self._procs.stop()
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
