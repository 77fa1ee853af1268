"""`tickwheel jobs|runs|gc` against a real Postgres: what the commands print and change."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest
from click.testing import CliRunner, Result

from tickwheel.cli import main
from tickwheel.clock import now_ms
from tickwheel.maintenance import run_gc
from tickwheel.queries import QUERIES
from tickwheel.registry_api.document import Limits, parse_document, validate_job
from tickwheel.registry_api.state import Op
from tickwheel.registry_api.store import RegistryStore
from tickwheel.sharding import shard_of

# The test's own look at the catalogue (the code never lists partitions).
PARTITIONS_SQL = (
    "SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
    " WHERE i.inhparent = 'job_runs'::regclass"
)

pytestmark = pytest.mark.integration

SHARDS = 4
HOUR_MS = 3_600_000
TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")


def _env(dsn: str, **more: str) -> dict[str, str]:
    return {"TICKWHEEL_DSN": dsn, "TICKWHEEL_SHARDS": str(SHARDS), **more}


def _cli(dsn: str, *args: str, **env: str) -> Result:
    return CliRunner().invoke(main, list(args), env=_env(dsn, **env))


def _json(dsn: str, *args: str) -> Any:
    result = _cli(dsn, *args, "--json")
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


async def _register(dsn: str, tenant: str, docs: list[dict[str, Any]]) -> None:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
    try:
        store = RegistryStore(pool, SHARDS)
        await store.create_tenant(tenant)
        ops = []
        for raw in docs:
            spec = validate_job(tenant, parse_document(raw), Limits(shards=SHARDS), now_ms())
            ops.append(Op("upsert", tenant, raw["id"], spec=spec))
        await store.apply(ops)
    finally:
        await pool.close()


async def _fetch(dsn: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


async def test_pause_resume_rm_go_through_the_registry(db_dsn: str) -> None:
    """jobs pause/resume/rm change status and version, feed the change feed and NOTIFY"""
    tenant = f"t{uuid.uuid4().hex[:8]}"
    at = dt.datetime.fromtimestamp(now_ms() / 1000 + 86_400, dt.UTC).isoformat()
    await _register(
        db_dsn,
        tenant,
        [
            {"id": "nightly", "schedule": "0 3 * * *", "handler": "h.run"},
            {"id": "once", "at": at, "handler": "h.run"},
        ],
    )
    listener = await asyncpg.connect(db_dsn)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("tickwheel_jobs", lambda *a: heard.put_nowait(a[3]))
    since = await listener.fetchval(QUERIES["feed_position"])

    async def tickwheel(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            TICKWHEEL,
            *args,
            env={**os.environ, **_env(db_dsn)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        return proc.returncode or 0, out.decode(), err.decode()

    try:
        code, out, _ = await tickwheel("jobs", "pause", f"{tenant}/nightly", "--json")
        assert code == 0 and orjson.loads(out) == {
            "job": f"{tenant}/nightly",
            "result": "paused",
            "status": "paused",
            "version": 2,
        }
        shard = shard_of(tenant, "nightly", SHARDS)
        assert await asyncio.wait_for(heard.get(), 5) == str(shard)
        changed = await listener.fetch(QUERIES["jobs_changed_since"], [shard], since)
        # The feed may repeat earlier rows (docs/CHANGE_FEED.md); the pause must be on it.
        assert ("nightly", "paused", 2) in [
            (r["job_id"], r["status"], r["version"]) for r in changed
        ]

        code, out, _ = await tickwheel("jobs", "pause", f"{tenant}/nightly")
        assert code == 0 and "already paused" in out
        code, out, _ = await tickwheel("jobs", "resume", f"{tenant}/nightly")
        assert code == 0 and "resumed (status active, version 3)" in out
        code, out, _ = await tickwheel("jobs", "rm", f"{tenant}/once")
        assert code == 0 and "deleted" in out

        code, _, err = await tickwheel("jobs", "pause", f"{tenant}/nope")
        assert code == 2 and err.strip().splitlines() == [
            f"tickwheel: no job {tenant}/nope (JOB is <tenant>/<job_id>; deleted jobs are gone)"
        ]
        code, _, err = await tickwheel("jobs", "resume", f"{tenant}/once")
        assert code == 2 and "no job" in err
    finally:
        await listener.close()
    rows = await _fetch(
        db_dsn, "SELECT job_id, status, version FROM jobs WHERE tenant = $1 ORDER BY job_id", tenant
    )
    assert [tuple(r) for r in rows] == [("nightly", "active", 3), ("once", "deleted", 2)]


def test_jobs_ls_and_show(db_dsn: str) -> None:
    """jobs ls filters by tenant and status (deleted only on request); show has the document"""
    tenant, other = f"t{uuid.uuid4().hex[:8]}", f"u{uuid.uuid4().hex[:8]}"
    asyncio.run(
        _register(
            db_dsn,
            tenant,
            [
                {"id": "a", "schedule": "*/5 * * * *", "handler": "h.run", "payload": {"x": 1}},
                {"id": "b", "schedule": "0 3 * * *", "handler": "h.run"},
            ],
        )
    )
    asyncio.run(_register(db_dsn, other, [{"id": "z", "schedule": "@daily", "handler": "h.z"}]))
    assert _cli(db_dsn, "jobs", "pause", f"{tenant}/b").exit_code == 0
    assert _cli(db_dsn, "jobs", "rm", f"{tenant}/a").exit_code == 0

    listed = _json(db_dsn, "jobs", "ls", "--tenant", tenant)["items"]
    assert [(j["job"], j["status"]) for j in listed] == [(f"{tenant}/b", "paused")]
    deleted = _json(db_dsn, "jobs", "ls", "--tenant", tenant, "--status", "deleted")["items"]
    assert [j["job_id"] for j in deleted] == ["a"]
    every = {j["job"] for j in _json(db_dsn, "jobs", "ls")["items"]}
    assert {f"{tenant}/b", f"{other}/z"} <= every and f"{tenant}/a" not in every

    shown = _json(db_dsn, "jobs", "show", f"{other}/z")
    assert shown["document"]["schedule"] == "@daily" and shown["status"] == "active"
    assert shown["runs"] == [] and shown["next_run_at"].endswith("Z")
    text = _cli(db_dsn, "jobs", "ls", "--tenant", other)
    assert text.exit_code == 0 and f"{other}/z" in text.stdout and "@daily" in text.stdout
    gone = _cli(db_dsn, "jobs", "show", f"{tenant}/a")
    assert gone.exit_code == 2 and "no job" in gone.stderr


def test_runs_ls_and_show(db_dsn: str) -> None:
    """runs ls filters by tenant, job, status, since and limit, newest first; show has it all"""
    tenant = f"t{uuid.uuid4().hex[:8]}"
    asyncio.run(_register(db_dsn, tenant, [{"id": "a", "schedule": "@hourly", "handler": "h"}]))
    now = now_ms()
    made = [
        ("a", now - 3 * HOUR_MS, "dead"),
        ("a", now - 2 * HOUR_MS, "succeeded"),
        ("b", now - HOUR_MS, "retrying"),
    ]
    asyncio.run(
        _fetch(
            db_dsn,
            "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status,"
            " attempt, epoch, last_error) SELECT $1, k.job_id,"
            " 'epoch'::timestamptz + k.ms * interval '1 millisecond', 0, 'normal', k.status,"
            " 2, 1, 'err ' || k.status"
            " FROM unnest($2::text[], $3::bigint[], $4::text[]) AS k(job_id, ms, status)",
            tenant,
            [m[0] for m in made],
            [m[1] for m in made],
            [m[2] for m in made],
        )
    )
    keys = [f"{tenant}/{job}@{ms}" for job, ms, _ in made]

    def listed(*args: str) -> list[str]:
        return [
            r["run_key"] for r in _json(db_dsn, "runs", "ls", "--tenant", tenant, *args)["items"]
        ]

    assert listed() == keys[::-1]
    assert listed("--job", "a") == [keys[1], keys[0]]
    assert listed("--status", "dead") == [keys[0]]
    assert listed("--since", "150m") == [keys[2], keys[1]]
    assert listed("--limit", "1") == [keys[2]]

    shown = _json(db_dsn, "runs", "show", keys[0])
    assert (shown["status"], shown["attempt"], shown["origin"], shown["last_error"]) == (
        "dead",
        2,
        "schedule",
        "err dead",
    )
    assert shown["job_status"] == "active" and shown["replays"] == []
    assert _json(db_dsn, "runs", "show", keys[2])["job_status"] is None  # no job b
    text = _cli(db_dsn, "runs", "ls", "--tenant", tenant)
    assert text.exit_code == 0 and text.stdout.splitlines()[1].split()[1] == keys[2]
    unknown = _cli(db_dsn, "runs", "show", f"{tenant}/a@1")
    assert unknown.exit_code == 2
    assert unknown.stderr == f"tickwheel: no run {tenant}/a@1 in job_runs\n"


def test_gc_removes_idle_target_rows_and_keeps_every_row_with_state(db_dsn: str) -> None:
    """gc removes target-limit rows (a host's, a job's own) that nobody called since the
    cutoff and that hold what a new row would; a row called recently, with failures counted,
    an open breaker, a live probe or a rate still ahead stays; the next call adds a removed
    row again"""
    p = f"h{uuid.uuid4().hex[:8]}"
    old = "now() - interval '20 days'"
    ahead = "now() + interval '1 h'"
    rows = {
        f"job:{p}/gone": f"updated_at = {old}",
        f"{p}-idle:80": f"updated_at = {old}",
        f"{p}-recent:80": "updated_at = now() - interval '1 day'",
        f"{p}-failing:80": f"updated_at = {old}, failures = 2",
        f"{p}-open:80": f"updated_at = {old}, open_until = {ahead}",
        f"{p}-probe:80": f"updated_at = {old}, probe_owner = 'w', probe_until = {ahead}",
        f"{p}-ahead:80": f"updated_at = {old}, tat_us = extract(epoch FROM {ahead}) * 1e6",
    }

    async def arrange() -> None:
        conn = await asyncpg.connect(db_dsn)
        try:
            for key, assignments in rows.items():
                await conn.execute(QUERIES["target_host_add"], key)
                await conn.execute(f"UPDATE target_hosts SET {assignments} WHERE host = $1", key)
        finally:
            await conn.close()

    asyncio.run(arrange())
    result = _cli(db_dsn, "gc", "--json", TICKWHEEL_RETENTION_DAYS="10")
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["removed_target_rows"] >= 2
    sql = "SELECT host FROM target_hosts WHERE host LIKE $1 OR host LIKE $2"
    left = {r["host"] for r in asyncio.run(_fetch(db_dsn, sql, f"{p}-%", f"job:{p}/%"))}
    assert left == set(rows) - {f"job:{p}/gone", f"{p}-idle:80"}

    # A removed key is a key no worker has called yet: its first take adds the row again,
    # fresh, and a gc right after leaves it.
    asyncio.run(_fetch(db_dsn, QUERIES["target_host_add"], f"{p}-idle:80"))
    assert _cli(db_dsn, "gc", "--json", TICKWHEEL_RETENTION_DAYS="10").exit_code == 0
    left = {r["host"] for r in asyncio.run(_fetch(db_dsn, sql, f"{p}-%", f"job:{p}/%"))}
    assert f"{p}-idle:80" in left


def test_gc_drops_old_partitions_and_old_completed_one_offs(db_dsn: str) -> None:
    """gc drops run history and completed one-offs older than the retention, keeps the rest,
    and takes the removed one-offs off their tenant's job counter"""
    tenant = f"t{uuid.uuid4().hex[:8]}"
    today = dt.datetime.now(dt.UTC).date()

    def day_ms(days_ago: int) -> int:
        moment = dt.datetime.combine(today - dt.timedelta(days=days_ago), dt.time(12), dt.UTC)
        return int(moment.timestamp() * 1000)

    asyncio.run(
        _register(
            db_dsn,
            tenant,
            [
                {
                    "id": f"once-{n}",
                    "at": f"{today - dt.timedelta(days=n)}T12:00:00Z",
                    "handler": "h",
                }
                for n in (20, 3)
            ]
            + [{"id": "cron", "schedule": "@daily", "handler": "h"}],
        )
    )

    async def arrange() -> None:
        conn = await asyncpg.connect(db_dsn)
        try:
            # Days 25..21 get partitions of their own; day 40 stays in the default partition.
            await conn.execute(QUERIES["partitions_ensure"], today - dt.timedelta(days=25), 5)
            await conn.execute(
                "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status,"
                " epoch) SELECT $1, 'cron', 'epoch'::timestamptz + ms * interval '1 millisecond',"
                " 0, 'normal', 'succeeded', 1 FROM unnest($2::bigint[]) AS ms",
                tenant,
                [day_ms(40), day_ms(22), day_ms(1), day_ms(0)],
            )
            # As the shard leaders leave them: fired one-offs are completed, changed then.
            await conn.execute(
                "ALTER TABLE jobs DISABLE TRIGGER jobs_touch;"
                "UPDATE jobs SET status = 'completed', next_run_at = NULL,"
                " updated_at = run_at + interval '1 second' WHERE kind = 'once';"
                "ALTER TABLE jobs ENABLE TRIGGER jobs_touch"
            )
            audit_old = await conn.fetchval(
                "INSERT INTO replay_audit (operator, filters, started_at)"
                " VALUES ('old', '{}', now() - interval '20 days') RETURNING id"
            )
            audit_new = await conn.fetchval(
                "INSERT INTO replay_audit (operator, filters) VALUES ('new', '{}') RETURNING id"
            )
            await conn.execute(
                "INSERT INTO replay_audit_runs (audit_id, tenant, job_id, scheduled_at, outcome)"
                " SELECT id, $1, 'cron', now(), 'replayed' FROM unnest($2::bigint[]) AS id",
                tenant,
                [audit_old, audit_new],
            )
        finally:
            await conn.close()

    asyncio.run(arrange())
    gone = {f"job_runs_p{(today - dt.timedelta(days=n)):%Y%m%d}" for n in range(21, 26)}

    result = _cli(db_dsn, "gc", "--json", TICKWHEEL_RETENTION_DAYS="10")
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    assert report["keep_from"] == (today - dt.timedelta(days=10)).isoformat()
    assert gone <= set(report["dropped_partitions"])
    assert report["removed_replay_records"] == 1

    partitions = {r["name"] for r in asyncio.run(_fetch(db_dsn, PARTITIONS_SQL))}
    assert not gone & partitions
    assert f"job_runs_p{today:%Y%m%d}" in partitions
    runs = asyncio.run(
        _fetch(
            db_dsn,
            "SELECT (extract(epoch FROM scheduled_at) * 1000)::bigint AS ms FROM job_runs"
            " WHERE tenant = $1 ORDER BY ms",
            tenant,
        )
    )
    assert [r["ms"] for r in runs] == [day_ms(1), day_ms(0)]
    jobs = asyncio.run(
        _fetch(db_dsn, "SELECT job_id FROM jobs WHERE tenant = $1 ORDER BY 1", tenant)
    )
    assert [r["job_id"] for r in jobs] == ["cron", "once-3"]
    counted = asyncio.run(_fetch(db_dsn, "SELECT jobs FROM tenant_usage WHERE tenant = $1", tenant))
    assert [r["jobs"] for r in counted] == [2]  # the job quota's counter lost the one removed
    audit = asyncio.run(
        _fetch(
            db_dsn,
            "SELECT operator FROM replay_audit_runs ar JOIN"
            " replay_audit a ON a.id = ar.audit_id WHERE ar.tenant = $1",
            tenant,
        )
    )
    assert [r["operator"] for r in audit] == ["new"]

    async def again() -> Any:
        conn = await asyncpg.connect(db_dsn)
        try:
            return await run_gc(conn, retention_days=10, today=today)
        finally:
            await conn.close()

    second = asyncio.run(again())
    assert (second.dropped_partitions, second.removed_jobs, second.removed_replay_records) == (
        [],
        0,
        0,
    )
