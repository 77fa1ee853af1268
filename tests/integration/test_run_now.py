"""Run now and backfill (registry_api/on_demand.py) against real services: the HTTP endpoints
and the Kafka ops write run rows, a real scheduler dispatches them and a real `tickwheel worker`
executes them, each once, under the right run key and with its origin recorded."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from tickwheel.clock import datetime_to_ms, format_ms, now_ms
from tickwheel.domain import run_key
from tickwheel.envelopes.registrations import Rejection
from tickwheel.kafka.clients import consumer, producer
from tickwheel.registry_api.document import Limits
from tickwheel.registry_api.http import create_app
from tickwheel.registry_api.on_demand import RunLimits
from tickwheel.registry_api.store import RegistryStore, hash_key

from .conftest import (
    TEST_SHARDS,
    TICKWHEEL,
    SchedEnv,
    rewind_intake,
    run_intake_until,
    running_scheduler,
    wait_for,
)

pytestmark = pytest.mark.integration

DAY_MS = 86_400_000
TEST_RATE_PER_S = 50.0  # backfill release rate in these tests: runs per second


def _daily(job_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": job_id, "schedule": "0 12 * * *", "handler": "test.record", **extra}


def _midnight_days_ago(days: int) -> int:
    """UTC ms of 00:00Z `days` days before today."""
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return datetime_to_ms(today) - days * DAY_MS


@contextlib.asynccontextmanager
async def _api(
    sched: SchedEnv, limits: RunLimits | None = None
) -> AsyncIterator[tuple[httpx.AsyncClient, RegistryStore]]:
    """The registry's HTTP app on this test's database, with a client for its tenant."""
    pool = await asyncpg.create_pool(sched.dsn, min_size=1, max_size=4)
    store = RegistryStore(
        pool, TEST_SHARDS, runs=limits or RunLimits(backfill_rate_per_s=TEST_RATE_PER_S)
    )
    key = f"tw_{uuid.uuid4().hex}"
    await pool.execute(
        "INSERT INTO api_keys (key_hash, prefix, tenant) VALUES ($1, $2, $3)",
        hash_key(key),
        key[:10],
        sched.tenant,
    )
    app = create_app(store, Limits(shards=TEST_SHARDS))
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://registry.test",
        headers={"Authorization": f"Bearer {key}"},
    )
    try:
        yield client, store
    finally:
        await client.aclose()
        await pool.close()


async def _run_rows(sched: SchedEnv, job_id: str) -> dict[str, asyncpg.Record]:
    rows = await sched.fetch(
        "SELECT (extract(epoch FROM scheduled_at) * 1000)::bigint AS ms, status, attempt,"
        " origin, skip_reason, lease_until FROM job_runs WHERE tenant = $1 AND job_id = $2",
        sched.tenant,
        job_id,
    )
    return {run_key(sched.tenant, job_id, r["ms"]): r for r in rows}


async def test_trigger_and_backfill_run_once_each_through_scheduler_and_worker(
    sched: SchedEnv, tmp_path: Path
) -> None:
    """a trigger runs once with origin trigger (the same Idempotency-Key twice runs once, a
    paused job runs too); a backfill of three days of a daily job runs exactly its three
    occurrences under their own run keys, a second one runs nothing, an occurrence that
    already succeeded inside a range is not run again, and the CLI follows a backfill's
    dispatch to the end"""
    log = tmp_path / "executions.log"
    worker = sched.spawn_worker(log)
    await sched.register(_daily("daily"), _daily("sleepy"))
    await sched.op("pause", "sleepy")
    done_before = _midnight_days_ago(5) + 12 * 3_600_000
    await sched.fetch(
        "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status, attempt,"
        " epoch, finished_at, origin) SELECT tenant, job_id,"
        " 'epoch'::timestamptz + $3::bigint * interval '1 millisecond', shard_id, priority,"
        " 'succeeded', 1, 1, now(), 'schedule' FROM jobs WHERE tenant = $1 AND job_id = $2",
        sched.tenant,
        "daily",
        done_before,
    )
    async with _api(sched) as (client, _), running_scheduler(sched, "solo"):
        first = await client.post("/v1/jobs/daily/trigger", headers={"Idempotency-Key": "k-1"})
        again = await client.post("/v1/jobs/daily/trigger", headers={"Idempotency-Key": "k-1"})
        paused = await client.post("/v1/jobs/sleepy/trigger")
        assert first.status_code == 202, first.text
        assert again.status_code == 202 and again.json() == first.json()
        assert paused.status_code == 202, paused.text
        triggered = first.json()["run_key"]

        window = {"from": format_ms(_midnight_days_ago(10)), "to": format_ms(_midnight_days_ago(7))}
        filled = await client.post("/v1/jobs/daily/backfill", json=window)
        assert filled.status_code == 202, filled.text
        occurrences = [_midnight_days_ago(d) + 12 * 3_600_000 for d in (10, 9, 8)]
        expected = [run_key(sched.tenant, "daily", ms) for ms in occurrences]
        assert filled.json() == {
            "runs": 3,
            "occurrences": 3,
            "existing": 0,
            "first": expected[0],
            "last": expected[-1],
            "rate_per_s": TEST_RATE_PER_S,
        }
        second = await client.post("/v1/jobs/daily/backfill", json=window)
        assert second.status_code == 202
        assert (second.json()["runs"], second.json()["existing"]) == (0, 3)

        around = {"from": format_ms(_midnight_days_ago(6)), "to": format_ms(_midnight_days_ago(3))}
        partly = (await client.post("/v1/jobs/daily/backfill", json=around)).json()
        assert (partly["runs"], partly["occurrences"], partly["existing"]) == (2, 3, 1)

        # The CLI follows the dispatch until every run it created went out, then exits.
        followed = await asyncio.to_thread(
            _cli,
            sched,
            "jobs",
            "backfill",
            f"{sched.tenant}/daily",
            "--from",
            format_ms(_midnight_days_ago(13)),
            "--to",
            format_ms(_midnight_days_ago(11)),
            "--follow",
        )
        assert followed.returncode == 0, followed.stderr.decode()
        assert "created 2 run(s)" in followed.stdout.decode()
        assert "dispatching" in followed.stderr.decode()

        should_run = [triggered, paused.json()["run_key"], *expected]
        should_run += [
            run_key(sched.tenant, "daily", _midnight_days_ago(d) + 12 * 3_600_000) for d in (13, 12)
        ]
        should_run += [
            run_key(sched.tenant, "daily", _midnight_days_ago(d) + 12 * 3_600_000) for d in (6, 4)
        ]

        async def all_succeeded() -> bool:
            rows = {**await _run_rows(sched, "daily"), **await _run_rows(sched, "sleepy")}
            return all(k in rows and rows[k]["status"] == "succeeded" for k in should_run)

        try:
            await wait_for(all_succeeded, 40, what="triggered and backfilled runs succeeded")
        except AssertionError:
            rows = {**await _run_rows(sched, "daily"), **await _run_rows(sched, "sleepy")}
            raise AssertionError(
                f"runs: { {k: dict(r) for k, r in rows.items()} }\nworker log:\n"
                + sched.log_text("worker")[-3000:]
            ) from None
        runs_page = (await client.get("/v1/jobs/daily/runs")).json()["items"]
    assert worker.poll() is None, sched.log_text("worker")
    executed = log.read_text().split("\n")
    for key in should_run:
        assert executed.count(f"{key} 1") == 1, f"{key} ran {executed.count(f'{key} 1')} times"
    pre_existing = run_key(sched.tenant, "daily", done_before)
    assert not any(line.startswith(pre_existing) for line in executed)
    origins = {item["run_key"]: item["origin"] for item in runs_page}
    assert origins[triggered] == "trigger"
    assert all(origins[k] == "backfill" for k in expected)
    assert origins[pre_existing] == "schedule"
    daily = await _run_rows(sched, "daily")
    assert sum(1 for r in daily.values() if r["origin"] == "trigger") == 1


async def test_triggers_meet_the_jobs_overlap_policy_at_first_dispatch(sched: SchedEnv) -> None:
    """a trigger of a job with a run in flight is recorded skipped (reason overlap) under
    overlap skip; under buffer_one the first is held as the buffered run and the next skipped"""
    await sched.register(
        _daily("ov-skip", overlap="skip"), _daily("ov-buffer", overlap="buffer_one")
    )
    for job_id in ("ov-skip", "ov-buffer"):
        await sched.fetch(
            "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status,"
            " attempt, epoch, lease_until, origin) SELECT tenant, job_id, now() - interval '1 h',"
            " shard_id, priority, 'running', 1, 1, now() + interval '1 hour', 'schedule'"
            " FROM jobs WHERE tenant = $1 AND job_id = $2",
            sched.tenant,
            job_id,
        )
    async with _api(sched) as (client, _), running_scheduler(sched, "solo"):
        skip_key = (await client.post("/v1/jobs/ov-skip/trigger")).json()["run_key"]
        held_key = (await client.post("/v1/jobs/ov-buffer/trigger")).json()["run_key"]
        await asyncio.sleep(0.002)  # a later instant: another run key
        extra_key = (await client.post("/v1/jobs/ov-buffer/trigger")).json()["run_key"]

        async def decided() -> bool:
            rows = {**await _run_rows(sched, "ov-skip"), **await _run_rows(sched, "ov-buffer")}
            return all(rows[k]["status"] != "retrying" for k in (skip_key, held_key, extra_key))

        await wait_for(decided, 15, what="the triggers' first dispatch")
    rows = {**await _run_rows(sched, "ov-skip"), **await _run_rows(sched, "ov-buffer")}
    assert (rows[skip_key]["status"], rows[skip_key]["skip_reason"]) == ("skipped", "overlap")
    held = rows[held_key]
    assert (held["status"], held["attempt"], held["lease_until"]) == ("pending", 1, None)
    assert (rows[extra_key]["status"], rows[extra_key]["skip_reason"]) == ("skipped", "overlap")


async def test_refusals_name_the_field_or_the_reason(sched: SchedEnv) -> None:
    """50,000 occurrences are refused saying where to split; a range into the future or before the
    run history's retention, a bad instant and an unknown field are 422 naming the field;
    another tenant's job and a deleted job are 404; a completed one-off is 409"""
    await sched.register(
        {"id": "minutely", "schedule": "*/30 * * * * *", "handler": "test.record"},
        _daily("gone"),
        {"id": "once", "at": "2026-01-01T00:00:00Z", "handler": "test.record"},
    )
    await sched.op("delete", "gone")
    await sched.fetch(
        "UPDATE jobs SET status = 'completed' WHERE tenant = $1 AND job_id = 'once'", sched.tenant
    )
    async with _api(sched) as (client, store):
        end = _midnight_days_ago(1)
        many = await client.post(
            "/v1/jobs/minutely/backfill",
            json={"from": format_ms(end - 50_000 * 30_000), "to": format_ms(end)},
        )
        assert many.status_code == 422
        [problem] = many.json()["detail"]
        assert problem["field"] == "to" and "more than 10,000 occurrences" in problem["message"]
        assert f"lie before {format_ms(end - 40_000 * 30_000)}" in problem["message"]

        future = await client.post(
            "/v1/jobs/minutely/backfill",
            json={"from": format_ms(now_ms() - 60_000), "to": format_ms(now_ms() + 3_600_000)},
        )
        assert future.status_code == 422
        assert future.json()["detail"][0]["field"] == "to"
        assert "future" in future.json()["detail"][0]["message"]

        too_old = await client.post(
            "/v1/jobs/minutely/backfill",
            json={"from": format_ms(end - 40 * DAY_MS), "to": format_ms(end - 39 * DAY_MS)},
        )
        assert too_old.status_code == 422
        assert too_old.json()["detail"][0]["field"] == "from"
        assert "retention (30 days)" in too_old.json()["detail"][0]["message"]

        bad = await client.post(
            "/v1/jobs/minutely/backfill", json={"from": "yesterday", "to": "2026-01-01", "x": 1}
        )
        assert bad.status_code == 422
        assert {p["field"] for p in bad.json()["detail"]} == {"from", "to", "x"}

        assert (await client.post("/v1/jobs/gone/trigger")).status_code == 404
        assert (await client.post("/v1/jobs/nope/trigger")).status_code == 404
        completed = await client.post("/v1/jobs/once/trigger")
        assert completed.status_code == 409 and completed.json()["error"] == "conflict"

        other_key = await store.create_tenant(f"o{uuid.uuid4().hex[:8]}")
        other = await client.post(
            "/v1/jobs/minutely/trigger", headers={"Authorization": f"Bearer {other_key}"}
        )
        assert other.status_code == 404
        other_fill = await client.post(
            "/v1/jobs/minutely/backfill",
            json={"from": format_ms(end - 60_000), "to": format_ms(end)},
            headers={"Authorization": f"Bearer {other_key}"},
        )
        assert other_fill.status_code == 404
    assert not await sched.fetch(
        "SELECT 1 FROM job_runs WHERE tenant = $1 AND job_id IN ('minutely', 'gone', 'once')",
        sched.tenant,
    )


async def test_a_backfill_across_dst_changes_follows_the_jobs_dst_policies(
    sched: SchedEnv,
) -> None:
    """02:30 Berlin over the spring gap: shift runs at 03:00 local that day, skip has no run;
    over the autumn fold: first runs once, both runs in each copy of the hour"""
    base = {"schedule": "30 2 * * *", "timezone": "Europe/Berlin", "handler": "test.record"}
    await sched.register(
        {"id": "shift", **base, "dst": {"gap": "shift"}},
        {"id": "skip", **base, "dst": {"gap": "skip"}},
        {"id": "first", **base, "dst": {"overlap": "first"}},
        {"id": "both", **base, "dst": {"overlap": "both"}},
    )
    spring = {"from": "2026-03-28T00:00:00Z", "to": "2026-03-31T00:00:00Z"}
    autumn = {"from": "2026-10-25T00:00:00Z", "to": "2026-10-26T00:00:00Z"}
    # The ranges lie further back than the default retention of 30 days.
    async with _api(sched, RunLimits(retention_days=3650)) as (client, _):
        for job_id, window in (
            ("shift", spring),
            ("skip", spring),
            ("first", autumn),
            ("both", autumn),
        ):
            answer = await client.post(f"/v1/jobs/{job_id}/backfill", json=window)
            assert answer.status_code == 202, answer.text

    def keys_at(job_id: str, *instants: str) -> set[str]:
        return {
            run_key(sched.tenant, job_id, datetime_to_ms(dt.datetime.fromisoformat(i)))
            for i in instants
        }

    assert set(await _run_rows(sched, "shift")) == keys_at(
        "shift", "2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"
    )
    assert set(await _run_rows(sched, "skip")) == keys_at(
        "skip", "2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z"
    )
    assert set(await _run_rows(sched, "first")) == keys_at("first", "2026-10-25T00:30:00Z")
    assert set(await _run_rows(sched, "both")) == keys_at(
        "both", "2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"
    )
    assert all(r["origin"] == "backfill" for r in (await _run_rows(sched, "both")).values())


async def test_kafka_trigger_and_backfill_ops_are_idempotent_under_redelivery(
    sched: SchedEnv,
) -> None:
    """trigger and backfill on the registrations topic write their runs; a redelivered batch
    starts no second run; a trigger of an unknown job and a backfill into the future land on
    the rejected topic with their reasons"""
    await sched.register(_daily("daily"))
    t = sched.tenant
    window = {"from": format_ms(_midnight_days_ago(4)), "to": format_ms(_midnight_days_ago(2))}
    messages = [
        {"op": "trigger", "tenant": t, "id": "daily"},
        {"op": "trigger", "tenant": t, "id": "daily", "idempotency_key": "once-only"},
        {"op": "trigger", "tenant": t, "id": "daily", "idempotency_key": "once-only"},
        {"op": "backfill", "tenant": t, "id": "daily", **window},
        {"op": "trigger", "tenant": t, "id": "missing"},
        {
            "op": "backfill",
            "tenant": t,
            "id": "daily",
            "from": format_ms(now_ms() - 60_000),
            "to": format_ms(now_ms() + DAY_MS),
        },
        {"op": "backfill", "tenant": t, "id": "daily", "from": "soon"},
    ]
    prod = producer(sched.stack.kafka)
    for body in messages:
        prod.produce(sched.topics.registrations, key=b"daily", value=orjson.dumps(body))
    assert prod.flush(30) == 0
    pool = await asyncpg.create_pool(sched.dsn, min_size=1, max_size=4)
    try:
        store = RegistryStore(pool, TEST_SHARDS)
        # Signatures off, said explicitly: this test is about runs on demand under redelivery, not
        # about who may produce; its registrations are unsigned (signatures: test_intake.py,
        # test_intake_replays.py, with the default).
        unsigned = sched.settings(intake_require_signature=False)
        await run_intake_until(unsigned, store, len(messages))
        first = await _run_rows(sched, "daily")
        rewind_intake(unsigned)
        await run_intake_until(unsigned, store, len(messages))
        again = await _run_rows(sched, "daily")
    finally:
        await pool.close()
    origins = sorted(r["origin"] for r in first.values())
    assert origins == ["backfill", "backfill", "trigger", "trigger"]
    assert set(again) == set(first)
    cons = consumer(sched.stack.kafka, f"check-{uuid.uuid4()}", **{"enable.auto.commit": False})
    cons.subscribe([sched.topics.rejected])
    reasons: list[str] = []
    deadline = time.monotonic() + 20
    try:
        while len(reasons) < 6 and time.monotonic() < deadline:
            msg = cons.poll(0.5)
            if msg is not None and not msg.error():
                reasons.append(Rejection.decode(msg.value() or b"").reason)
    finally:
        cons.close()
    # Each of the three bad messages, once per delivery.
    assert sum("no such job" in r for r in reasons) == 2, reasons
    assert sum("future" in r for r in reasons) == 2, reasons
    assert sum("'to' is missing" in r for r in reasons) == 2, reasons


def _cli(sched: SchedEnv, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [TICKWHEEL, *args],
        env={**os.environ, **sched.env},
        capture_output=True,
        timeout=60,
    )


async def test_cli_triggers_and_backfills_through_the_registry(sched: SchedEnv) -> None:
    """`tickwheel jobs trigger|backfill` take JOB as <tenant>/<id> or an id with --tenant;
    a dry run creates nothing; `runs ls` shows each run's origin; bad input is exit 2; an
    idempotency key older than 24 h starts a new run, and `gc` removes it"""
    await sched.register(_daily("daily"))
    t = sched.tenant

    def ok(*args: str) -> Any:
        done = _cli(sched, *args, "--json")
        assert done.returncode == 0, done.stderr.decode()
        return orjson.loads(done.stdout)

    first = await asyncio.to_thread(ok, "jobs", "trigger", f"{t}/daily", "--idempotency-key", "x")
    again = await asyncio.to_thread(
        ok, "jobs", "trigger", "daily", "--tenant", t, "--idempotency-key", "x"
    )
    assert first["created"] and not again["created"]
    assert again["run_key"] == first["run_key"]
    window = ("--from", format_ms(_midnight_days_ago(3)), "--to", format_ms(_midnight_days_ago(0)))
    dry = await asyncio.to_thread(
        ok, "jobs", "backfill", "daily", "--tenant", t, *window, "--dry-run"
    )
    assert (dry["dry_run"], dry["runs"], dry["occurrences"]) == (True, 3, 3)
    assert [r["origin"] for r in (await _run_rows(sched, "daily")).values()] == ["trigger"]
    real = await asyncio.to_thread(ok, "jobs", "backfill", f"{t}/daily", *window, "--no-follow")
    assert (real["dry_run"], real["runs"], real["existing"]) == (False, 3, 0)
    listed = await asyncio.to_thread(ok, "runs", "ls", "--tenant", t, "--job", "daily")
    assert sorted(r["origin"] for r in listed["items"]) == ["backfill"] * 3 + ["trigger"]
    bad = await asyncio.to_thread(
        _cli, sched, "jobs", "backfill", "daily", "--tenant", t, "--from", "monday", "--to", "x"
    )
    assert bad.returncode == 2
    assert bad.stderr.decode().count("\n") == 1 and "--from" in bad.stderr.decode()
    future = await asyncio.to_thread(
        _cli,
        sched,
        "jobs",
        "backfill",
        f"{t}/daily",
        "--from",
        format_ms(now_ms() - 60_000),
        "--to",
        format_ms(now_ms() + DAY_MS),
    )
    assert future.returncode == 2 and "future" in future.stderr.decode()
    missing = await asyncio.to_thread(_cli, sched, "jobs", "trigger", f"{t}/nope")
    assert missing.returncode == 2 and "no job" in missing.stderr.decode()

    age = "UPDATE trigger_requests SET created_at = now() - interval '25 hours' WHERE tenant = $1"
    await sched.fetch(age, t)
    later = await asyncio.to_thread(ok, "jobs", "trigger", f"{t}/daily", "--idempotency-key", "x")
    assert later["created"] and later["run_key"] != first["run_key"]  # the key expired
    await sched.fetch(age, t)
    gc = await asyncio.to_thread(ok, "gc")
    assert gc["removed_trigger_keys"] >= 1
    assert not await sched.fetch("SELECT 1 FROM trigger_requests WHERE tenant = $1", t)


async def test_a_trigger_wakes_the_leader_before_its_next_sweep(sched: SchedEnv) -> None:
    """with sweeps and re-syncs a minute apart, a triggered run is still claimed and published
    within seconds: the registry's NOTIFY tickwheel_runs has its leader load it at once"""
    await sched.register(_daily("daily"))
    async with (
        _api(sched) as (client, _),
        running_scheduler(sched, "solo", sweep_interval_ms=60_000, resync_s=60),
    ):

        async def leading() -> bool:
            rows = await sched.fetch("SELECT 1 FROM shard_leaders WHERE owner = 'solo'")
            return len(rows) == TEST_SHARDS

        await wait_for(leading, 15, what="every shard led")
        await asyncio.sleep(1.0)  # the first sweeps, at takeover, are behind us
        key = (await client.post("/v1/jobs/daily/trigger")).json()["run_key"]

        async def published() -> bool:
            row = (await _run_rows(sched, "daily")).get(key)
            return row is not None and row["status"] in ("pending", "published")

        await wait_for(published, 5, what="the trigger dispatched before the next sweep")
