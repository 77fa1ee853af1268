"""The Kafka registration intake: valid upserts land, bad ones are rejected with their bytes,
per-job order and versions hold, and a crash anywhere loses nothing and applies nothing twice."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest
from confluent_kafka import TopicPartition

from tickwheel.config import load_settings
from tickwheel.kafka.clients import consumer
from tickwheel.registry_api.service import intake_group
from tickwheel.registry_api.store import RegistryStore
from tickwheel.signatures import SIGNATURE_HEADER, sign
from tickwheel.stack import Addresses
from tickwheel.testing import drain, produce
from tickwheel.topics import Topics

from .conftest import run_intake_until, stack_settings

pytestmark = pytest.mark.integration

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")
# Signatures off, said explicitly: these tests are about the intake's batches, positions,
# versions and crashes, not about who may produce, and their registrations are unsigned. The
# signature tests below (and test_intake_replays.py) run with the default, which requires them.
UNSIGNED: dict[str, Any] = {"intake_require_signature": False}
UNSIGNED_ENV = {"TICKWHEEL_INTAKE_REQUIRE_SIGNATURE": "false"}


def _job(job_id: str, schedule: str = "*/5 * * * *", **extra: Any) -> dict[str, Any]:
    return {"id": job_id, "schedule": schedule, "handler": "demo.echo", **extra}


def _upsert(tenant: str, job: dict[str, Any], version: int | None = None) -> bytes:
    body: dict[str, Any] = {"op": "upsert", "tenant": tenant, "job": job}
    if version is not None:
        body["version"] = version
    return orjson.dumps(body)


def _op(op: str, tenant: str, job_id: str, version: int | None = None) -> bytes:
    body: dict[str, Any] = {"op": op, "tenant": tenant, "id": job_id}
    if version is not None:
        body["version"] = version
    return orjson.dumps(body)


def _committed(kafka: str, group: str, topic: str, partitions: int = 2) -> list[int]:
    cons = consumer(kafka, group, **{"enable.auto.commit": False})
    try:
        tps = cons.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in tps]
    finally:
        cons.close()


def _end_offsets(kafka: str, topic: str, partitions: int = 2) -> list[int]:
    cons = consumer(kafka, f"w-{uuid.uuid4()}", **{"enable.auto.commit": False})
    try:
        return [
            cons.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        cons.close()


@pytest.fixture
def tenant_names() -> Iterator[tuple[str, str]]:
    yield f"t{uuid.uuid4().hex[:10]}", f"u{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def store(db_dsn: str) -> AsyncIterator[RegistryStore]:
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=4)
    yield RegistryStore(pool, shards=16)
    await pool.close()


async def _jobs(db_dsn: str, tenant: str) -> dict[str, asyncpg.Record]:
    conn = await asyncpg.connect(db_dsn)
    try:
        rows = await conn.fetch(
            "SELECT job_id, status, version, schedule, updated_at, "
            "intake_offset FROM jobs WHERE tenant = $1",
            tenant,
        )
    finally:
        await conn.close()
    return {r["job_id"]: r for r in rows}


async def test_mixed_batch_lands_valid_and_rejects_invalid(
    stack: Addresses,
    topics: Topics,
    db_dsn: str,
    store: RegistryStore,
    tenant_names: tuple[str, str],
) -> None:
    """valid upserts are in Postgres; each bad message is on the rejected topic with reason,
    source and its exact bytes; offsets are committed to the end"""
    tenant, _ = tenant_names
    await store.create_tenant(tenant)
    good = [(f"ok-{i}", _upsert(tenant, _job(f"ok-{i}"))) for i in range(50)]
    bad = [
        ("junk", b"\x00\xffnot json"),
        ("no-tenant", _upsert("nobody-" + uuid.uuid4().hex[:6], _job("x"))),
        ("bad-cron", _upsert(tenant, _job("bad-cron", schedule="61 * * * *"))),
        ("bad-field", _upsert(tenant, {**_job("bad-field"), "colour": "red"})),
        ("ghost", _op("pause", tenant, "ghost")),
        ("bad-op", b'{"op": "explode", "tenant": "x", "id": "y"}'),
        ("null-payload", _upsert(tenant, _job("null-payload", payload=None))),
        ("nul-char", _upsert(tenant, _job("nul-char", payload={"s": "a\u0000b"}))),
        (
            "huge-int",
            b'{"op": "upsert", "tenant": "%s", "job": {"id": "huge-int", '
            b'"schedule": "* * * * *", "handler": "h.x", "payload": '
            b'{"n": 123456789012345678901234567890}}}' % tenant.encode(),
        ),
    ]
    produce(stack.kafka, topics.registrations, good[:25] + bad + good[25:])
    settings = stack_settings(stack, db_dsn, topics, **UNSIGNED)
    total = len(good) + len(bad)

    await run_intake_until(settings, store, total)
    jobs = await _jobs(db_dsn, tenant)
    assert set(jobs) == {key for key, _ in good}
    assert all(j["status"] == "active" and j["version"] == 1 for j in jobs.values())

    rejected = drain(stack.kafka, topics.rejected, expect=len(bad))
    bodies = [orjson.loads(m.value()) for m in rejected]
    originals = {base64.b64decode(b["original"]) for b in bodies}
    assert originals == {value for _, value in bad}
    assert len(bodies) == len(bad)
    reasons = {base64.b64decode(b["original"]): b["reason"] for b in bodies}
    assert "not JSON" in reasons[bad[0][1]]
    assert "does not exist" in reasons[bad[1][1]]
    assert reasons[bad[2][1]].startswith("schedule")
    assert "colour" in reasons[bad[3][1]]
    assert "no such job" in reasons[bad[4][1]]
    assert "'op' must be one of" in reasons[bad[5][1]]
    assert "must not be null" in reasons[bad[6][1]]
    assert "NUL" in reasons[bad[7][1]]
    assert "64-bit" in reasons[bad[8][1]]
    for body in bodies:
        assert set(body["source"]) == {"partition", "offset"}
    assert _committed(stack.kafka, intake_group(settings), topics.registrations) == _end_offsets(
        stack.kafka, topics.registrations
    )


async def test_per_job_order_and_versions(
    stack: Addresses,
    topics: Topics,
    db_dsn: str,
    store: RegistryStore,
    tenant_names: tuple[str, str],
) -> None:
    """ops on one job apply in topic order; an older explicit version changes nothing and is
    rejected as stale (the only rejection)"""
    tenant, _ = tenant_names
    await store.create_tenant(tenant)
    messages = [
        ("v", _upsert(tenant, _job("v", schedule="1 * * * *"), version=1)),
        ("v", _upsert(tenant, _job("v", schedule="3 * * * *"), version=3)),
        ("v", _upsert(tenant, _job("v", schedule="2 * * * *"), version=2)),  # stale
        ("seq", _upsert(tenant, _job("seq"))),
        ("seq", _op("pause", tenant, "seq")),
        ("seq", _op("resume", tenant, "seq")),
        ("seq", _upsert(tenant, _job("seq", schedule="7 * * * *"))),
        ("gone", _upsert(tenant, _job("gone"))),
        ("gone", _op("delete", tenant, "gone")),
    ]
    produce(stack.kafka, topics.registrations, messages)
    settings = stack_settings(stack, db_dsn, topics, **UNSIGNED)

    await run_intake_until(settings, store, len(messages))
    jobs = await _jobs(db_dsn, tenant)
    assert (jobs["v"]["schedule"], jobs["v"]["version"]) == ("3 * * * *", 3)
    assert (jobs["seq"]["schedule"], jobs["seq"]["status"], jobs["seq"]["version"]) == (
        "7 * * * *",
        "active",
        4,
    )
    assert jobs["gone"]["status"] == "deleted"
    (rejected,) = [orjson.loads(m.value()) for m in drain(stack.kafka, topics.rejected)]
    assert rejected["reason"].startswith("stale: version 2 of job 'v'"), rejected["reason"]


@pytest.mark.parametrize("point", ["intake_after_db", "intake_before_offsets"])
async def test_crash_before_offsets_loses_nothing_and_applies_nothing_twice(
    point: str,
    stack: Addresses,
    topics: Topics,
    db_dsn: str,
    store: RegistryStore,
    tenant_names: tuple[str, str],
) -> None:
    """a registry killed between its DB write and its offset commit is restarted: every job is
    there once, versions are not bumped again, every rejection is published"""
    tenant, _ = tenant_names
    await store.create_tenant(tenant)
    messages = [
        ("a", _upsert(tenant, _job("a"))),
        ("a", _upsert(tenant, _job("a", schedule="9 * * * *"))),
        ("b", _upsert(tenant, _job("b"))),
        ("b", _op("pause", tenant, "b")),
        ("bad", _upsert(tenant, _job("bad", schedule="not cron"))),
    ]
    produce(stack.kafka, topics.registrations, messages)
    env = {
        **os.environ,
        "TICKWHEEL_DSN": db_dsn,
        "TICKWHEEL_KAFKA": stack.kafka,
        "TICKWHEEL_ZK": stack.zk,
        "TICKWHEEL_TOPIC_PREFIX": topics.prefix,
        "TICKWHEEL_SHARDS": "16",
        "TICKWHEEL_KAFKA_SESSION_TIMEOUT_MS": "6000",
        **UNSIGNED_ENV,
    }
    crashed = subprocess.run(
        [TICKWHEEL, "registry", "--no-http"],
        env={**env, "TICKWHEEL_FAULT": point},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert crashed.returncode == 86, crashed.stderr[-2000:]
    after_crash = await _jobs(db_dsn, tenant)
    assert {k: (r["version"], r["status"]) for k, r in after_crash.items()} == {
        "a": (2, "active"),
        "b": (2, "paused"),
    }
    settings = load_settings(
        **{
            k.removeprefix("TICKWHEEL_").lower(): v
            for k, v in env.items()
            if k in {"TICKWHEEL_DSN", "TICKWHEEL_KAFKA", "TICKWHEEL_ZK", "TICKWHEEL_TOPIC_PREFIX"}
        }
    )
    assert all(
        o < 0 for o in _committed(stack.kafka, intake_group(settings), topics.registrations)
    ), "nothing may be committed yet"

    restarted = subprocess.Popen(
        [TICKWHEEL, "registry", "--no-http"], env=env, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while sum(
            max(0, o) for o in _committed(stack.kafka, intake_group(settings), topics.registrations)
        ) < len(messages):
            assert time.monotonic() < deadline, "restarted intake did not commit"
            assert restarted.poll() is None
            time.sleep(0.3)
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(60)
    assert restarted.returncode == 0
    after_restart = await _jobs(db_dsn, tenant)
    assert {k: (r["version"], r["status"], r["updated_at"]) for k, r in after_restart.items()} == {
        k: (r["version"], r["status"], r["updated_at"]) for k, r in after_crash.items()
    }
    rejected = [orjson.loads(m.value()) for m in drain(stack.kafka, topics.rejected, expect=1)]
    assert {base64.b64decode(r["original"]) for r in rejected} == {messages[4][1]}
    # A crash after publishing may publish the same rejection again: at-least-once, and
    # the source position says it is the same message.
    assert len({(r["source"]["partition"], r["source"]["offset"]) for r in rejected}) == 1


class _PoisonedStore(RegistryStore):
    """A real store whose database refuses any batch holding the job `poison` (a data error)."""

    async def apply(self, ops: Any, *args: Any, **kwargs: Any) -> Any:
        # The intake's call (ops, plan) and its op-by-op retries reach here: the data error,
        # not a TypeError from this double, is what sends the batch op by op.
        if any(op.job_id == "poison" for op in ops):
            raise asyncpg.DataError("value refused by the database")
        return await super().apply(ops, *args, **kwargs)


async def test_a_batch_refused_by_the_database_rejects_only_the_culprit(
    stack: Addresses,
    topics: Topics,
    db_dsn: str,
    store: RegistryStore,
    tenant_names: tuple[str, str],
) -> None:
    """a data error fails the batch, the intake retries op by op: the culprit is rejected and
    every other registration lands (one bad message never stalls a partition)"""
    tenant, _ = tenant_names
    await store.create_tenant(tenant)
    messages = [(f"j{i}", _upsert(tenant, _job(f"j{i}"))) for i in range(5)]
    messages.insert(2, ("poison", _upsert(tenant, _job("poison"))))
    produce(stack.kafka, topics.registrations, messages)
    settings = stack_settings(stack, db_dsn, topics, **UNSIGNED)
    poisoned = _PoisonedStore(store.pool, shards=16)

    await run_intake_until(settings, poisoned, len(messages))
    assert set(await _jobs(db_dsn, tenant)) == {f"j{i}" for i in range(5)}
    rejected = [orjson.loads(m.value()) for m in drain(stack.kafka, topics.rejected, expect=1)]
    assert [r["reason"] for r in rejected] == [
        "the database refused it: value refused by the database"
    ]


def _signed_by(
    api_key: str, value: bytes, topic: str, **form: Any
) -> list[tuple[str, str | bytes | None]]:
    name, header = sign(value, api_key, topic=topic, **form)
    return [(name, header)]


async def test_signed_registrations_apply_only_under_an_active_key_of_their_tenant(
    stack: Addresses,
    topics: Topics,
    db_dsn: str,
    store: RegistryStore,
    tenant_names: tuple[str, str],
) -> None:
    """by default (signatures required): a registration signed with a key of its tenant lands;
    unsigned,
    signed with another tenant's key, with a revoked key, over other bytes, or with a
    malformed header, it is rejected with its reason and stores nothing"""
    tenant, other = tenant_names
    gone = f"g{uuid.uuid4().hex[:10]}"
    key = await store.create_tenant(tenant)
    other_key = await store.create_tenant(other)
    gone_key = await store.create_tenant(gone)
    await store.revoke_key(gone_key)
    good = _upsert(tenant, _job("good"))
    cases = {
        "unsigned": (_upsert(tenant, _job("unsigned")), None),
        "cross": (_upsert(tenant, _job("cross")), other_key),
        "revoked": (_upsert(gone, _job("revoked")), gone_key),
        "tampered": (_upsert(tenant, _job("tampered")), "tamper"),
        "malformed": (_upsert(tenant, _job("malformed")), "malformed"),
    }
    signed = topics.registrations
    produce(stack.kafka, signed, [("good", good)], _signed_by(key, good, signed))
    for name, (value, signer) in cases.items():
        if signer is None:
            headers = None
        elif signer == "tamper":
            headers = _signed_by(key, good, signed)  # a real signature, of other bytes
        elif signer == "malformed":
            headers = [(SIGNATURE_HEADER, b"tw_short:abc")]
        else:
            headers = _signed_by(signer, value, signed)
        produce(stack.kafka, topics.registrations, [(name, value)], headers)
    settings = stack_settings(stack, db_dsn, topics)  # the default: signatures required
    await run_intake_until(settings, store, 1 + len(cases))
    assert set(await _jobs(db_dsn, tenant)) == {"good"}
    assert not await _jobs(db_dsn, gone)
    bodies = [orjson.loads(m.value()) for m in drain(stack.kafka, topics.rejected, expect=5)]
    reasons = {base64.b64decode(b["original"]): b["reason"] for b in bodies}
    assert len(bodies) == len(cases)
    assert reasons[cases["unsigned"][0]].startswith("unsigned")
    assert "another tenant" in reasons[cases["cross"][0]]
    assert reasons[cases["revoked"][0]].startswith("signature does not verify")
    assert reasons[cases["tampered"][0]].startswith("signature does not verify")
    assert SIGNATURE_HEADER in reasons[cases["malformed"][0]]
    assert not any(k in r for k in (key, other_key, gone_key) for r in reasons.values())


async def test_unsigned_registrations_pass_when_signatures_are_not_required(
    stack: Addresses,
    topics: Topics,
    db_dsn: str,
    store: RegistryStore,
    tenant_names: tuple[str, str],
) -> None:
    """signatures turned off (TICKWHEEL_INTAKE_REQUIRE_SIGNATURE=false): an unsigned
    registration lands, a signed one is still checked (another tenant's key is rejected)"""
    tenant, other = tenant_names
    await store.create_tenant(tenant)
    other_key = await store.create_tenant(other)
    plain = _upsert(tenant, _job("plain"))
    forged = _upsert(tenant, _job("forged"))
    produce(stack.kafka, topics.registrations, [("plain", plain)])
    produce(
        stack.kafka,
        topics.registrations,
        [("forged", forged)],
        _signed_by(other_key, forged, topics.registrations),
    )
    settings = stack_settings(stack, db_dsn, topics, **UNSIGNED)
    await run_intake_until(settings, store, 2)
    assert set(await _jobs(db_dsn, tenant)) == {"plain"}
    (body,) = [orjson.loads(m.value()) for m in drain(stack.kafka, topics.rejected, expect=1)]
    assert base64.b64decode(body["original"]) == forged
    assert "another tenant" in body["reason"]


async def test_a_pause_over_kafka_keeps_its_note_and_a_bad_note_is_rejected(
    stack: Addresses,
    topics: Topics,
    db_dsn: str,
    store: RegistryStore,
    tenant_names: tuple[str, str],
) -> None:
    """`{"op": "pause", "note": …}` pauses the job and keeps why, by the tenant via Kafka,
    beside the paused version; a note on another op, or a note of 501 characters, is rejected
    naming it, and changes nothing"""
    tenant, _ = tenant_names
    await store.create_tenant(tenant)
    noted = orjson.loads(_op("pause", tenant, "a"))
    messages = [
        ("a", _upsert(tenant, _job("a"))),
        ("b", _upsert(tenant, _job("b"))),
        ("a", orjson.dumps({**noted, "note": "the partner API is down\nuntil Monday"})),
        ("b", orjson.dumps({**orjson.loads(_op("resume", tenant, "b")), "note": "no"})),
        ("b", orjson.dumps({**orjson.loads(_op("pause", tenant, "b")), "note": "x" * 501})),
    ]
    produce(stack.kafka, topics.registrations, messages)
    settings = stack_settings(stack, db_dsn, topics, **UNSIGNED)
    await run_intake_until(settings, store, len(messages))
    jobs = await _jobs(db_dsn, tenant)
    assert (jobs["a"]["status"], jobs["b"]["status"]) == ("paused", "active")
    view = await store.get(tenant, "a")
    assert view is not None and view.pause_note is not None
    assert view.pause_note[:2] == (
        f"{tenant} (Kafka registration)",
        "the partner API is down\nuntil Monday",
    )
    reasons = sorted(orjson.loads(m.value())["reason"] for m in drain(stack.kafka, topics.rejected))
    assert len(reasons) == 2
    assert any("'note' applies to op 'pause' only" in r for r in reasons), reasons
    assert any("note: must be 1 to 500 characters" in r for r in reasons), reasons
