"""Signed registrations cannot be replayed (issue 28, finding 3), with signatures required.

A producer-side attacker who captured signed messages produces them again, byte for byte with
their headers: an unversioned upsert after a later change, a delete after the job was created
again, a pause after a resume, an unkeyed trigger, a message signed for another deployment.
Each copy is rejected with its reason and changes nothing, while the same
messages redelivered at their own positions (a consumer group moved back) stay no-ops as
before."""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import orjson
import pytest

from tickwheel.clock import now_ms
from tickwheel.config import Settings
from tickwheel.registry_api.store import RegistryStore
from tickwheel.signatures import SIGNATURE_HEADER, sign
from tickwheel.stack import Addresses
from tickwheel.testing import drain, produce
from tickwheel.topics import Topics

from .conftest import rewind_intake, run_intake_until, stack_settings

pytestmark = pytest.mark.integration

SHARDS = 16
WINDOW_S = 3600  # the signature window these tests run with


def _settings(stack: Addresses, db_dsn: str, topics: Topics) -> Settings:
    return stack_settings(
        stack,
        db_dsn,
        topics,
        intake_require_signature=True,
        intake_signature_window_s=WINDOW_S,
    )


@pytest.fixture
async def store(db_dsn: str) -> AsyncIterator[RegistryStore]:
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=4)
    yield RegistryStore(pool, shards=SHARDS)
    await pool.close()


class Signer:
    """Signed messages of one tenant, kept as produced so that they can be produced again."""

    def __init__(self, tenant: str, api_key: str, topic: str) -> None:
        self.tenant, self.api_key, self.topic = tenant, api_key, topic

    def message(self, body: dict[str, Any], **form: Any) -> tuple[bytes, list[Any]]:
        value = orjson.dumps({"tenant": self.tenant, **body})
        form.setdefault("topic", self.topic)
        return value, [sign(value, self.api_key, **form)]


def _job(job_id: str, schedule: str) -> dict[str, Any]:
    return {"id": job_id, "schedule": schedule, "handler": "demo.echo"}


async def _jobs(store: RegistryStore, tenant: str) -> dict[str, tuple[str, str]]:
    rows = await store.pool.fetch(
        "SELECT job_id, status, schedule FROM jobs WHERE tenant = $1", tenant
    )
    return {r["job_id"]: (r["status"], r["schedule"]) for r in rows}


def _reasons(stack: Addresses, topics: Topics, expect: int) -> dict[bytes, list[str]]:
    found: dict[bytes, list[str]] = {}
    for msg in drain(stack.kafka, topics.rejected, expect=expect):
        body = orjson.loads(msg.value() or b"")
        found.setdefault(base64.b64decode(body["original"]), []).append(body["reason"])
    return found


async def test_a_replayed_signed_registration_is_rejected_and_changes_nothing(
    stack: Addresses, topics: Topics, db_dsn: str, store: RegistryStore
) -> None:
    """issue 28 finding 3: with signatures required, a signed unversioned upsert produced
    again after a later change, a delete after the job was created again, a pause after a
    resume and an unkeyed trigger (twice in one batch, once later) are each rejected as
    replayed: the later change stands, the job lives, it stays active, one run was started"""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    signer = Signer(tenant, await store.create_tenant(tenant), topics.registrations)
    first_upsert = signer.message({"op": "upsert", "job": _job("config", "0 1 * * *")})
    later_upsert = signer.message({"op": "upsert", "job": _job("config", "0 2 * * *")})
    delete = signer.message({"op": "delete", "id": "gone"})
    pause = signer.message({"op": "pause", "id": "paused"})
    trigger = signer.message({"op": "trigger", "id": "runs"})
    first = [
        ("config", first_upsert),
        ("config", later_upsert),
        ("gone", signer.message({"op": "upsert", "job": _job("gone", "0 3 * * *")})),
        ("gone", delete),
        ("gone", signer.message({"op": "upsert", "job": _job("gone", "0 4 * * *")})),
        ("paused", signer.message({"op": "upsert", "job": _job("paused", "0 5 * * *")})),
        ("paused", pause),
        ("paused", signer.message({"op": "resume", "id": "paused"})),
        ("runs", signer.message({"op": "upsert", "job": _job("runs", "0 6 * * *")})),
        ("runs", trigger),
        ("runs", trigger),  # the same message twice in one stream: the copy is a replay
    ]
    for key, (value, headers) in first:
        produce(stack.kafka, topics.registrations, [(key, value)], headers)
    settings = _settings(stack, db_dsn, topics)
    await run_intake_until(settings, store, len(first))
    replays = [("config", first_upsert), ("gone", delete), ("paused", pause), ("runs", trigger)]
    for key, (value, headers) in replays:
        produce(stack.kafka, topics.registrations, [(key, value)], headers)
    await run_intake_until(settings, store, len(first) + len(replays))

    assert await _jobs(store, tenant) == {
        "config": ("active", "0 2 * * *"),
        "gone": ("active", "0 4 * * *"),
        "paused": ("active", "0 5 * * *"),
        "runs": ("active", "0 6 * * *"),
    }
    runs = await store.pool.fetchval("SELECT count(*) FROM job_runs WHERE tenant = $1", tenant)
    assert runs == 1
    reasons = _reasons(stack, topics, expect=5)
    assert sorted(len(v) for v in reasons.values()) == [1, 1, 1, 2]  # the trigger twice
    for value, _ in (first_upsert, delete, pause, trigger):
        assert all(r.startswith("replayed: message id") for r in reasons[value]), reasons
        assert all("a replay changes nothing" in r for r in reasons[value])


async def test_redelivered_signed_registrations_are_no_replays(
    stack: Addresses, topics: Topics, db_dsn: str, store: RegistryStore
) -> None:
    """issue 28 finding 3: the intake's group moved back to the start redelivers signed
    messages at their own positions: none is rejected, the unkeyed trigger starts no second
    run, and the jobs are as the first delivery left them"""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    signer = Signer(tenant, await store.create_tenant(tenant), topics.registrations)
    stream = [
        ("job", signer.message({"op": "upsert", "job": _job("job", "0 1 * * *")})),
        ("job", signer.message({"op": "pause", "id": "job"})),
        ("job", signer.message({"op": "trigger", "id": "job"})),
    ]
    for key, (value, headers) in stream:
        produce(stack.kafka, topics.registrations, [(key, value)], headers)
    settings = _settings(stack, db_dsn, topics)
    await run_intake_until(settings, store, len(stream))
    before = await _jobs(store, tenant)
    rewind_intake(settings)
    await run_intake_until(settings, store, len(stream))
    assert await _jobs(store, tenant) == before == {"job": ("paused", "0 1 * * *")}
    runs = await store.pool.fetchval("SELECT count(*) FROM job_runs WHERE tenant = $1", tenant)
    assert runs == 1
    assert drain(stack.kafka, topics.rejected, timeout_s=3) == []


async def test_signatures_that_do_not_bind_this_deployment_now_are_rejected(
    stack: Addresses, topics: Topics, db_dsn: str, store: RegistryStore
) -> None:
    """issue 28 finding 3: a message signed for another deployment's topic (a staging
    deployment given the same API keys), one signed in form 1 (the value alone), one signed
    longer ago than the window and one signed far ahead of the registry's clock are rejected,
    each with its reason, and store nothing"""
    tenant = f"t{uuid.uuid4().hex[:10]}"
    key = await store.create_tenant(tenant)
    signer = Signer(tenant, key, topics.registrations)
    other_deployment = signer.message(
        {"op": "upsert", "job": _job("other", "0 1 * * *")}, topic="staging.registrations"
    )
    expired = signer.message(
        {"op": "upsert", "job": _job("old", "0 1 * * *")},
        signed_at_ms=now_ms() - (WINDOW_S + 60) * 1000,
    )
    ahead = signer.message(
        {"op": "upsert", "job": _job("ahead", "0 1 * * *")}, signed_at_ms=now_ms() + 3_600_000
    )
    import hashlib
    import hmac

    from tickwheel.signatures import key_digest

    form_1_value = orjson.dumps({"op": "upsert", "tenant": tenant, "job": _job("v1", "0 1 * * *")})
    form_1_mac = hmac.new(key_digest(key), form_1_value, hashlib.sha256).hexdigest()
    form_1 = (form_1_value, [(SIGNATURE_HEADER, f"{key[:10]}:{form_1_mac}".encode())])
    good = signer.message({"op": "upsert", "job": _job("good", "0 1 * * *")})
    stream = [other_deployment, expired, ahead, form_1, good]
    for value, headers in stream:
        produce(stack.kafka, topics.registrations, [("k", value)], headers)
    await run_intake_until(_settings(stack, db_dsn, topics), store, len(stream))
    assert set(await _jobs(store, tenant)) == {"good"}
    reasons = {value: found for value, [found] in _reasons(stack, topics, expect=4).items()}
    assert reasons[other_deployment[0]].startswith("signature does not verify")
    assert reasons[expired[0]].startswith("expired: signed at")
    assert "ahead of the registry's clock" in reasons[ahead[0]]
    assert "form 1" in reasons[form_1[0]] and "replayed" in reasons[form_1[0]]


async def test_gc_removes_the_message_ids_past_their_expiry(db_dsn: str) -> None:
    """the retention (tickwheel gc, daily on shard 0's leader) removes the message ids whose
    signature window is over and keeps the others"""
    from tickwheel.maintenance import run_gc

    tenant = f"t{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(db_dsn)
    try:
        await conn.execute(
            "INSERT INTO registration_ids (tenant, message_id, source_topic, source_partition,"
            " source_offset, signed_at, expires_at) VALUES"
            " ($1, 'expired-0000000000', 't', 0, 1, now() - interval '2 days',"
            "  now() - interval '1 day'),"
            " ($1, 'current-0000000000', 't', 0, 2, now(), now() + interval '1 day')",
            tenant,
        )
        report = await run_gc(conn, retention_days=30)
        left = await conn.fetch("SELECT message_id FROM registration_ids WHERE tenant = $1", tenant)
    finally:
        await conn.close()
    assert report.removed_registration_ids >= 1
    assert [r["message_id"] for r in left] == ["current-0000000000"]


async def test_a_registry_with_a_wider_window_opens_no_gap_for_a_replay(
    stack: Addresses, topics: Topics, db_dsn: str, store: RegistryStore
) -> None:
    """issue 48: ids are kept for the widest window any registry of the deployment took (the
    retention keeps an id a narrow registry remembered while a wide one may still take its
    message), and a registry that widened the memory refuses messages signed before the
    memory was complete for it, since a narrower registry may have forgotten their ids"""
    from tickwheel.maintenance import run_gc
    from tickwheel.signatures import FUTURE_SKEW_MS

    narrow_ms, wide_ms = 600_000 + FUTURE_SKEW_MS, WINDOW_S * 1000 + FUTURE_SKEW_MS
    first = await store.join_replay_memory(narrow_ms)
    assert first is not None and abs(first - (now_ms() - narrow_ms)) < 10_000
    tenant = f"t{uuid.uuid4().hex[:10]}"
    # What the narrow registry remembered 20 minutes ago, kept 15 minutes past its signing.
    await store.pool.execute(
        "INSERT INTO registration_ids (tenant, message_id, source_topic, source_partition,"
        " source_offset, signed_at, expires_at) VALUES ($1, 'narrow-0000000000', 't', 0, 1,"
        " now() - interval '20 minutes', now() - interval '5 minutes')",
        tenant,
    )
    widened = await store.join_replay_memory(wide_ms)
    assert widened is not None and abs(widened - (now_ms() - narrow_ms + 60_000)) < 10_000
    assert await store.join_replay_memory(narrow_ms) == widened  # a narrow one changes nothing
    conn = await asyncpg.connect(db_dsn)
    try:
        await run_gc(conn, retention_days=30)
    finally:
        await conn.close()
    kept = await store.pool.fetch("SELECT 1 FROM registration_ids WHERE tenant = $1", tenant)
    assert len(kept) == 1, "an id the wide registry may still be sent was removed"

    signer = Signer(tenant, await store.create_tenant(tenant), topics.registrations)
    too_early = signer.message(
        {"op": "upsert", "job": _job("early", "0 1 * * *")},
        signed_at_ms=widened - 120_000,  # inside the wide window, before the memory is whole
    )
    recent = signer.message({"op": "upsert", "job": _job("recent", "0 1 * * *")})
    for value, headers in (too_early, recent):
        produce(stack.kafka, topics.registrations, [("k", value)], headers)
    await run_intake_until(_settings(stack, db_dsn, topics), store, 2)
    assert set(await _jobs(store, tenant)) == {"recent"}
    [[reason]] = _reasons(stack, topics, expect=1).values()
    assert "this deployment's memory of message ids is complete" in reason
