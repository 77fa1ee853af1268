"""`DevStack`: start, check and stop the three local services for one settings object.

A service whose address is given by the environment (`TICKWHEEL_DSN`, `TICKWHEEL_KAFKA`,
`TICKWHEEL_ZK`) is never started or stopped here, only health-checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tickwheel.config import Settings, redact_dsn
from tickwheel.stack.addresses import Addresses
from tickwheel.stack.errors import StackError
from tickwheel.stack.jars import Jars, find_mvn
from tickwheel.stack.jvm import Jvm, find_java
from tickwheel.stack.kafka import KAFKA_START_TIMEOUT_S, Kafka, probe_kafka
from tickwheel.stack.postgres import PG_START_TIMEOUT_S, Postgres, find_pg_bin, probe_postgres
from tickwheel.stack.procs import tail, wait_until
from tickwheel.stack.zookeeper import ZK_START_TIMEOUT_S, ZooKeeper, probe_zookeeper
from tickwheel.topics import Topics


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    address: str
    healthy: bool
    managed: bool  # started by `tickwheel dev` (False: given by the environment)
    detail: str


class DevStack:
    """Start, check and stop the three local services for one settings object."""

    def __init__(self, settings: Settings, echo: Callable[[str], None] = print) -> None:
        self.s = settings
        self.echo = echo
        self.root = settings.devstack_dir.resolve()
        self.logs = self.root / "logs"
        self.run = self.root / "run"
        self.topics = Topics(settings.topic_prefix)
        self.jars = Jars(self.root, echo)
        self.postgres = Postgres(settings, self.root)
        self.zookeeper = ZooKeeper(settings, self.root, self.jars)
        self.kafka = Kafka(settings, self.root, self.jars)
        self._jvms: dict[str, Jvm] = {"kafka": self.kafka.jvm, "zookeeper": self.zookeeper.jvm}

    # addresses ------------------------------------------------------------------------------

    @property
    def health_topic(self) -> str:
        return self.topics.health

    def manages(self, service: str) -> bool:
        given = {"postgres": self.s.dsn, "kafka": self.s.kafka, "zookeeper": self.s.zk}[service]
        return given is None

    def addresses(self) -> Addresses:
        return Addresses(self.s.effective_dsn, self.s.effective_kafka, self.s.effective_zk)

    def env_lines(self) -> list[str]:
        return self.addresses().env_lines()

    # preflight ------------------------------------------------------------------------------

    def preflight(self) -> None:
        """Fail fast, with one line, on the first missing prerequisite."""
        if self.manages("kafka") or self.manages("zookeeper"):
            find_java()
            if not self.jars.current():
                find_mvn()
        if self.manages("postgres"):
            find_pg_bin("initdb")
            find_pg_bin("pg_ctl")

    # the verbs --------------------------------------------------------------------------------

    def up(self) -> list[ServiceStatus]:
        """Start what is not running, wait for health, create the topics. Idempotent."""
        self.preflight()
        started = time.monotonic()
        if self.manages("kafka") or self.manages("zookeeper"):
            self.jars.ensure()
        # JVMs first: they boot while pg_ctl waits for Postgres.
        if self.manages("zookeeper"):
            self.zookeeper.start()
        if self.manages("kafka"):
            self.kafka.start()
        if self.manages("postgres"):
            self.postgres.start()
        self._await_health(
            "zookeeper", lambda: probe_zookeeper(self.s.effective_zk), ZK_START_TIMEOUT_S
        )
        self._await_health(
            "kafka", lambda: probe_kafka(self.s.effective_kafka), KAFKA_START_TIMEOUT_S
        )
        self._await_health(
            "postgres", lambda: probe_postgres(self.s.effective_dsn), PG_START_TIMEOUT_S
        )
        from tickwheel.kafka.admin import create_topics

        create_topics(
            self.s.effective_kafka,
            [*self.topics.all(), self.health_topic],
            partitions=self.s.topic_partitions,
            replication=self.s.topic_replication,
        )
        statuses = self.status(round_trip=True)
        self.echo(f"stack up in {time.monotonic() - started:.1f}s")
        return statuses

    def _await_health(self, name: str, probe: Callable[[], str | None], timeout_s: float) -> None:
        last: list[str | None] = [None]

        def ok() -> bool:
            if name in self._jvms and self.manages(name) and self._jvms[name].pid() is None:
                raise StackError(
                    f"{name} exited during start-up: " + tail(self.logs / f"{name}.log", 3)
                )
            last[0] = probe()
            return last[0] is None

        if not wait_until(ok, timeout_s, interval_s=0.5):
            raise StackError(
                f"{name} not healthy after {timeout_s}s: {last[0]} "
                f"(log: {self.logs / (name + '.log')})"
            )

    def status(self, round_trip: bool = True) -> list[ServiceStatus]:
        checks: list[tuple[str, str, Callable[[], str | None]]] = [
            (
                "postgres",
                redact_dsn(self.s.effective_dsn),
                lambda: probe_postgres(self.s.effective_dsn),
            ),
            ("zookeeper", self.s.effective_zk, lambda: probe_zookeeper(self.s.effective_zk)),
            (
                "kafka",
                self.s.effective_kafka,
                lambda: probe_kafka(
                    self.s.effective_kafka, self.health_topic if round_trip else None
                ),
            ),
        ]
        result: list[ServiceStatus] = []
        for name, address, probe in checks:
            problem = probe()
            result.append(
                ServiceStatus(
                    name,
                    address,
                    problem is None,
                    self.manages(name),
                    problem or self._describe(name),
                )
            )
        return result

    def _describe(self, name: str) -> str:
        if not self.manages(name):
            return "given by the environment"
        if name == "postgres":
            return f"pid {self.postgres.pid()}"
        return f"pid {self._jvms[name].pid()}"

    def down(self) -> list[str]:
        """Stop exactly what `up` started; services given by the environment are left alone."""
        stopped = [name for name, jvm in self._jvms.items() if self.manages(name) and jvm.stop()]
        if (
            self.manages("postgres")
            and (self.root / "pg.location").is_file()
            and self.postgres.stop()
        ):
            stopped.append("postgres")
        return stopped
