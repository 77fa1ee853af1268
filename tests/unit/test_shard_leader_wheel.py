"""A leader's wheel follows the newest (version, next_run_at) it has seen, whatever the order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tickwheel.shards.dbclock import DbClock
from tickwheel.shards.leader import LeaderConfig, ShardLeader, Shared
from tickwheel.shards.plan import NO_NEXT_MS

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
        "start_ms": None,
        "end_ms": None,
        "after_end": None,
        "max_runs": None,
        "calendars": None,
        "jitter_ms": None,
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


def test_a_loaded_job_keeps_its_pair_in_its_wheel_entry_only() -> None:
    """a job pending in the wheel has no `known` pair (its entry holds version and next_run_at:
    no tuple, no dict slot per loaded job), and a stale row is still refused by that pair"""

    async def go() -> None:
        leader = _leader()
        leader.apply_job_row(_row(2, T0 + 60_000))
        assert leader.known == {} and len(leader.wheel) == 1
        leader.apply_job_row(_row(1, T0 + 120_000))  # an older version
        leader.apply_job_row(_row(2, T0))  # same version, earlier: a read before a claim
        assert _due(leader) == [T0 + 60_000]

    asyncio.run(go())


def test_a_repeated_feed_row_keeps_the_wheel_entry_it_made() -> None:
    """the change feed repeats rows across polls: the same (version, next_run_at) again leaves
    the wheel's entry as it is (not replaced by an equal one), once due it is due once"""

    async def go() -> None:
        leader = _leader()
        leader.apply_job_row(_row(2, T0 + 60_000))
        entry = leader.wheel.get("acme/j")
        leader.apply_job_row(_row(2, T0 + 60_000))
        assert leader.wheel.get("acme/j") is entry
        assert _due(leader) == [T0 + 60_000]

    asyncio.run(go())


def test_a_due_job_being_claimed_still_refuses_a_stale_row() -> None:
    """entries the leader takes out of the wheel to claim them leave their pair in `known`:
    a row read before the entry's own next_run_at, arriving while the claim runs, does not put
    the job back into the wheel; the claim's offer of the next fire does, and the job leaves
    `known` again"""

    async def go() -> None:
        leader = _leader()
        leader.apply_job_row(_row(1, T0))
        due = leader._advance(T0)
        assert [k for k, _, _ in due] == ["acme/j"] and len(leader.wheel) == 0
        assert leader.known == {"acme/j": (1, T0)}
        leader.apply_job_row(_row(1, T0 - 60_000))  # stale
        assert len(leader.wheel) == 0
        entry = due[0][2]
        leader._offer("acme/j", 1, T0 + 60_000, entry)  # what the claim does
        assert leader.known == {} and _due(leader) == [T0 + 60_000]

    asyncio.run(go())


def test_a_job_out_of_the_wheel_keeps_refusing_older_rows() -> None:
    """a one-off claimed (no next fire) or a job beyond the horizon is out of the wheel: its
    pair stays in `known`, and an older row does not schedule it again"""

    async def go() -> None:
        leader = _leader()
        leader.apply_job_row(_row(1, T0))
        (key, _, entry), *_ = leader._advance(T0)
        leader._offer(key, 1, NO_NEXT_MS, entry)  # claimed, nothing next
        assert len(leader.wheel) == 0 and leader.known[key] == (1, NO_NEXT_MS)
        leader.apply_job_row(_row(1, T0 + 1000))
        assert len(leader.wheel) == 0
        leader.apply_job_row(_row(2, T0 + 1000))  # edited since: a newer version
        assert leader.known == {} and _due(leader) == [T0 + 1000]

    asyncio.run(go())


class _RefusingOutbox:
    """Acknowledges every run whose job id does not start with "refused"."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.again: list[bool] = []

    async def publish(self, runs: Any, epoch: int, shard: int, again: bool = False) -> list[Any]:
        self.calls.append([r.job_id for r in runs])
        self.again.append(again)
        return [r for r in runs if not r.job_id.startswith("refused")]


def test_runs_the_broker_refused_are_kept_for_the_next_sweep_and_block_a_clean_step_down() -> None:
    """a refused publish is kept in memory (the row is not written again after an ack, so
    nothing else would publish it before the lease), and a leader holding such runs does not
    clear its owner when it steps down: its successor adopts them"""
    from tickwheel.shards.metrics import SchedulerMetrics
    from tickwheel.shards.store import Dispatch, Lease

    async def go() -> None:
        leader = _leader()
        outbox = _RefusingOutbox()
        leader.s.outbox = outbox  # type: ignore[assignment]
        leader.s.metrics = SchedulerMetrics()
        leader.lease = Lease(0, 3, "me")
        leader.s.clock._offset_ms = 0  # as after a sync
        runs = [
            Dispatch("acme", job, T0, 1, "normal", "demo.echo", None, "{}", 1000)
            for job in ("ok-1", "refused-1", "ok-2")
        ]
        await leader._publish(runs, "first")
        assert [r.job_id for r in leader._unacked] == ["refused-1"]
        await leader._step_down()  # returns before touching the database (pool is None)
        assert [r.job_id for r in leader._unacked] == ["refused-1"]
        # Published again, a run carries the `again` header: it may be out already, so a
        # worker claims it before it runs it (I4); a first publish does not.
        await leader._publish(list(leader._unacked), "unacked")
        assert outbox.again == [False, True]

    asyncio.run(go())


def test_a_fed_job_is_held_under_its_entrys_own_key() -> None:
    """the wheel's key of a job from the feed is the entry's key object, not an equal copy: one
    string per loaded job (a copy was ~80 of the ~375 bytes a loaded job cost)"""

    async def go() -> None:
        leader = _leader()
        leader.apply_job_row(_row(1, T0))
        [(key, _, entry)] = leader.wheel.advance(T0 + 10_000_000)
        assert key == "acme/j"
        assert key is entry.key

    asyncio.run(go())


def test_the_resync_reads_in_full_only_the_jobs_the_wheel_does_not_hold() -> None:
    """the full reload's narrow read: a job in the wheel at the database's pair or a newer one,
    or known at a newer one, is not read again; one missing from the wheel, in it at an older
    pair, or known at the same pair (an occurrence not claimed yet) is — as `_offer` would
    act on that row"""

    async def go() -> None:
        leader = _leader()
        for job, version, next_ms in (("same", 2, T0), ("newer", 3, T0), ("older", 1, T0)):
            row = _row(version, next_ms) | {"job_id": job}
            leader.apply_job_row(row)
        leader.known["acme/known-newer"] = (5, T0)
        leader.known["acme/known-same"] = (5, T0)
        pairs = [
            ("acme", "same", 2, T0),
            ("acme", "newer", 2, T0 + 60_000),  # the wheel's (3, T0) is newer
            ("acme", "older", 2, T0),  # edited since the wheel's (1, T0)
            ("acme", "claimed", 2, T0 - 1),  # a claim moved it on in the wheel: same version
            ("acme", "known-newer", 4, T0),
            ("acme", "known-same", 5, T0),
            ("acme", "absent", 1, T0),
        ]
        leader.apply_job_row(_row(2, T0) | {"job_id": "claimed"})
        assert leader._not_held(pairs) == [
            ("acme", "older"),
            ("acme", "known-same"),
            ("acme", "absent"),
        ]

    asyncio.run(go())
