"""Scratch databases, unique topics and topic reads on the real services, for tests and benchmarks.

Tests (tests/conftest.py) and the harnesses (bench/: the benchmarks, the demo) both need a
throwaway database, often migrated or cloned from a migrated template, and topics under a
prefix no one else uses; both import them from here. Nothing in the scheduler imports this.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from tickwheel import db as dbmod
from tickwheel.kafka.admin import create_topics, delete_topics
from tickwheel.kafka.clients import QUIET, consumer, producer
from tickwheel.queries import QUERIES
from tickwheel.topics import Topics


@dataclass(frozen=True)
class Database:
    name: str
    dsn: str


def with_database(dsn: str, database: str) -> str:
    """`dsn` pointing at another database of the same server."""
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{database}"))


async def admin(dsn: str, statement: str) -> None:
    """Run `statement` (CREATE or DROP DATABASE) on the server's `postgres` database."""
    conn = await asyncpg.connect(with_database(dsn, "postgres"))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def database_exists(dsn: str, name: str) -> bool:
    """Whether the server of `dsn` holds a database `name`."""
    conn = await asyncpg.connect(with_database(dsn, "postgres"))
    try:
        return bool(await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name))
    finally:
        await conn.close()


def _scratch(prefix: str, template: str | None) -> tuple[str, str, str]:
    """(name, CREATE, DROP) of a new scratch database. Database names cannot be bound
    parameters; these are ours (a prefix of the caller's and hex digits), never user input."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    clause = f' TEMPLATE "{template}"' if template else ""
    return (
        name,
        f'CREATE DATABASE "{name}"{clause}',
        f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
    )


@asynccontextmanager
async def scratch_database_async(
    dsn: str, prefix: str, *, template: str | None = None
) -> AsyncIterator[Database]:
    """A new database named `<prefix>_<random>` (a copy of `template`, if given) on the server
    of `dsn`, dropped (with any connections left) when the block ends."""
    name, create, drop = _scratch(prefix, template)
    await admin(dsn, create)
    try:
        yield Database(name, with_database(dsn, name))
    finally:
        await admin(dsn, drop)


@contextmanager
def scratch_database(dsn: str, prefix: str, *, template: str | None = None) -> Iterator[Database]:
    """`scratch_database_async` for callers outside an event loop (pytest fixtures)."""
    name, create, drop = _scratch(prefix, template)
    asyncio.run(admin(dsn, create))
    try:
        yield Database(name, with_database(dsn, name))
    finally:
        asyncio.run(admin(dsn, drop))


def create_scratch_database(dsn: str, prefix: str) -> tuple[Database, Callable[[], None]]:
    """A new database `<prefix>_<random>` and the function that drops it, for a caller whose
    database may outlive the block (`tickwheel demo --keep`; a context manager's generator
    would drop it when collected)."""
    name, create, drop = _scratch(prefix, None)
    asyncio.run(admin(dsn, create))
    return Database(name, with_database(dsn, name)), lambda: asyncio.run(admin(dsn, drop))


async def migrate(dsn: str, *, deployment: str | None = None, partitions: bool = True) -> None:
    """Apply every migration to the database of `dsn` (and create its job_runs partitions),
    recording it as `deployment`'s (a topic prefix) when given: its schedulers, workers and
    registries start only on a database of their own deployment (D-048)."""
    conn = await asyncpg.connect(dsn)
    try:
        await dbmod.migrate(conn, deployment=deployment)
        if partitions:
            await dbmod.ensure_partitions(conn)
    finally:
        await conn.close()


async def own_database(dsn: str, deployment: str) -> None:
    """Make a migrated database `deployment`'s: recorded when it records none yet (a copy of a
    template), renamed when it belongs to another (a test that moves to other topics)."""
    conn = await asyncpg.connect(dsn)
    try:
        recorded = await dbmod.deployment_of(conn)
        if recorded is None:
            await dbmod.migrate(conn, deployment=deployment)
        elif recorded != deployment:
            await conn.execute(QUERIES["deployment_rename"], recorded, deployment)
    finally:
        await conn.close()


@contextmanager
def unique_topics(kafka: str, stem: str, *, partitions: int = 2) -> Iterator[Topics]:
    """The system's topics under a prefix `<stem><random>` no one else uses, deleted after."""
    topics = Topics(f"{stem}{uuid.uuid4().hex[:10]}")
    create_topics(kafka, topics.all(), partitions=partitions, replication=1)
    try:
        yield topics
    finally:
        delete_topics(kafka, topics.all())


# --- Kafka: produce a few messages, read a topic back --------------------------------------


def produce(
    kafka: str,
    topic: str,
    messages: Iterable[tuple[str | bytes | None, bytes]],
    headers: list[tuple[str, str | bytes | None]] | None = None,
) -> None:
    """Produce (key, value) pairs to `topic` and wait until every one is acknowledged."""
    prod = producer(kafka, **{"linger.ms": 0})
    for key, value in messages:
        prod.produce(topic, key=key, value=value, headers=headers)
    if prod.flush(30) != 0:
        raise TimeoutError(f"messages to {topic} not acknowledged within 30 s")


def drain(kafka: str, topic: str, *, expect: int = 0, timeout_s: float = 30.0) -> list[Message]:
    """Every message of `topic` (all partitions, from the beginning) up to the end offsets it
    had when the read was assigned, and at least `expect` of them (later ones included when
    needed to reach it); errors are skipped. A fresh group each time, committing nothing.

    "Quiet for a while" is no end condition: a fresh group's first fetch can take longer
    than any quiet period on a busy machine, and the read would end before it began."""
    cons = consumer(kafka, f"drain-{uuid.uuid4()}", **{"enable.auto.commit": False})
    cons.subscribe([topic])
    got: list[Message] = []
    ends: dict[int, int] | None = None  # partition -> end offset when assigned
    seen: dict[int, int] = {}  # partition -> next offset to read
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msg = cons.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg)
                seen[msg.partition() or 0] = (msg.offset() or 0) + 1
            if ends is None and cons.assignment():
                ends = {
                    tp.partition: cons.get_watermark_offsets(tp, timeout=10)[1]
                    for tp in cons.assignment()
                }
            if (
                ends is not None
                and len(got) >= expect
                and all(seen.get(p, 0) >= end for p, end in ends.items())
            ):
                break
    finally:
        cons.close()
    return got


def read_topic(kafka: str, topic: str, *, timeout_s: float = 30.0) -> list[Message]:
    """Every message `topic` holds now (all partitions, up to the end offsets it has when the
    read starts), read by assigning its partitions: no group is joined, nothing committed, so
    it takes milliseconds where a group's first fetch takes seconds."""
    reader = consumer(
        kafka,
        f"read-{uuid.uuid4()}",
        **{"enable.auto.commit": False, "enable.partition.eof": True},
        **QUIET,
    )
    try:
        meta = reader.list_topics(topic, timeout=timeout_s).topics[topic]
        ends = {}
        for partition in meta.partitions:
            low, high = reader.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s, cached=False
            )
            if low < high:
                ends[partition] = (low, high)
        if not ends:
            return []
        reader.assign([TopicPartition(topic, p, low) for p, (low, _) in ends.items()])
        got: list[Message] = []
        remaining = set(ends)
        deadline = time.monotonic() + timeout_s
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} not read to its end within {timeout_s} s")
            for msg in reader.consume(500, 0.2):
                err, partition = msg.error(), msg.partition()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        remaining.discard(partition)
                    elif err.fatal():
                        raise KafkaException(err)
                    continue
                if partition is None or (offset := msg.offset()) is None:
                    continue
                high = ends[partition][1]
                if offset < high:
                    got.append(msg)
                if offset >= high - 1:
                    remaining.discard(partition)
        return got
    finally:
        reader.close()
