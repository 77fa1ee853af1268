"""ZooKeeper 3.9 for the local stack: one standalone server for `tickwheel dev`, or an
ensemble of them for the chaos harness's replicated stack (`replicated.py`); their config,
their start, what "healthy" means, and which server leads."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from pathlib import Path

from tickwheel.config import Settings
from tickwheel.stack.jars import Jars
from tickwheel.stack.jvm import Jvm
from tickwheel.stack.procs import HEALTH_PROBE_TIMEOUT_S, reason

ZK_START_TIMEOUT_S = 60

ZK_TICK_MS = 500  # the dev server's tick: the granularity of session expiry
SINGLE_HEAP = "256m"
# In ticks: how long a follower may take to connect and sync to a new leader, and how far
# behind it may fall before it is dropped (5 s and 2.5 s).
INIT_LIMIT_TICKS = 10
SYNC_LIMIT_TICKS = 5


@dataclass(frozen=True)
class ZkServer:
    """One server of an ensemble: its id (`myid`) and its client, quorum and election ports."""

    server_id: int
    port: int
    peer_port: int
    election_port: int


@dataclass(frozen=True)
class ZkEnsemble:
    """The servers of one ensemble: a majority of them keeps it serving."""

    servers: tuple[ZkServer, ...]
    heap: str = "128m"

    @property
    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{z.port}" for z in self.servers)


class ZooKeeper:
    """One ZooKeeper server: `<root>/zookeeper[-<id>]/{zoo.cfg,data/}`, a JVM of its own.

    Without `ensemble` it is the dev stack's standalone server (port from the settings); with
    it, server `server_id` of that ensemble."""

    def __init__(
        self,
        settings: Settings,
        root: Path,
        jars: Jars,
        ensemble: ZkEnsemble | None = None,
        server_id: int | None = None,
    ) -> None:
        self.ensemble = ensemble
        if ensemble is None:
            self.server: ZkServer | None = None
            self.port = settings.dev_zk_port
            self.name = "zookeeper"
        else:
            self.server = next(z for z in ensemble.servers if z.server_id == server_id)
            self.port = self.server.port
            self.name = f"zookeeper-{self.server.server_id}"
        self.home = root / self.name
        self.jars = jars
        self.jvm = Jvm(self.name, root)

    def start(self) -> None:
        if self.jvm.pid() is not None:
            return
        data = self.home / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.home / "zoo.cfg"
        quorum: list[str] = []
        main = "org.apache.zookeeper.server.ZooKeeperServerMain"
        heap = SINGLE_HEAP
        if self.ensemble is not None and self.server is not None:
            (data / "myid").write_text(f"{self.server.server_id}\n")
            quorum = [f"initLimit={INIT_LIMIT_TICKS}", f"syncLimit={SYNC_LIMIT_TICKS}"] + [
                f"server.{z.server_id}=127.0.0.1:{z.peer_port}:{z.election_port}"
                for z in self.ensemble.servers
            ]
            main = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
            heap = self.ensemble.heap
        cfg.write_text(
            "\n".join(
                [
                    # The server expires sessions only at its ticks, so a dead scheduler's
                    # shards move up to one tickTime after its session timeout: keep the tick
                    # short. Session timeouts from 1 s to 60 s are accepted (defaults would be
                    # 2 and 20 ticks).
                    f"tickTime={ZK_TICK_MS}",
                    "minSessionTimeout=1000",
                    "maxSessionTimeout=60000",
                    f"dataDir={data}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "maxClientCnxns=0",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat",
                    "autopurge.purgeInterval=1",
                    *quorum,
                    "",
                ]
            )
        )
        self.jvm.spawn(
            self.jars.classpath("zookeeper"),
            main,
            [str(cfg)],
            heap,
            ["-Dzookeeper.jmx.log4j.disable=true"],
        )


def zk_mode(port: int) -> str | None:
    """The server's role by its `srvr` answer (leader, follower, standalone), or None when it
    does not answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=HEALTH_PROBE_TIMEOUT_S) as s:
            s.sendall(b"srvr")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
    except OSError:
        return None
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def probe_zookeeper(hosts: str) -> str | None:
    """None when a ZooKeeper session can be established."""
    from kazoo.client import KazooClient

    # kazoo logs every refused connection attempt; a probe reports one reason instead.
    quiet = logging.getLogger("tickwheel.devstack.kazoo")
    quiet.propagate = False
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    client = KazooClient(
        hosts=hosts,
        timeout=HEALTH_PROBE_TIMEOUT_S,
        logger=quiet,
        connection_retry={"max_tries": 1},
        command_retry={"max_tries": 1},
    )
    try:
        client.start(timeout=HEALTH_PROBE_TIMEOUT_S)
        client.get_children("/")
    except Exception as exc:
        return reason(exc)
    finally:
        client.stop()
        client.close()
    return None
