"""Registrations fuzzed with hypothesis on the Kafka intake: every message is either applied or
rejected with a reason (never both, never neither), and the intake keeps running."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import asyncpg
import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tickwheel.config import Settings, load_settings
from tickwheel.registry_api.store import RegistryStore
from tickwheel.stack import Addresses
from tickwheel.testing import drain, produce
from tickwheel.topics import Topics

from .test_intake_poison import SHARDS, _jobs, _settled, registry

pytestmark = pytest.mark.integration

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
JOB_FIELDS = ["schedule", "handler", "payload", "timezone", "priority", "misfire", "retry", "at"]
BODY_FIELDS = ["op", "tenant", "version"]


@st.composite
def registration(draw: st.DrawFn, tenant: str, job_id: str) -> bytes:
    """A valid upsert with one job or body field replaced or removed, or a field added."""
    job: dict[str, Any] = {"id": job_id, "schedule": "*/5 * * * *", "handler": "demo.echo"}
    body: dict[str, Any] = {"op": "upsert", "tenant": tenant, "job": job}
    where = draw(st.sampled_from(["job", "body", "add", "keep"]))
    if where == "job":
        field = draw(st.sampled_from(JOB_FIELDS))
        if draw(st.booleans()):
            job[field] = draw(json_values)
        else:
            job.pop(field, None)
    elif where == "body":
        field = draw(st.sampled_from(BODY_FIELDS))
        body[field] = draw(json_values)
    elif where == "add":
        job[draw(st.text(min_size=1, max_size=10))] = draw(json_values)
    try:
        return orjson.dumps(body)
    except TypeError:  # an integer beyond 64 bits, which orjson cannot write: the stdlib can,
        return json.dumps(body).encode()  # and the registry must refuse it, naming the field


@pytest.fixture
def intake_settings(stack: Addresses, topics: Topics, db_dsn: str) -> Settings:
    # Signatures off, said explicitly: the fuzzing is about what the intake makes of any bytes, not
    # about who may produce; its registrations are unsigned (signatures: test_intake.py,
    # test_intake_replays.py, with the default).
    return load_settings(
        dsn=db_dsn,
        kafka=stack.kafka,
        zk=stack.zk,
        topic_prefix=topics.prefix,
        shards=SHARDS,
        kafka_session_timeout_ms=6000,
        intake_require_signature=False,
    )


@settings(
    max_examples=3,
    deadline=None,
    # No shrinking: each example runs the intake on the real stack.
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzzed_registrations_are_applied_or_rejected_once(
    data: st.DataObject, stack: Addresses, intake_settings: Settings, db_dsn: str
) -> None:
    """stored jobs plus rejections equal the messages sent; each rejection names a reason"""
    config = intake_settings
    tenant = f"z{uuid.uuid4().hex[:10]}"
    ids = [f"{tenant}-{n}" for n in range(data.draw(st.integers(1, 20)))]
    messages = [(job_id, data.draw(registration(tenant, job_id))) for job_id in ids]

    async def scenario() -> tuple[int, list[Any]]:
        pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=4)
        try:
            store = RegistryStore(pool, shards=SHARDS)
            await store.create_tenant(tenant)
            async with registry(config, store) as process:
                produce(stack.kafka, config.topic_prefix + ".registrations", messages)
                await _settled(config, process)
        finally:
            await pool.close()
        jobs = await _jobs(db_dsn, tenant)
        return len(jobs), []

    stored, _ = asyncio.run(scenario())
    topic = config.topic_prefix + ".registrations.rejected"
    keys = {job_id.encode() for job_id in ids}
    # Earlier examples' rejections share the topic: ours are those keyed by our job ids.
    ours = [
        orjson.loads(m.value() or b"")
        for m in drain(stack.kafka, topic, expect=len(messages) - stored)
        if m.key() in keys
    ]
    assert all(r["reason"] for r in ours)
    assert stored + len(ours) == len(messages), (stored, [r["reason"] for r in ours])
