"""`tickwheel db migrate` builds the schema of DESIGN §4 once; partitions give retention."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from tickwheel import db as dbmod
from tickwheel.stack import Addresses

pytestmark = pytest.mark.integration

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")


def _migrate_cli(dsn: str) -> str:
    env = {**os.environ, "TICKWHEEL_DSN": dsn}
    out = subprocess.run(
        [TICKWHEEL, "db", "migrate"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


async def _schema_fingerprint(dsn: str) -> list[tuple[str, str]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT c.relname, c.relkind::text FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
            "ORDER BY 1"
        )
        return [(r[0], r[1]) for r in rows]
    finally:
        await conn.close()


async def test_migrate_twice_is_a_noop(empty_db_dsn: str) -> None:
    """the first migrate applies 0001…, the second applies nothing and changes no relation"""
    first = _migrate_cli(empty_db_dsn)
    assert "applied 0001_init" in first
    before = await _schema_fingerprint(empty_db_dsn)
    second = _migrate_cli(empty_db_dsn)
    assert "schema is current" in second and "applied" not in second
    assert await _schema_fingerprint(empty_db_dsn) == before
    names = {name for name, _ in before}
    assert {
        "jobs",
        "job_runs",
        "shard_leaders",
        "tenants",
        "api_keys",
        "schema_migrations",
        "jobs_due",
        "job_runs_default",
    } <= names


async def test_due_index_is_partial_on_active_jobs(db_dsn: str) -> None:
    """jobs_due indexes (shard_id, next_run_at) only where status = 'active'"""
    conn = await asyncpg.connect(db_dsn)
    try:
        ddl = await conn.fetchval("SELECT pg_get_indexdef('jobs_due'::regclass)")
    finally:
        await conn.close()
    assert "(shard_id, next_run_at)" in ddl and "WHERE (status = 'active'::text)" in ddl


async def test_runs_land_in_daily_partitions_and_retention_drops_them(db_dsn: str) -> None:
    """a run row goes to its day's partition; retention drops old days and old default rows,
    except a day or a default row whose run is still in flight"""
    conn = await asyncpg.connect(db_dsn)
    try:
        today = dt.datetime.now(dt.UTC).date()
        old_day, busy_day = today - dt.timedelta(days=40), today - dt.timedelta(days=39)
        await conn.fetchval("SELECT job_runs_ensure_partitions($1::date, 2)", old_day)
        now = dt.datetime.now(dt.UTC)
        ancient = now - dt.timedelta(days=400)  # no partition: default
        rows = [
            (now, "pending", "today"),
            (dt.datetime.combine(old_day, dt.time(12), dt.UTC), "succeeded", "old"),
            (dt.datetime.combine(busy_day, dt.time(12), dt.UTC), "succeeded", "busy-done"),
            (dt.datetime.combine(busy_day, dt.time(13), dt.UTC), "retrying", "busy"),
            (ancient, "dead", "ancient"),
            (ancient + dt.timedelta(hours=1), "pending", "ancient-caught-up"),
        ]
        for at, status, _ in rows:
            await conn.execute(
                "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, epoch,"
                " status) VALUES ('acme', 'j', $1, 0, 'normal', 1, $2)",
                at,
                status,
            )
        where = {
            label: await conn.fetchval(
                "SELECT tableoid::regclass::text FROM job_runs WHERE scheduled_at = $1", at
            )
            for at, _, label in rows
        }
        assert where["today"] == f"job_runs_p{today:%Y%m%d}"
        assert where["old"] == f"job_runs_p{old_day:%Y%m%d}"
        assert where["busy"] == f"job_runs_p{busy_day:%Y%m%d}"
        assert where["ancient"] == where["ancient-caught-up"] == "job_runs_default"

        dropped = await dbmod.drop_partitions_before(conn, today - dt.timedelta(days=30))
        assert f"job_runs_p{old_day:%Y%m%d}" in dropped
        assert f"job_runs_p{busy_day:%Y%m%d}" not in dropped
        left = await conn.fetch("SELECT scheduled_at FROM job_runs ORDER BY scheduled_at")
        kept = {"today", "busy-done", "busy", "ancient-caught-up"}
        assert [r[0] for r in left] == sorted(at for at, _, label in rows if label in kept)
    finally:
        await conn.close()


async def test_constraint_violation_maps_to_a_domain_error(db_dsn: str) -> None:
    """a known constraint name becomes a DomainError naming the field"""
    conn = await asyncpg.connect(db_dsn)
    try:
        with pytest.raises(asyncpg.CheckViolationError) as caught:
            await conn.execute("INSERT INTO tenants (name) VALUES ('bad name!')")
    finally:
        await conn.close()
    err = dbmod.domain_error(caught.value)
    assert err is not None and err.field == "name"


def test_partitions_command_is_idempotent(db_dsn: str, stack: Addresses) -> None:
    """`tickwheel db partitions` twice creates the missing days once, then nothing"""
    env = {**os.environ, "TICKWHEEL_DSN": db_dsn}
    outs = [
        subprocess.run(
            [TICKWHEEL, "db", "partitions", "--days-ahead", "20"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        for _ in range(2)
    ]
    assert outs[0].strip() != "job_runs partitions created: 0"
    assert outs[1].strip() == "job_runs partitions created: 0"
