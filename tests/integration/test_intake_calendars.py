"""Calendar registrations over Kafka (issue 50 item 1, D-286): put_calendar and delete_calendar
applied at their place among a batch's job ops, refused with a reason naming the field or the
jobs, a redelivery changing nothing, and the tenant's signature binding them."""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import orjson
import pytest

from tickwheel.registry_api import calendars
from tickwheel.registry_api.intake import BatchReport
from tickwheel.registry_api.store import RegistryStore
from tickwheel.signatures import sign
from tickwheel.stack import Addresses
from tickwheel.testing import drain, produce
from tickwheel.topics import Topics

from .conftest import rewind_intake, run_intake_until, stack_settings

pytestmark = pytest.mark.integration

UNSIGNED: dict[str, Any] = {"intake_require_signature": False}
HOLIDAYS = {"timezone": "Europe/Berlin", "dates": ["2026-12-25", "2026-12-26"]}
KEY = "one-partition"  # every message of a test on one partition: the batch's order is theirs


@pytest.fixture
async def store(db_dsn: str) -> AsyncIterator[RegistryStore]:
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=4)
    yield RegistryStore(pool, shards=16)
    await pool.close()


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def _put(tenant: str, name: str, calendar: Any) -> bytes:
    body = {"op": "put_calendar", "tenant": tenant, "name": name, "calendar": calendar}
    return orjson.dumps(body)


def _delete(tenant: str, name: str, force: bool | None = None) -> bytes:
    body: dict[str, Any] = {"op": "delete_calendar", "tenant": tenant, "name": name}
    if force is not None:
        body["force"] = force
    return orjson.dumps(body)


def _upsert(tenant: str, job_id: str, *names: str) -> bytes:
    job = {"id": job_id, "schedule": "0 3 * * *", "handler": "demo.echo", "calendars": list(names)}
    return orjson.dumps({"op": "upsert", "tenant": tenant, "job": job})


def _rejections(stack: Addresses, topics: Topics, expect: int) -> dict[bytes, str]:
    """The rejected topic: original bytes -> reason."""
    bodies = [orjson.loads(m.value()) for m in drain(stack.kafka, topics.rejected, expect=expect)]
    assert len(bodies) == expect, bodies
    return {base64.b64decode(b["original"]): b["reason"] for b in bodies}


async def _job_ids(store: RegistryStore, tenant: str) -> set[str]:
    rows = await store.pool.fetch(
        "SELECT job_id FROM jobs WHERE tenant = $1 AND status <> 'deleted'", tenant
    )
    return {r["job_id"] for r in rows}


async def test_a_calendar_and_a_job_naming_it_apply_in_one_batch(
    stack: Addresses, topics: Topics, db_dsn: str, store: RegistryStore, tenant: str
) -> None:
    """in one batch: a put_calendar, then a job naming it lands; a delete of it is refused
    naming that job; a job naming a calendar deleted earlier in the batch is refused; a job
    before the calendar's creation is refused too (each op sees exactly what came before)"""
    await store.create_tenant(tenant)
    messages = [
        _upsert(tenant, "too-early", "holidays"),
        _put(tenant, "holidays", HOLIDAYS),
        _upsert(tenant, "nightly", "holidays"),
        _delete(tenant, "holidays"),
        _put(tenant, "brief", {"weekdays": ["sun"]}),
        _delete(tenant, "brief"),
        _upsert(tenant, "too-late", "brief"),
        _upsert(tenant, "plain"),
    ]
    produce(stack.kafka, topics.registrations, [(KEY, m) for m in messages])
    reports: list[BatchReport] = []
    settings = stack_settings(stack, db_dsn, topics, **UNSIGNED)

    await run_intake_until(settings, store, len(messages), on_batch=reports.append)

    assert [r.messages for r in reports] == [len(messages)]  # one batch
    assert await _job_ids(store, tenant) == {"nightly", "plain"}
    held = await calendars.get(store.pool, tenant, "holidays")
    assert held is not None and held.document["dates"] == HOLIDAYS["dates"]
    assert await calendars.get(store.pool, tenant, "brief") is None
    reasons = _rejections(stack, topics, expect=3)
    assert "calendars" in reasons[messages[0]] and "holidays" in reasons[messages[0]]
    assert reasons[messages[3]].startswith("delete_calendar of calendar 'holidays': jobs still")
    assert "'nightly'" in reasons[messages[3]]
    assert "brief" in reasons[messages[6]]
    assert reports[0].outcomes["calendar_created"] == 2
    assert reports[0].outcomes["calendar_deleted"] == 1


async def test_refusals_name_the_field_or_the_jobs_and_the_next_message_applies(
    stack: Addresses, topics: Topics, db_dsn: str, store: RegistryStore, tenant: str
) -> None:
    """an invalid calendar is rejected naming the message's field, a bad name naming `name`,
    a delete of no calendar as such; the messages after each still apply, and force deletes a
    calendar jobs name"""
    await store.create_tenant(tenant)
    bad_zone = _put(tenant, "zoned", {"timezone": "Mars/Olympus"})
    bad_shape = _put(tenant, "shaped", {"weekdays": ["someday"], "colour": "red"})
    bad_name = _put(tenant, ".hidden", {})
    ghost = _delete(tenant, "ghost")
    messages = [
        bad_zone,
        _put(tenant, "after-zone", {}),
        bad_shape,
        bad_name,
        ghost,
        _put(tenant, "named", HOLIDAYS),
        _upsert(tenant, "uses-it", "named"),
        _delete(tenant, "named", force=True),
    ]
    produce(stack.kafka, topics.registrations, [(KEY, m) for m in messages])
    settings = stack_settings(stack, db_dsn, topics, **UNSIGNED)

    await run_intake_until(settings, store, len(messages))

    names = {c.name for c in await calendars.list_all(store.pool, tenant)}
    assert names == {"after-zone"}
    assert await _job_ids(store, tenant) == {"uses-it"}
    reasons = _rejections(stack, topics, expect=4)
    assert reasons[bad_zone].startswith("calendar.timezone"), reasons[bad_zone]
    assert "calendar.weekdays.0" in reasons[bad_shape] and "calendar.colour" in reasons[bad_shape]
    assert reasons[bad_name].startswith("name: '.hidden' is not a calendar name")
    assert reasons[ghost] == "delete_calendar of calendar 'ghost': no such calendar"


async def test_a_redelivered_calendar_op_changes_nothing(
    stack: Addresses, topics: Topics, db_dsn: str, store: RegistryStore, tenant: str
) -> None:
    """the whole topic delivered again (the intake's group rewound): each calendar op applied
    before is a replay, and neither the kept calendar nor the deleted one's row moves"""
    await store.create_tenant(tenant)
    messages = [
        _put(tenant, "kept", HOLIDAYS),
        _put(tenant, "kept", {**HOLIDAYS, "weekdays": ["sat"]}),
        _put(tenant, "gone", {}),
        _delete(tenant, "gone"),
        _delete(tenant, "never"),
    ]
    produce(stack.kafka, topics.registrations, [(KEY, m) for m in messages])
    settings = stack_settings(stack, db_dsn, topics, **UNSIGNED)
    await run_intake_until(settings, store, len(messages))
    first = await calendars.get(store.pool, tenant, "kept")
    assert first is not None and first.version == 2
    deleted = await store.pool.fetchrow(
        "SELECT version, updated_at FROM calendars WHERE tenant = $1 AND name = 'gone'", tenant
    )

    rewind_intake(settings)
    reports: list[BatchReport] = []
    await run_intake_until(settings, store, len(messages), on_batch=reports.append)

    again = await calendars.get(store.pool, tenant, "kept")
    assert again == first
    assert await calendars.get(store.pool, tenant, "gone") is None
    assert deleted == await store.pool.fetchrow(
        "SELECT version, updated_at FROM calendars WHERE tenant = $1 AND name = 'gone'", tenant
    )
    outcomes: dict[str, int] = {}
    for report in reports:
        for name, count in report.outcomes.items():
            outcomes[name] = outcomes.get(name, 0) + count
    # the refused delete of "never" left no trace: decided again, refused again
    assert outcomes == {"calendar_replay": 4, "calendar_not_found": 1}


async def test_a_signature_binds_a_calendar_op_to_its_tenant(
    stack: Addresses, topics: Topics, db_dsn: str, store: RegistryStore, tenant: str
) -> None:
    """signatures required: a calendar op signed with its tenant's key applies; one naming a
    tenant whose key did not sign it, or unsigned, is rejected and touches no calendar"""
    other = f"u{uuid.uuid4().hex[:10]}"
    key = await store.create_tenant(tenant)
    await store.create_tenant(other)
    topic = topics.registrations
    own = _put(tenant, "own", HOLIDAYS)
    forged = _put(other, "forged", HOLIDAYS)
    forged_delete = _delete(other, "theirs")
    unsigned = _put(tenant, "unsigned", HOLIDAYS)
    await calendars.put(store.pool, other, "theirs", calendars.check_calendar("theirs", {}))
    for value in (own, forged, forged_delete):
        produce(stack.kafka, topic, [(KEY, value)], [sign(value, key, topic=topic)])
    produce(stack.kafka, topic, [(KEY, unsigned)])
    settings = stack_settings(stack, db_dsn, topics)  # the default: signatures required

    await run_intake_until(settings, store, 4)

    assert [c.name for c in await calendars.list_all(store.pool, tenant)] == ["own"]
    assert [c.name for c in await calendars.list_all(store.pool, other)] == ["theirs"]
    reasons = _rejections(stack, topics, expect=3)
    assert "another tenant" in reasons[forged] and "another tenant" in reasons[forged_delete]
    assert reasons[unsigned].startswith("unsigned")
