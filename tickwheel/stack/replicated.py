"""The replicated local stack: what production runs, on one machine, for the chaos harness's
`--stack replicated` (docs/RELIABILITY.md). Not used by `tickwheel dev`.

    Kafka       three KRaft nodes, each broker and controller (combined: three JVMs, not six,
                on a 2-core machine), every topic at replication 3 with
                `min.insync.replicas=2`; a broker that stops heart-beating is fenced after 4 s
    ZooKeeper   a three-server ensemble (tick 500 ms)
    Postgres    a primary and a synchronous streaming standby (`pg_basebackup -R`,
                `synchronous_standby_names = '*'`): a commit returns only once the standby has
                flushed it, so a promoted standby holds every acknowledged commit

Processes get every address: `127.0.0.1:p1,…` for Kafka and ZooKeeper and a multi-host DSN
with `target_session_attrs=read-write`, which connects to whichever node accepts writes.

A failover (`fail_over`) kills the primary with -9 (postmaster and backends), promotes the
standby with `pg_ctl promote`, then makes the dead node a standby of the new primary (a fresh
base backup) and only then asks the new primary to wait for it: until that standby streams,
the new primary commits alone (as a non-strict synchronous mode does); the roles swap ports.

Sizes for 2 cores and 24 GiB: Kafka heaps 384 MB, ZooKeeper 128 MB, Postgres 256 MB of
shared buffers per node.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tickwheel.config import Settings
from tickwheel.stack.errors import StackError
from tickwheel.stack.jars import Jars, find_mvn
from tickwheel.stack.jvm import Jvm, find_java
from tickwheel.stack.kafka import KAFKA_START_TIMEOUT_S, Kafka, KafkaCluster, KafkaNode, probe_kafka
from tickwheel.stack.postgres import (
    DEV_DB,
    DEV_DB_USER,
    PG_START_TIMEOUT_S,
    Postgres,
    find_pg_bin,
    probe_postgres,
)
from tickwheel.stack.procs import wait_until
from tickwheel.stack.zookeeper import (
    ZK_START_TIMEOUT_S,
    ZkEnsemble,
    ZkServer,
    ZooKeeper,
    probe_zookeeper,
    zk_mode,
)
from tickwheel.topics import Topics

NODES = 3
PG_NODES = ("a", "b")
STREAMING_TIMEOUT_S = 60.0  # a new standby must stream within this


@dataclass(frozen=True)
class ReplicatedPorts:
    """Every port of the stack: 3 Kafka (client, controller), 3 ZooKeeper (client, quorum,
    election), 2 Postgres."""

    kafka: tuple[int, int, int]
    kafka_controller: tuple[int, int, int]
    zk: tuple[int, int, int]
    zk_peer: tuple[int, int, int]
    zk_election: tuple[int, int, int]
    pg: tuple[int, int]

    @classmethod
    def of(cls, ports: Iterable[int]) -> ReplicatedPorts:
        """From 17 ports, in the field order."""
        p = list(ports)
        if len(p) != 17:
            raise ValueError(f"the replicated stack needs 17 ports, got {len(p)}")
        return cls(
            (p[0], p[1], p[2]),
            (p[3], p[4], p[5]),
            (p[6], p[7], p[8]),
            (p[9], p[10], p[11]),
            (p[12], p[13], p[14]),
            (p[15], p[16]),
        )

    def all(self) -> list[int]:
        return [
            *self.kafka,
            *self.kafka_controller,
            *self.zk,
            *self.zk_peer,
            *self.zk_election,
            *self.pg,
        ]


class ReplicatedStack:
    """Start, break, heal and stop the replicated stack under `settings.devstack_dir`."""

    def __init__(
        self, settings: Settings, ports: ReplicatedPorts, echo: Callable[[str], None] = print
    ) -> None:
        self.s = settings
        self.ports = ports
        self.echo = echo
        self.root = settings.devstack_dir.resolve()
        self.topics = Topics(settings.topic_prefix)
        self.jars = Jars(self.root, echo)
        self.cluster = KafkaCluster(
            tuple(KafkaNode(i + 1, ports.kafka[i], ports.kafka_controller[i]) for i in range(NODES))
        )
        self.ensemble = ZkEnsemble(
            tuple(
                ZkServer(i + 1, ports.zk[i], ports.zk_peer[i], ports.zk_election[i])
                for i in range(NODES)
            )
        )
        self.brokers = {
            n.node_id: Kafka(settings, self.root, self.jars, self.cluster, n.node_id)
            for n in self.cluster.nodes
        }
        self.zookeepers = {
            z.server_id: ZooKeeper(settings, self.root, self.jars, self.ensemble, z.server_id)
            for z in self.ensemble.servers
        }
        self.pg = {
            name: Postgres(settings, self.root, f"postgres-{name}", port)
            for name, port in zip(PG_NODES, ports.pg, strict=True)
        }
        self.primary = PG_NODES[0]

    # addresses ------------------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.ports.pg)
        return f"postgresql://{DEV_DB_USER}@{hosts}/{DEV_DB}?target_session_attrs=read-write"

    def node_dsn(self, name: str) -> str:
        return f"postgresql://{DEV_DB_USER}@127.0.0.1:{self.pg[name].port}/{DEV_DB}"

    @property
    def kafka(self) -> str:
        return self.cluster.bootstrap

    @property
    def zk(self) -> str:
        return self.ensemble.hosts

    @property
    def standby(self) -> str:
        return next(n for n in PG_NODES if n != self.primary)

    def jvms(self) -> dict[str, Jvm]:
        found = {b.name: b.jvm for b in self.brokers.values()}
        found.update({z.name: z.jvm for z in self.zookeepers.values()})
        return found

    # up and down ----------------------------------------------------------------------------

    def up(self) -> None:
        """Start every node, wait for health, build the synchronous standby, create the
        topics at replication 3."""
        find_java()
        if not self.jars.current():
            find_mvn()
        find_pg_bin("pg_basebackup")
        started = time.monotonic()
        self.jars.ensure()
        for zk in self.zookeepers.values():
            zk.start()
        for broker in self.brokers.values():
            broker.start()
        primary = self.pg[self.primary]
        primary.start()
        self._wait("zookeeper", lambda: probe_zookeeper(self.zk), ZK_START_TIMEOUT_S)
        self._wait("postgres", lambda: probe_postgres(self.node_dsn(self.primary)), 60)
        self.build_standby()
        self._wait("kafka", lambda: self.kafka_problem(), KAFKA_START_TIMEOUT_S)
        from tickwheel.kafka.admin import create_topics

        create_topics(
            self.kafka, [*self.topics.all(), self.topics.health], self.s.topic_partitions, NODES
        )
        self.echo(f"replicated stack up in {time.monotonic() - started:.1f}s")

    def broker_problem(self, node_id: int) -> str | None:
        """None once broker `node_id` answers on its own port and every partition of the
        stack's topics has all its replicas in sync again (a restarted or continued broker
        has caught up); else what is still missing."""
        from tickwheel.kafka.clients import admin_client

        problem = probe_kafka(f"127.0.0.1:{self.brokers[node_id].port}")
        if problem is not None:
            return f"broker {node_id}: {problem}"
        md = admin_client(self.kafka, quiet=True).list_topics(timeout=5)
        behind = [
            f"{name}[{pid}]"
            for name, topic in md.topics.items()
            if not name.startswith("__")
            for pid, part in topic.partitions.items()
            if len(part.isrs) < len(part.replicas)
        ]
        return f"replicas out of sync: {', '.join(sorted(behind)[:5])}" if behind else None

    def kafka_problem(self) -> str | None:
        problem = probe_kafka(self.kafka)
        if problem is not None:
            return problem
        from tickwheel.kafka.clients import admin_client

        brokers = admin_client(self.kafka, quiet=True).list_topics(timeout=5).brokers
        return None if len(brokers) == NODES else f"{len(brokers)} of {NODES} brokers registered"

    def _wait(self, name: str, probe: Callable[[], str | None], timeout_s: float) -> None:
        last: list[str | None] = [None]

        def ok() -> bool:
            last[0] = probe()
            return last[0] is None

        if not wait_until(ok, timeout_s, interval_s=0.5):
            raise StackError(f"{name} not healthy after {timeout_s}s: {last[0]}")

    def down(self) -> list[str]:
        """Stop every node this stack started."""
        stopped = [name for name, jvm in self.jvms().items() if jvm.stop()]
        for node in self.pg.values():
            if node.stop():
                stopped.append(node.name)
        return stopped

    # Postgres: the standby and the failover -------------------------------------------------

    def build_standby(self) -> None:
        """Make the non-primary node a fresh streaming standby of the primary, then make it
        synchronous (commits wait for it from then on)."""
        standby = self.pg[self.standby]
        standby.stop()
        standby.base_backup_from(self.pg[self.primary].port)
        standby.start()
        asyncio.run(self._make_synchronous())

    async def _make_synchronous(self) -> None:
        """Once the standby streams, the primary waits for it at every commit."""
        import asyncpg

        from tickwheel.queries import QUERIES

        deadline = time.monotonic() + STREAMING_TIMEOUT_S
        conn = await asyncpg.connect(self.node_dsn(self.primary), timeout=10)
        try:
            while not await conn.fetchval(QUERIES["stack_standby_streaming"]):
                if time.monotonic() > deadline:
                    raise StackError(f"the standby did not stream within {STREAMING_TIMEOUT_S}s")
                await asyncio.sleep(0.25)
            await conn.execute(QUERIES["stack_sync_standbys"])
            await conn.execute(QUERIES["stack_reload_conf"])
        finally:
            await conn.close()

    def kill_primary(self) -> list[int]:
        """kill -9 of the primary's processes; returns their pids."""
        return self.pg[self.primary].kill()

    def promote_standby(self) -> str:
        """`pg_ctl promote` of the standby, which becomes the primary; returns its name."""
        new = self.standby
        self.pg[new].promote()
        self.primary = new
        return new

    # Kafka ------------------------------------------------------------------------------------

    def partition_leaders(self, topics: Iterable[str]) -> Counter[int]:
        """How many partitions of `topics` each broker leads (node id → count)."""
        from tickwheel.kafka.clients import admin_client

        md = admin_client(self.kafka, quiet=True).list_topics(timeout=10)
        counts: Counter[int] = Counter()
        for name in topics:
            topic = md.topics.get(name)
            if topic is None:
                continue
            for part in topic.partitions.values():
                if part.leader >= 0:
                    counts[part.leader] += 1
        return counts

    # ZooKeeper --------------------------------------------------------------------------------

    def zk_leader(self) -> int | None:
        """The id of the server that leads the ensemble now, or None."""
        for server_id, zk in self.zookeepers.items():
            if zk_mode(zk.port) == "leader":
                return server_id
        return None

    def await_postgres(self, timeout_s: float = PG_START_TIMEOUT_S) -> None:
        self._wait("postgres", lambda: probe_postgres(self.dsn), timeout_s)
