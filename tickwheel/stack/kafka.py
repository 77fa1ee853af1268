"""Apache Kafka 4 in KRaft mode for the local stack: one node (broker and controller) for
`tickwheel dev`, or a cluster of such combined nodes for the chaos harness's replicated stack
(`replicated.py`); their config, the one-time log-directory format, the start, and what
"healthy" means."""

from __future__ import annotations

import base64
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from tickwheel.config import Settings
from tickwheel.stack.errors import StackError
from tickwheel.stack.jars import Jars
from tickwheel.stack.jvm import Jvm, find_java
from tickwheel.stack.procs import HEALTH_PROBE_TIMEOUT_S, reason

KAFKA_START_TIMEOUT_S = 120
SINGLE_HEAP = "1g"


@dataclass(frozen=True)
class KafkaNode:
    """One combined broker+controller node: its id and ports."""

    node_id: int
    port: int
    controller_port: int


@dataclass(frozen=True)
class KafkaCluster:
    """The nodes of one KRaft cluster (every node is a voter) and its durability settings.

    A cluster of three replicates every topic three times and acknowledges a write once two
    replicas have it (`min.insync.replicas`), so one broker may die without losing an
    acknowledged message or stopping producers (docs/RELIABILITY.md). A broker that stops
    heart-beating is fenced after `session_ms` and leaves the in-sync replicas with it.
    """

    nodes: tuple[KafkaNode, ...]
    min_insync: int = 2
    heap: str = "384m"
    session_ms: int = 4000  # broker.session.timeout.ms: a dead broker is fenced after this
    heartbeat_ms: int = 1000
    replica_lag_ms: int = 6000  # replica.lag.time.max.ms

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)


class Kafka:
    """One Kafka node: `<root>/kafka[-<id>]/{server.properties,log4j2.properties,data/}`.

    Without `cluster` it is the dev stack's single node (ports from the settings); with it,
    node `node_id` of that cluster."""

    def __init__(
        self,
        settings: Settings,
        root: Path,
        jars: Jars,
        cluster: KafkaCluster | None = None,
        node_id: int | None = None,
    ) -> None:
        if cluster is None:
            node = KafkaNode(1, settings.dev_kafka_port, settings.dev_kafka_controller_port)
            self.cluster = KafkaCluster((node,), min_insync=1, heap=SINGLE_HEAP)
            self.name = "kafka"
        else:
            node = next(n for n in cluster.nodes if n.node_id == node_id)
            self.cluster = cluster
            self.name = f"kafka-{node.node_id}"
        self.node = node
        self.port = node.port
        self.controller_port = node.controller_port
        self.root = root
        self.home = root / self.name
        self.logs = root / "logs"
        self.jars = jars
        self.jvm = Jvm(self.name, root)

    def start(self) -> None:
        if self.jvm.pid() is not None:
            return
        props = self._config()
        log4j = props.parent / "log4j2.properties"
        self.jvm.spawn(
            self.jars.classpath("kafka"),
            "kafka.Kafka",
            [str(props)],
            self.cluster.heap,
            [f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={self.logs}"],
        )

    def _replication_lines(self) -> list[str]:
        c = self.cluster
        if len(c.nodes) == 1:
            # Single node: every internal topic has one replica.
            return [
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
            ]
        rf = len(c.nodes)
        return [
            f"offsets.topic.replication.factor={rf}",
            f"transaction.state.log.replication.factor={rf}",
            f"transaction.state.log.min.isr={c.min_insync}",
            f"share.coordinator.state.topic.replication.factor={rf}",
            f"share.coordinator.state.topic.min.isr={c.min_insync}",
            f"default.replication.factor={rf}",
            f"min.insync.replicas={c.min_insync}",
            "unclean.leader.election.enable=false",
            f"broker.session.timeout.ms={c.session_ms}",
            f"broker.heartbeat.interval.ms={c.heartbeat_ms}",
            f"replica.lag.time.max.ms={c.replica_lag_ms}",
        ]

    def _config(self) -> Path:
        home = self.home
        data = home / "data"
        data.mkdir(parents=True, exist_ok=True)
        port, cport = self.port, self.controller_port
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.cluster.nodes)
        props = home / "server.properties"
        props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    f"node.id={self.node.node_id}",
                    f"controller.quorum.voters={voters}",
                    f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                    f"log.dirs={data}",
                    "num.partitions=1",
                    *self._replication_lines(),
                    # Fewer internal partitions than the defaults (50) make a cold start and
                    # group joins much quicker.
                    "offsets.topic.num.partitions=8",
                    "transaction.state.log.num.partitions=4",
                    "group.initial.rebalance.delay.ms=0",
                    "auto.create.topics.enable=false",
                    "delete.topic.enable=true",
                    "log.retention.hours=24",
                    "log.segment.bytes=67108864",
                    "",
                ]
            )
        )
        log4j = home / "log4j2.properties"
        log4j.write_text(
            "\n".join(
                [
                    "status = warn",
                    "appender.out.type = Console",
                    "appender.out.name = OUT",
                    "appender.out.layout.type = PatternLayout",
                    "appender.out.layout.pattern = [%d] %p %m (%c)%n",
                    "rootLogger.level = INFO",
                    "rootLogger.appenderRef.out.ref = OUT",
                    "logger.state.name = state.change.logger",
                    "logger.state.level = WARN",
                    "logger.log.name = kafka.log",
                    "logger.log.level = WARN",
                    "logger.storage.name = org.apache.kafka.storage",
                    "logger.storage.level = WARN",
                    "",
                ]
            )
        )
        if not (data / "meta.properties").is_file():
            # A KRaft log directory must be formatted once with a cluster id (22 chars of
            # URL-safe base64, like `kafka-storage random-uuid`), the same on every node.
            cluster_id = self._cluster_id()
            out = subprocess.run(
                [
                    find_java(),
                    "-Xmx256m",
                    f"-Dlog4j2.configurationFile={log4j}",
                    "-cp",
                    self.jars.classpath("kafka"),
                    "kafka.tools.StorageTool",
                    "format",
                    "--cluster-id",
                    cluster_id,
                    "--config",
                    str(props),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if out.returncode != 0:
                raise StackError(
                    "formatting the Kafka log directory failed: "
                    + (out.stderr or out.stdout).strip().splitlines()[-1]
                )
        return props

    def _cluster_id(self) -> str:
        if len(self.cluster.nodes) == 1:
            return new_cluster_id()
        stamp = self.root / "kafka-cluster.id"
        if not stamp.is_file():
            stamp.write_text(new_cluster_id())
        return stamp.read_text().strip()


def new_cluster_id() -> str:
    """A KRaft cluster id: 22 characters of URL-safe base64 of a random UUID, never starting
    with '-' (the storage tool would read it as an option and refuse to format; Kafka's own
    `Uuid.randomUuid` draws again for the same reason)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def probe_kafka(bootstrap: str, round_trip_topic: str | None = None) -> str | None:
    """None when metadata answers (and, given a topic, a produced message is consumed back)."""
    from tickwheel.kafka.admin import round_trip
    from tickwheel.kafka.clients import admin_client

    try:
        md = admin_client(bootstrap, quiet=True).list_topics(timeout=HEALTH_PROBE_TIMEOUT_S)
        if not md.brokers:
            return "metadata lists no broker"
        if round_trip_topic is not None:
            round_trip(bootstrap, round_trip_topic, timeout_s=30)
    except Exception as exc:
        return reason(exc)
    return None
