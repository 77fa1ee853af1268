"""Shared fixtures: the real services, a fresh database per test module, unique topics per test.

The stack comes from, in order: `TICKWHEEL_STACK=testcontainers` (Docker users), the
`TICKWHEEL_DSN`/`TICKWHEEL_KAFKA`/`TICKWHEEL_ZK` environment (all three given), or the local
stack of `tickwheel dev`, started here if it is not up (and stopped again at the end of the
session only if this session started it, unless `TICKWHEEL_KEEP_STACK=1`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from tickwheel.config import load_settings
from tickwheel.stack import Addresses, DevStack
from tickwheel.testing import migrate, scratch_database, unique_topics
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


@pytest.fixture(scope="session")
def template_db(stack: Addresses) -> Iterator[str]:
    """A migrated database that every test module's database is cloned from."""
    with scratch_database(stack.dsn, "tw_template") as template:
        asyncio.run(migrate(template.dsn))
        yield template.name


@pytest.fixture(scope="module")
def db_dsn(stack: Addresses, template_db: str) -> Iterator[str]:
    """DSN of a fresh, migrated database for this test module only."""
    with scratch_database(stack.dsn, "tw", template=template_db) as database:
        yield database.dsn


@pytest.fixture
def empty_db_dsn(stack: Addresses) -> Iterator[str]:
    """DSN of a brand-new database with no schema at all."""
    with scratch_database(stack.dsn, "tw_empty") as database:
        yield database.dsn


@pytest.fixture
def topics(stack: Addresses) -> Iterator[Topics]:
    """The system's topics under a prefix unique to this test, deleted afterwards."""
    with unique_topics(stack.kafka, "t", partitions=2) as names:
        yield names
