"""Throwaway resources for one benchmark: a migrated database and topics under a fresh prefix.

A benchmark never touches the data of the database or topics it was pointed at: it creates a
database `bench_<hex>` beside it on the same server and topics `bench<hex>.*` on the same
broker (and so, for schedulers, a ZooKeeper folder of its own, named by the prefix), through
`tickwheel.testing`, and drops them when it ends, whatever happened.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg

# Public names of confluent_kafka.admin that its stubs do not re-export explicitly.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from tickwheel.domain import PRIORITIES
from tickwheel.kafka.clients import admin_client
from tickwheel.queries import QUERIES
from tickwheel.testing import migrate, scratch_database_async, unique_topics
from tickwheel.topics import Topics

TENANT = "bench"
OTHER_TENANT = "bench-b"  # `tickwheel bench tenants`: the small tenant beside the burst
TOPIC_CONFIG_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Scratch:
    dsn: str
    database: str
    topics: Topics
    kafka: str
    zk: str
    shards: int

    def env(self) -> dict[str, str]:
        """What a child process needs to work on these resources only."""
        return {
            "TICKWHEEL_DSN": self.dsn,
            "TICKWHEEL_KAFKA": self.kafka,
            "TICKWHEEL_ZK": self.zk,
            "TICKWHEEL_TOPIC_PREFIX": self.topics.prefix,
            "TICKWHEEL_SHARDS": str(self.shards),
            "TICKWHEEL_INTAKE_REQUIRE_SIGNATURE": "false",  # its only producer: us, unsigned
        }


@asynccontextmanager
async def scratch(
    dsn: str, kafka: str, zk: str, *, shards: int, partitions: int
) -> AsyncIterator[Scratch]:
    """Fresh topics and a migrated database of their deployment (tenant `bench`, job_runs
    partitions ready)."""
    with unique_topics(kafka, "bench", partitions=partitions) as topics:
        async with scratch_database_async(dsn, "bench") as database:
            await migrate(database.dsn, deployment=topics.prefix)
            conn = await asyncpg.connect(database.dsn)
            try:
                await conn.execute(QUERIES["bench_tenant"], TENANT)
            finally:
                await conn.close()
            stamp_on_append(kafka, [topics.runs(p) for p in PRIORITIES])
            yield Scratch(database.dsn, database.name, topics, kafka, zk, shards)


def stamp_on_append(kafka: str, names: list[str]) -> None:
    """Make the broker stamp each message of `names` with the time it appended it.

    A run's publish instant is then read from the run topic itself (the first message of its
    run key), independent of when a worker got round to recording `published_at`.
    """
    entry = ConfigEntry(
        "message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET
    )
    resources = [
        ConfigResource(ResourceType.TOPIC, name, incremental_configs=[entry]) for name in names
    ]
    admin = admin_client(kafka)  # held until every future is done: it owns the requests
    for future in admin.incremental_alter_configs(resources).values():
        future.result(TOPIC_CONFIG_TIMEOUT_S)
