"""A deployment owns its database (issue 48, D-048): a scheduler, worker or registry of another
topic prefix refuses it with one sentence (exit 2) before it leads, claims or runs anything;
`tickwheel db migrate` records the prefix and refuses another; renaming is an explicit
operator command."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest

from tickwheel.clock import format_ms, now_ms
from tickwheel.shards import store as leader_store
from tickwheel.stack import Addresses
from tickwheel.testing import migrate

from .conftest import TEST_SHARDS, TICKWHEEL, SchedEnv, wait_for

pytestmark = pytest.mark.integration

EXIT_TIMEOUT_S = 60.0  # a refusing process exits right after its first read: far less


def _tickwheel(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    """`tickwheel ARGV…` with `env` over the test process's environment, to completion."""
    return subprocess.run(
        [TICKWHEEL, *argv],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=EXIT_TIMEOUT_S,
    )


async def _ledger(sched: SchedEnv) -> tuple[list[Any], list[Any], list[Any]]:
    """Everything a process of another deployment would have changed: the shard rows, the run
    ledger and the jobs (with their versions and next fires)."""
    leaders = await sched.fetch("SELECT * FROM shard_leaders ORDER BY shard_id")
    runs = await sched.fetch("SELECT * FROM job_runs ORDER BY tenant, job_id, scheduled_at")
    jobs = await sched.fetch("SELECT job_id, version, next_run_at, status FROM jobs")
    return [tuple(r) for r in leaders], [tuple(r) for r in runs], [tuple(r) for r in jobs]


async def _lead(dsn: str, shards: range, owner: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for shard in shards:
            await leader_store.take_over(conn, shard, owner)
    finally:
        await conn.close()


async def test_processes_of_another_prefix_refuse_the_database_and_change_nothing(
    sched: SchedEnv, tmp_path: Path
) -> None:
    """on a database of deployment A holding led shards and due jobs, a scheduler, a worker
    and a registry configured for prefix B each exit 2 with one sentence naming both prefixes
    and the fix, and no row of shard_leaders, job_runs or jobs changes; a scheduler of A
    then starts on it, leads every shard and claims the due runs"""
    mine = sched.topics.prefix
    other = f"b{uuid.uuid4().hex[:10]}"
    await sched.register(
        *({"id": f"due{i}", "at": format_ms(now_ms() + 2_000), "handler": "a.b"} for i in range(5))
    )
    await _lead(sched.dsn, range(2), "a-scheduler-of-A")
    before = await _ledger(sched)
    assert before[2] and len(before[0]) == 2

    env = {**sched.env, "TICKWHEEL_TOPIC_PREFIX": other}
    worker_env = {"PYTHONPATH": str(Path(__file__).parent), "TW_TEST_LOG": str(tmp_path / "x")}
    refused = {
        "scheduler": _tickwheel(env, "scheduler", "--id", "intruder"),
        "worker": _tickwheel({**env, **worker_env}, "worker", "--handlers", "worker_handlers"),
        "registry": _tickwheel(env, "registry", "--no-http"),
    }
    await asyncio.sleep(3)  # anything a refused process had started would have written by now
    for process, done in refused.items():
        assert done.returncode == 2, (process, done.stderr)
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(f"tickwheel: {process} cannot use this database:"), line
        assert f"belongs to deployment {mine!r}" in line and f"deployment {other!r}" in line
        assert f"rename --from {mine} --to {other}" in line
    assert await _ledger(sched) == before

    proc = sched.spawn("rightful")
    await wait_for(
        lambda: _all_led(sched),
        timeout_s=60,
        what=f"all {TEST_SHARDS} shards led by the scheduler of the database's own deployment",
    )
    claimed = await wait_for(
        lambda: _claimed(sched, 5), timeout_s=30, what="the five due runs claimed"
    )
    assert proc.poll() is None, sched.log_text("rightful")
    assert sorted(claimed) == [f"due{i}" for i in range(5)]


async def _claimed(sched: SchedEnv, count: int) -> list[str]:
    rows = await sched.fetch("SELECT job_id FROM job_runs WHERE tenant = $1", sched.tenant)
    return [r["job_id"] for r in rows] if len(rows) >= count else []


async def _all_led(sched: SchedEnv) -> bool:
    rows = await sched.fetch("SELECT count(*) AS n FROM shard_leaders WHERE owner = 'rightful'")
    return bool(rows[0]["n"] == TEST_SHARDS)


async def test_migrate_records_the_prefix_refuses_another_and_rename_is_explicit(
    sched: SchedEnv,
) -> None:
    """`db migrate` under another prefix exits 2 and records nothing; `db deployment` and
    `status --json` name the database's deployment; `db deployment rename` refuses a wrong
    --from (named as such while shards are led too) and, without --force, a database whose
    shards still have a leader; once renamed,
    a scheduler of the old prefix refuses and the new one's `db migrate` succeeds"""
    mine = sched.topics.prefix
    other = f"b{uuid.uuid4().hex[:10]}"
    env = {**sched.env, "TICKWHEEL_TOPIC_PREFIX": other}

    done = _tickwheel(env, "db", "migrate")
    assert done.returncode == 2, done.stderr
    assert f"belongs to deployment {mine!r}" in done.stderr
    assert _tickwheel(sched.env, "db", "deployment").stdout.strip() == mine
    status = orjson.loads(_tickwheel(sched.env, "status", "--json").stdout)
    assert status["database_deployment"] == mine and status["prefix"] == mine

    await _lead(sched.dsn, range(1), "still-running")
    wrong_from = _tickwheel(sched.env, "db", "deployment", "rename", "--from", "x", "--to", other)
    assert wrong_from.returncode == 2 and f"belongs to deployment {mine!r}, not 'x'" in (
        wrong_from.stderr
    )
    led = _tickwheel(sched.env, "db", "deployment", "rename", "--from", mine, "--to", other)
    assert led.returncode == 2 and "1 shard(s) still have a leader" in led.stderr
    assert _tickwheel(sched.env, "db", "deployment").stdout.strip() == mine

    forced = ["db", "deployment", "rename", "--from", mine, "--to", other, "--force"]
    assert _tickwheel(sched.env, *forced).returncode == 0
    assert _tickwheel(sched.env, "db", "deployment").stdout.strip() == other
    old = _tickwheel(sched.env, "scheduler", "--id", "old")
    assert old.returncode == 2 and f"belongs to deployment {other!r}" in old.stderr
    assert _tickwheel(env, "db", "migrate").returncode == 0


async def test_a_database_that_records_no_deployment_is_refused(
    stack: Addresses, empty_db_dsn: str, sched: SchedEnv
) -> None:
    """a database migrated without a deployment (as the tests' template is) is refused by a
    scheduler with the command that records one, and `db migrate` under the prefix records it"""
    await migrate(empty_db_dsn)
    env = {**sched.env, "TICKWHEEL_DSN": empty_db_dsn}
    done = _tickwheel(env, "scheduler", "--id", "early")
    assert done.returncode == 2
    assert "records no deployment yet" in done.stderr
    assert f"TICKWHEEL_TOPIC_PREFIX={sched.topics.prefix}" in done.stderr
    assert _tickwheel(env, "db", "migrate").returncode == 0
    assert _tickwheel(env, "db", "deployment").stdout.strip() == sched.topics.prefix


async def test_a_dlq_replay_under_another_prefix_replays_nothing(sched: SchedEnv) -> None:
    """`tickwheel dlq replay` configured for another prefix exits 2 with the sentence before it
    reads a letter, and no run of the database changes"""
    before = await _ledger(sched)
    env = {**sched.env, "TICKWHEEL_TOPIC_PREFIX": f"b{uuid.uuid4().hex[:10]}"}
    done = _tickwheel(env, "dlq", "replay", "--limit", "10")
    assert done.returncode == 2, done.stderr
    assert "dlq replay cannot use this database: it belongs to deployment" in done.stderr
    assert await _ledger(sched) == before
