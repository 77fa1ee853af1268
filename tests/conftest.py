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
from tickwheel.domain import PRIORITIES
from tickwheel.envelopes.parsing import EnvelopeError, loads_exact
from tickwheel.stack import Addresses, DevStack
from tickwheel.testing import migrate, own_database, read_topic, scratch_database, unique_topics
from tickwheel.topics import Topics
from tickwheel.wire.schemas import validator

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


@pytest.fixture
def db_dsn(stack: Addresses, template_db: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """DSN of a fresh, migrated database for this test only (a copy of the template: ~0.1 s).

    A deployment owns its database (D-048): when the test uses the `topics` fixture, the
    database is recorded as the deployment of those topics, so the schedulers, workers and
    registries the test starts under that prefix accept it, and no two tests' processes ever
    share one."""
    with scratch_database(stack.dsn, "tw", template=template_db) as database:
        if "topics" in request.fixturenames:
            asyncio.run(own_database(database.dsn, request.getfixturevalue("topics").prefix))
        yield database.dsn


@pytest.fixture(scope="module")
def module_db_dsn(stack: Addresses, template_db: str) -> Iterator[str]:
    """DSN of a fresh, migrated database that every test of a module shares (no deployment
    recorded: for tests that start no scheduler, worker or registry process)."""
    with scratch_database(stack.dsn, "tw", template=template_db) as database:
        yield database.dsn


@pytest.fixture
def empty_db_dsn(stack: Addresses) -> Iterator[str]:
    """DSN of a brand-new database with no schema at all."""
    with scratch_database(stack.dsn, "tw_empty") as database:
        yield database.dsn


def _schemas_of(topics: Topics) -> dict[str, str]:
    """Topic → the docs/schemas/ file its messages follow (registrations: what producers send,
    checked where the client produces them)."""
    return {
        topics.rejected: "rejection",
        **{topics.runs(p): "run-envelope" for p in PRIORITIES},
        topics.dlq: "dead-letter",
    }


def off_schema(kafka: str, topics: Topics, foreign: set[str]) -> list[str]:
    """Every message on the topics the code writes that does not follow its schema."""
    problems = []
    for topic, schema in _schemas_of(topics).items():
        if topic.removeprefix(f"{topics.prefix}.") in foreign:
            continue
        check = validator(schema)
        for msg in read_topic(kafka, topic):
            where = f"{topic}[{msg.partition()}]@{msg.offset()}"
            try:
                value = loads_exact(msg.value() or b"")
            except EnvelopeError as exc:
                problems.append(f"{where}: {exc}")
                continue
            problems += [f"{where}: {p}" for p in check(value)[:3]]
    return problems


@pytest.fixture
def topics(stack: Addresses, request: pytest.FixtureRequest) -> Iterator[Topics]:
    """The system's topics under a prefix unique to this test, deleted afterwards.

    Before they are deleted, every message the code wrote to them (rejections, run envelopes,
    dead letters: by this process or by the schedulers and workers the test ran) is checked
    against its schema in docs/schemas/: the hand-written codecs of `tickwheel.envelopes` and
    the published schemas agree on everything the suite produces. A test that puts messages of
    its own making on a topic names it with `@pytest.mark.foreign_messages("runs.normal")`.
    """
    foreign = {t for mark in request.node.iter_markers("foreign_messages") for t in mark.args}
    with unique_topics(stack.kafka, "t", partitions=2) as names:
        yield names
        if problems := off_schema(stack.kafka, names, foreign):
            pytest.fail(
                f"{len(problems)} message(s) off their schema (docs/schemas/):\n"
                + "\n".join(problems[:20]),
                pytrace=False,
            )
