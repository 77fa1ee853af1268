"""ZooKeeper 3.9 standalone for the local stack: its config, its start, what "healthy" means."""

from __future__ import annotations

import logging
from pathlib import Path

from tickwheel.config import Settings
from tickwheel.stack.jars import Jars
from tickwheel.stack.jvm import Jvm
from tickwheel.stack.procs import HEALTH_PROBE_TIMEOUT_S, reason

ZK_START_TIMEOUT_S = 60

ZK_TICK_MS = 500  # the dev server's tick: the granularity of session expiry


class ZooKeeper:
    """The stack's ZooKeeper: `<root>/zookeeper/{zoo.cfg,data/}`, a JVM of its own."""

    name = "zookeeper"

    def __init__(self, settings: Settings, root: Path, jars: Jars) -> None:
        self.port = settings.dev_zk_port
        self.home = root / "zookeeper"
        self.jars = jars
        self.jvm = Jvm(self.name, root)

    def start(self) -> None:
        if self.jvm.pid() is not None:
            return
        (self.home / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.home / "zoo.cfg"
        cfg.write_text(
            # The server expires sessions only at its ticks, so a dead scheduler's shards move
            # up to one tickTime after its session timeout: keep the tick short. Session
            # timeouts from 1 s to 60 s are accepted (defaults would be 2 and 20 ticks).
            f"tickTime={ZK_TICK_MS}\n"
            "minSessionTimeout=1000\n"
            "maxSessionTimeout=60000\n"
            f"dataDir={self.home / 'data'}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat\n"
            "autopurge.purgeInterval=1\n"
        )
        self.jvm.spawn(
            self.jars.classpath("zookeeper"),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            [str(cfg)],
            "256m",
            ["-Dzookeeper.jmx.log4j.disable=true"],
        )


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
