"""Throwaway resources for one benchmark: a migrated database and topics under a fresh prefix.

A benchmark never touches the data of the database or topics it was pointed at: it creates a
database `bench_<hex>` beside it on the same server and topics `bench<hex>.*` on the same
broker (and so, for schedulers, a ZooKeeper folder of its own, named by the prefix), and drops
them when it ends, whatever happened.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg

from tickwheel import db
from tickwheel.kafka import create_topics, delete_topics
from tickwheel.queries import QUERIES
from tickwheel.topics import Topics

log = logging.getLogger("tickwheel.bench")

TENANT = "bench"
# CREATE/DROP DATABASE take no bind parameters; the name is ours and checked against this.
_SCRATCH_NAME = re.compile(r"^bench_[0-9a-f]{12}$")


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
        }


def _sibling_dsn(dsn: str, database: str) -> str:
    base, _, _ = dsn.rpartition("/")
    query = dsn.partition("?")[2]
    return f"{base}/{database}" + (f"?{query}" if query else "")


@asynccontextmanager
async def scratch(
    dsn: str, kafka: str, zk: str, *, shards: int, partitions: int
) -> AsyncIterator[Scratch]:
    """A migrated database (tenant `bench`, job_runs partitions ready) and fresh topics."""
    name = f"bench_{uuid.uuid4().hex[:12]}"
    if not _SCRATCH_NAME.match(name):
        raise AssertionError(name)
    admin = await asyncpg.connect(_sibling_dsn(dsn, "postgres"))
    topics = Topics(f"bench{uuid.uuid4().hex[:10]}")
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        resources = Scratch(_sibling_dsn(dsn, name), name, topics, kafka, zk, shards)
        create_topics(kafka, topics.all(), partitions=partitions, replication=1)
        conn = await asyncpg.connect(resources.dsn)
        try:
            await db.migrate(conn)
            await db.ensure_partitions(conn)
            await conn.execute(QUERIES["bench_tenant"], TENANT)
        finally:
            await conn.close()
        yield resources
    finally:
        try:
            delete_topics(kafka, topics.all())
        except Exception:
            log.warning("could not delete the scratch topics %s.*", topics.prefix, exc_info=True)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
