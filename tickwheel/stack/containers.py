"""The same three services in Docker, via testcontainers, for users who have a Docker engine.

Not exercised on machines without Docker (this project's CI has none): the local stack of
`tickwheel dev` is the tested path. Containers live as long as the process that started them,
so `tickwheel dev containers` stays in the foreground and the pytest session fixture holds them
for the session.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from tickwheel.config import Settings
from tickwheel.kafka.admin import create_topics
from tickwheel.stack.addresses import Addresses
from tickwheel.topics import Topics

POSTGRES_IMAGE = "postgres:16-alpine"
# testcontainers' KafkaContainer drives Confluent's image scripts (its KRaft mode refuses
# other images); cp-kafka 8.0 is Apache Kafka 4.0.
KAFKA_IMAGE = "confluentinc/cp-kafka:8.0.0"
ZOOKEEPER_IMAGE = "zookeeper:3.9"


@contextmanager
def started() -> Iterator[Addresses]:
    from testcontainers.community.kafka import KafkaContainer
    from testcontainers.community.postgres import PostgresContainer
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    with ExitStack() as stack:
        pg = stack.enter_context(PostgresContainer(POSTGRES_IMAGE, driver=None))
        kafka = stack.enter_context(KafkaContainer(KAFKA_IMAGE).with_kraft())
        zk = stack.enter_context(DockerContainer(ZOOKEEPER_IMAGE).with_exposed_ports(2181))
        wait_for_logs(zk, "binding to port", timeout=60)
        yield Addresses(
            dsn=pg.get_connection_url(driver=None).replace("postgresql+", "postgresql"),
            kafka=kafka.get_bootstrap_server(),
            zk=f"{zk.get_container_host_ip()}:{zk.get_exposed_port(2181)}",
        )


def run_forever(settings: Settings, echo: Callable[[str], None]) -> None:
    with started() as addresses:
        create_topics(
            addresses.kafka,
            Topics(settings.topic_prefix).all(),
            settings.topic_partitions,
            settings.topic_replication,
        )
        for line in addresses.env_lines():
            echo(line)
        echo("# containers run until Ctrl-C")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
