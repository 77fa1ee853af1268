"""Apache Kafka 4 in KRaft mode (one node, broker and controller) for the local stack: its
config, its one-time log-directory format, its start, and what "healthy" means."""

from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path

from tickwheel.config import Settings
from tickwheel.stack.errors import StackError
from tickwheel.stack.jars import Jars
from tickwheel.stack.jvm import Jvm, find_java
from tickwheel.stack.procs import HEALTH_PROBE_TIMEOUT_S, reason

KAFKA_START_TIMEOUT_S = 120


class Kafka:
    """The stack's Kafka: `<root>/kafka/{server.properties,log4j2.properties,data/}`."""

    name = "kafka"

    def __init__(self, settings: Settings, root: Path, jars: Jars) -> None:
        self.port = settings.dev_kafka_port
        self.controller_port = settings.dev_kafka_controller_port
        self.home = root / "kafka"
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
            "1g",
            [f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={self.logs}"],
        )

    def _config(self) -> Path:
        home = self.home
        data = home / "data"
        data.mkdir(parents=True, exist_ok=True)
        port, cport = self.port, self.controller_port
        props = home / "server.properties"
        props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{cport}",
                    f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                    f"log.dirs={data}",
                    "num.partitions=1",
                    # Single node: every internal topic has one replica. Fewer internal partitions
                    # than the defaults (50) make a cold start and group joins much quicker.
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=8",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "transaction.state.log.num.partitions=4",
                    "share.coordinator.state.topic.replication.factor=1",
                    "share.coordinator.state.topic.min.isr=1",
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
            # URL-safe base64, like `kafka-storage random-uuid`).
            cluster_id = new_cluster_id()
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
    from tickwheel.kafka import admin_client, round_trip

    try:
        md = admin_client(bootstrap, quiet=True).list_topics(timeout=HEALTH_PROBE_TIMEOUT_S)
        if not md.brokers:
            return "metadata lists no broker"
        if round_trip_topic is not None:
            round_trip(bootstrap, round_trip_topic, timeout_s=30)
    except Exception as exc:
        return reason(exc)
    return None
