"""The harness's own deployment: a private stack — `single` (`DevStack`: one Postgres, one Kafka
broker, one ZooKeeper server) or `replicated` (`ReplicatedStack`: three brokers, a ZooKeeper
ensemble, a primary with a synchronous standby) — in its own directory and ports, and the
tickwheel processes it starts. Nothing here touches a service or process it did not start;
`close` stops all of it and is called from a `finally`.

Every process gets every address of its stack. Those named in `proxied` reach Postgres through
a commit-cutting proxy of the harness's (proxy.py), one per Postgres node, for the
`dropped_reply_*` faults; a multi-host DSN lists the proxies instead of the nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import zoneinfo
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from tickwheel import broken
from tickwheel.bench.chaos.checker import WORKER_DIED, WORKER_STOPPED
from tickwheel.bench.chaos.proxy import CommitCutProxy, CommitCutter
from tickwheel.bench.handlers import DIR_ENV, EXECUTIONS_FILE
from tickwheel.bench.supervisor import Child, Ending, Supervisor
from tickwheel.config import Settings, load_settings
from tickwheel.db import DB_ERRORS
from tickwheel.stack import DevStack
from tickwheel.stack.replicated import ReplicatedPorts, ReplicatedStack
from tickwheel.topics import Topics

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")  # `db migrate` of the private stack
PREFIX = "chaos"
SHARDS = 8
PARTITIONS = 4
ZK_SESSION_MS = 4000  # the private ZooKeeper's minimum (2 x its 500 ms... bounded at 1 s min)
KAFKA_SESSION_MS = 6000  # the smallest consumer group session the settings accept
INTAKE_STALL_S = 20  # seconds a stalled registry intake waits before it exits (floor: 10)
WORKER_STALL_S = 20  # the same for a worker (its exit shows in the round's exited_on_their_own)
SINGLE, REPLICATED = "single", "replicated"
STACKS = (SINGLE, REPLICATED)
DB_NAME = "tickwheel"


@dataclass(frozen=True)
class Ports:
    # Above Linux's default ephemeral range (32768-60999): a port in it can be taken at any
    # moment by some process's outgoing connection, and a restarted service then cannot bind
    # it (a run failed so when Kafka's port was 60092).
    pg: int = 61432
    kafka: int = 61092
    kafka_controller: int = 61093
    zk: int = 61181


# The replicated stack's 17 ports, above the ephemeral range too (order: ReplicatedPorts.of).
REPLICATED_PORTS = ReplicatedPorts.of(range(62100, 62117))


@dataclass
class Deployment:
    """Private services and the processes of one chaos run."""

    root: Path
    ports: Ports | ReplicatedPorts
    echo: object = print
    broken: frozenset[str] = frozenset()  # test-only broken variants every process runs
    zone_dir: Path | None = None  # zones of the harness's own, read before the system's
    dispatch_window: int | None = None  # TICKWHEEL_TENANT_DISPATCH_WINDOW (None: the default)
    stack: DevStack | ReplicatedStack | None = None
    _procs: Supervisor | None = None  # made once the private stack is up (its env needs it)
    cutters: dict[str, CommitCutter] = field(default_factory=dict)
    _proxies: list[CommitCutProxy] = field(default_factory=list)
    _proxy_dsn: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.ports, ReplicatedPorts):
            self.stack = ReplicatedStack(self.settings, self.ports, echo=self._say)
        else:
            self.stack = DevStack(self.settings, echo=self._say)

    @property
    def kind(self) -> str:
        return REPLICATED if isinstance(self.ports, ReplicatedPorts) else SINGLE

    @property
    def settings(self) -> Settings:
        update: dict[str, object] = {
            "dsn": None,
            "kafka": None,
            "zk": None,
            "devstack_dir": self.root,
            "topic_partitions": PARTITIONS,
            "topic_prefix": PREFIX,
        }
        if isinstance(self.ports, Ports):
            update.update(
                dev_pg_port=self.ports.pg,
                dev_kafka_port=self.ports.kafka,
                dev_kafka_controller_port=self.ports.kafka_controller,
                dev_zk_port=self.ports.zk,
            )
        return load_settings().model_copy(update=update)

    @property
    def replicated(self) -> ReplicatedStack:
        if not isinstance(self.stack, ReplicatedStack):
            raise RuntimeError("this fault needs the replicated stack (--stack replicated)")
        return self.stack

    @property
    def single(self) -> DevStack:
        if not isinstance(self.stack, DevStack):
            raise RuntimeError("this fault needs the single-node stack (--stack single)")
        return self.stack

    @property
    def dsn(self) -> str:
        if isinstance(self.stack, ReplicatedStack):
            return self.stack.dsn
        return self.settings.effective_dsn

    @property
    def kafka(self) -> str:
        if isinstance(self.stack, ReplicatedStack):
            return self.stack.kafka
        return self.settings.effective_kafka

    @property
    def zk(self) -> str:
        if isinstance(self.stack, ReplicatedStack):
            return self.stack.zk
        return self.settings.effective_zk

    @property
    def topics(self) -> Topics:
        return Topics(PREFIX)

    @property
    def handler_log(self) -> Path:
        return self.root / EXECUTIONS_FILE

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWHEEL_")}
        env.update(
            {
                "TICKWHEEL_DSN": self.dsn,
                "TICKWHEEL_KAFKA": self.kafka,
                "TICKWHEEL_ZK": self.zk,
                "TICKWHEEL_TOPIC_PREFIX": PREFIX,
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
                "TICKWHEEL_INTAKE_REQUIRE_SIGNATURE": "false",  # its only producer: us, unsigned
                # A stalled intake exits at this (the harness restarts it at once, as a
                # supervisor would), well inside a round's 60 s wait for its registrations.
                "TICKWHEEL_INTAKE_STALL_S": str(INTAKE_STALL_S),
                "TICKWHEEL_WORKER_STALL_S": str(WORKER_STALL_S),
                DIR_ENV: str(self.root),
            }
        )
        if self.broken:
            env[broken.ENV] = ",".join(sorted(self.broken))
        if self.dispatch_window is not None:
            env["TICKWHEEL_TENANT_DISPATCH_WINDOW"] = str(self.dispatch_window)
        if self.zone_dir is not None:
            env["PYTHONTZPATH"] = os.pathsep.join([str(self.zone_dir), *zoneinfo.TZPATH])
        return env

    # the private stack ---------------------------------------------------------------------

    def start_stack(self, jars_from: Path | None) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        jars = self.root / "jars"
        if jars_from is not None and not jars.exists() and (jars_from / ".pom-digest").is_file():
            jars.symlink_to(jars_from.resolve(), target_is_directory=True)
        assert self.stack is not None
        self.stack.up()
        out = subprocess.run(
            [TICKWHEEL, "db", "migrate"], env=self.env(), capture_output=True, text=True
        )
        if out.returncode != 0:
            raise RuntimeError(f"migrating the private database failed: {out.stderr.strip()}")

    def _say(self, line: str) -> None:
        if callable(self.echo):
            self.echo(line)

    # commit-cutting proxies -------------------------------------------------------------------

    def postgres_ports(self) -> list[int]:
        if isinstance(self.ports, ReplicatedPorts):
            return list(self.ports.pg)
        return [self.ports.pg]

    async def start_proxies(self, names: list[str]) -> None:
        """Put each named process behind proxies of its own (one per Postgres node), sharing
        one cutter; call before the process starts."""
        for name in names:
            cutter = self.cutters.setdefault(name, CommitCutter())
            ports = []
            for port in self.postgres_ports():
                proxy = CommitCutProxy(cutter, ("127.0.0.1", port))
                ports.append(await proxy.start())
                self._proxies.append(proxy)
            hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
            dsn = f"postgresql://tickwheel@{hosts}/{DB_NAME}"
            if isinstance(self.ports, ReplicatedPorts):
                dsn += "?target_session_attrs=read-write"
            self._proxy_dsn[name] = dsn

    async def close_proxies(self) -> None:
        for proxy in self._proxies:
            await proxy.close()

    # processes -------------------------------------------------------------------------------

    @property
    def procs(self) -> Supervisor:
        if self._procs is None:
            self._procs = Supervisor(self.env(), self.root / "proc-logs", inherit=False)
        return self._procs

    def spawn(self, name: str, argv: list[str], **extra_env: str) -> Child:
        if name in self._proxy_dsn:  # every incarnation of a proxied process keeps its proxy
            extra_env = {"TICKWHEEL_DSN": self._proxy_dsn[name], **extra_env}
        return self.procs.start(name, argv, extra_env)

    def spawn_scheduler(self, name: str, **extra_env: str) -> Child:
        return self.spawn(name, ["scheduler", "--id", name], **extra_env)

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

    def dump_stacks(self) -> list[Path]:
        """The running processes' stacks beside their logs (Supervisor.dump_stacks)."""
        return [] if self._procs is None else self._procs.dump_stacks()

    def stop_processes(self) -> None:
        if self._procs is not None:
            with contextlib.suppress(Exception):
                self._procs.stop()

    def reset_processes(self) -> None:
        """Forget the processes of an earlier run (stopped), so the next ones start with the
        environment as it is now (broken variants, zones), behind fresh proxies."""
        self.stop_processes()
        self._procs = None
        self.cutters.clear()
        self._proxies.clear()
        self._proxy_dsn.clear()

    def close(self) -> None:
        """Stop every process, then the private services: always, also after Ctrl-C."""
        self.stop_processes()
        if self.stack is not None:
            self.stack.down()

    # database --------------------------------------------------------------------------------

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record]:
        """Run one statement of the harness's (each is a read or a write that may be repeated),
        trying again while Postgres restarts or fails over (no writable node yet)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = await asyncpg.connect(self.dsn, timeout=5)
                try:
                    return list(await conn.fetch(query, *args, timeout=30))
                finally:
                    await conn.close(timeout=5)
            except DB_ERRORS:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
