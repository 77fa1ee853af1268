"""Shared fixtures: the real services, a fresh database per test module, unique topics per test.

The stack comes from, in order: `TICKWHEEL_STACK=testcontainers` (Docker users), the
`TICKWHEEL_DSN`/`TICKWHEEL_KAFKA`/`TICKWHEEL_ZK` environment (all three given), or the local
stack of `tickwheel dev`, started here if it is not up (and stopped again at the end of the
session only if this session started it, unless `TICKWHEEL_KEEP_STACK=1`).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from tickwheel import db as dbmod
from tickwheel.config import load_settings
from tickwheel.kafka import create_topics, delete_topics
from tickwheel.stack import Addresses, DevStack
from tickwheel.topics import Topics

MARKERS = {"unit", "integration"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test says whether it needs the services: exactly one of the two markers."""
    for item in items:
        marks = {m.name for m in item.iter_markers()} & MARKERS
        if len(marks) != 1:
            raise pytest.UsageError(f"{item.nodeid}: mark it with exactly one of {sorted(MARKERS)}")


@pytest.fixture(scope="session")
def stack() -> Iterator[Addresses]:
    if os.environ.get("TICKWHEEL_STACK") == "testcontainers":
        from tickwheel.stack.containers import started

        with started() as addresses:
            yield addresses
        return
    settings = load_settings()
    dev = DevStack(settings, echo=lambda _line: None)
    if settings.dsn and settings.kafka and settings.zk:
        yield dev.addresses()
        return
    was_up = all(s.healthy for s in dev.status(round_trip=False))
    dev.up()
    try:
        yield dev.addresses()
    finally:
        if not was_up and os.environ.get("TICKWHEEL_KEEP_STACK") != "1":
            dev.down()


def _with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{database}"))


async def _admin(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(_with_database(dsn, "postgres"))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextmanager
def _database(stack: Addresses, prefix: str, template: str | None = None) -> Iterator[str]:
    """A new database (a copy of `template`, if given) for the block; yields its name."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    clause = f' TEMPLATE "{template}"' if template else ""
    asyncio.run(_admin(stack.dsn, f'CREATE DATABASE "{name}"{clause}'))
    try:
        yield name
    finally:
        asyncio.run(_admin(stack.dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def template_db(stack: Addresses) -> Iterator[str]:
    """A migrated database that every test module's database is cloned from."""

    async def migrate(dsn: str) -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await dbmod.migrate(conn)
            await dbmod.ensure_partitions(conn)
        finally:
            await conn.close()

    with _database(stack, "tw_template") as name:
        asyncio.run(migrate(_with_database(stack.dsn, name)))
        yield name


@pytest.fixture(scope="module")
def db_dsn(stack: Addresses, template_db: str) -> Iterator[str]:
    """DSN of a fresh, migrated database for this test module only."""
    with _database(stack, "tw", template=template_db) as name:
        yield _with_database(stack.dsn, name)


@pytest.fixture
def empty_db_dsn(stack: Addresses) -> Iterator[str]:
    """DSN of a brand-new database with no schema at all."""
    with _database(stack, "tw_empty") as name:
        yield _with_database(stack.dsn, name)


@pytest.fixture
def topics(stack: Addresses) -> Iterator[Topics]:
    """The system's topics under a prefix unique to this test, deleted afterwards."""
    names = Topics(f"t{uuid.uuid4().hex[:10]}")
    create_topics(stack.kafka, names.all(), partitions=2, replication=1)
    yield names
    delete_topics(stack.kafka, names.all())
