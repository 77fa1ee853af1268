"""Scratch databases and unique topics on the real services, for tests and benchmarks.

Tests (tests/conftest.py) and benchmarks (bench/, run as `python bench/x.py`) both need a
throwaway database, often migrated or cloned from a migrated template, and topics under a
prefix no one else uses; both import them from here. Nothing in the scheduler imports this.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from tickwheel import db as dbmod
from tickwheel.kafka import create_topics, delete_topics
from tickwheel.topics import Topics


@dataclass(frozen=True)
class Database:
    name: str
    dsn: str


def with_database(dsn: str, database: str) -> str:
    """`dsn` pointing at another database of the same server."""
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{database}"))


async def _admin(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(with_database(dsn, "postgres"))
    try:
        await conn.execute(statement)
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
    await _admin(dsn, create)
    try:
        yield Database(name, with_database(dsn, name))
    finally:
        await _admin(dsn, drop)


@contextmanager
def scratch_database(dsn: str, prefix: str, *, template: str | None = None) -> Iterator[Database]:
    """`scratch_database_async` for callers outside an event loop (pytest fixtures)."""
    name, create, drop = _scratch(prefix, template)
    asyncio.run(_admin(dsn, create))
    try:
        yield Database(name, with_database(dsn, name))
    finally:
        asyncio.run(_admin(dsn, drop))


def create_scratch_database(dsn: str, prefix: str) -> tuple[Database, Callable[[], None]]:
    """A new database `<prefix>_<random>` and the function that drops it, for a caller whose
    database may outlive the block (`tickwheel demo --keep`; a context manager's generator
    would drop it when collected)."""
    name, create, drop = _scratch(prefix, None)
    asyncio.run(_admin(dsn, create))
    return Database(name, with_database(dsn, name)), lambda: asyncio.run(_admin(dsn, drop))


async def migrate(dsn: str, *, partitions: bool = True) -> None:
    """Apply every migration to the database of `dsn` (and create its job_runs partitions)."""
    conn = await asyncpg.connect(dsn)
    try:
        await dbmod.migrate(conn)
        if partitions:
            await dbmod.ensure_partitions(conn)
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
