"""A leader's wheel follows the newest (version, next_run_at) it has seen, whatever the order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tickwheel.shards.dbclock import DbClock
from tickwheel.shards.leader import LeaderConfig, ShardLeader, Shared

pytestmark = pytest.mark.unit

T0 = 1_796_000_000_000


def _leader() -> ShardLeader:
    config = LeaderConfig(
        tick_ms=100,
        horizon_ms=600_000,
        publish_lease_ms=30_000,
        claim_batch=100,
        sweep_ms=1000,
        resync_ms=60_000,
    )
    shared = Shared("me", config, None, None, None, DbClock(), None)  # type: ignore[arg-type]
    leader = ShardLeader(0, shared)
    leader.horizon_end_ms = T0 + 600_000
    return leader


def _row(version: int, next_ms: int | None, status: str = "active") -> dict[str, Any]:
    return {
        "tenant": "acme",
        "job_id": "j",
        "shard_id": 0,
        "status": status,
        "version": version,
        "next_run_at": next_ms,
        "kind": "cron",
        "schedule": "* * * * *",
        "timezone": "UTC",
        "dst_gap": "shift",
        "dst_overlap": "first",
        "misfire_policy": "run_once",
        "misfire_grace_ms": 60_000,
        "misfire_max_catchup": 10,
        "overlap_policy": "allow",
    }


def _due(leader: ShardLeader) -> list[int]:
    return [due for _, due, _ in leader.wheel.advance(T0 + 10_000_000)]


def test_a_stale_feed_row_does_not_undo_a_claim() -> None:
    """a row read before our claim (same version, earlier next_run_at) is ignored"""

    async def go() -> None:
        leader = _leader()
        leader.apply_job_row(_row(1, T0 + 60_000))  # as the claim left it
        leader.apply_job_row(_row(1, T0))  # the feed's older read arrives late
        assert _due(leader) == [T0 + 60_000]

    asyncio.run(go())


def test_pause_and_newer_versions_win() -> None:
    """a paused row cancels the entry; a newer version schedules it again; beyond the horizon
    nothing is scheduled"""

    async def go() -> None:
        leader = _leader()
        leader.apply_job_row(_row(1, T0))
        leader.apply_job_row(_row(2, T0, status="paused"))
        assert len(leader.wheel) == 0
        leader.apply_job_row(_row(1, T0))  # older than the pause: ignored
        assert len(leader.wheel) == 0
        leader.apply_job_row(_row(3, T0 + 1000))
        assert _due(leader) == [T0 + 1000]
        leader.apply_job_row(_row(4, T0 + 3_600_000))  # outside the horizon
        assert len(leader.wheel) == 0

    asyncio.run(go())
