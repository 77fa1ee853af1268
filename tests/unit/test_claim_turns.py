"""The leaders' turns under a burst (shards/claims.py `ClaimCombiner.turn`, D-271), without I/O:
turns are granted within the pipeline's bound, the leader holding the least-served tenant's
entries goes first, and a turn given back or cancelled frees its room."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest

from tickwheel.shards.claims import MIN_GRANT, ClaimCombiner

pytestmark = pytest.mark.unit

STATEMENT = 1_000  # entries per statement (the combiner's max_jobs): the pipeline's bound


class Leader:
    """What a leader shows the combiner: its queue's tenants and size."""

    def __init__(self, shard: int, tenants: dict[str, int]) -> None:
        self.shard = shard
        self.tenants = tenants  # tenant: entries due

    def view(self) -> tuple[Iterable[str], int]:
        return [t for t, n in self.tenants.items() if n], sum(self.tenants.values())


def _combiner() -> ClaimCombiner:
    return ClaimCombiner(None, 30_000, STATEMENT)  # type: ignore[arg-type]  # turns never query


async def _settled() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_turn_with_room_is_granted_at_once_for_what_the_leader_has() -> None:
    combiner = _combiner()
    assert await combiner.turn(0, Leader(0, {"a": 300}).view) == 300
    assert await combiner.turn(1, Leader(1, {"a": 5_000}).view) == STATEMENT - 300
    assert await combiner.turn(2, Leader(2, {}).view) == 0  # nothing due: no turn


async def test_a_full_pipeline_holds_the_next_turn_until_one_is_given_back() -> None:
    combiner = _combiner()
    assert await combiner.turn(0, Leader(0, {"a": 5_000}).view) == STATEMENT
    waiting = asyncio.create_task(combiner.turn(1, Leader(1, {"a": 5_000}).view))
    await _settled()
    assert not waiting.done()
    combiner.release(0)
    assert await asyncio.wait_for(waiting, 1) == STATEMENT
    combiner.release(0)  # given back twice: nothing more happens
    assert await asyncio.wait_for(waiting, 1) == STATEMENT


async def test_the_leader_holding_the_least_served_tenant_goes_first() -> None:
    """Twenty leaders of a burst wait; a later one whose queue holds another tenant's runs is
    among the first granted when room frees, and each turn is a share of the pipeline."""
    combiner = _combiner()
    combiner._served["big"] = 50_000  # what a burst's claims counted
    assert await combiner.turn(0, Leader(0, {"big": 5_000}).view) == STATEMENT
    burst = [
        asyncio.create_task(combiner.turn(s, Leader(s, {"big": 5_000}).view)) for s in range(1, 21)
    ]
    await _settled()
    small = asyncio.create_task(combiner.turn(99, Leader(99, {"big": 900, "small": 1}).view))
    await _settled()
    combiner.release(0)
    await _settled()
    granted = [t for t in burst if t.done()]
    assert small.done()
    # 21 waited: each turn is MIN_GRANT (more than a twenty-first of the pipeline), so the
    # small one and the nine oldest of the burst fit.
    assert small.result() == MIN_GRANT
    assert granted == burst[: STATEMENT // MIN_GRANT - 1]
    for t in burst:
        t.cancel()


async def test_what_came_due_while_a_leader_waited_is_seen_when_its_turn_comes() -> None:
    """The view is asked at grant time: a tenant whose runs came due meanwhile counts."""
    combiner = _combiner()
    combiner._served["big"] = 50_000
    assert await combiner.turn(0, Leader(0, {"big": 5_000}).view) == STATEMENT
    leaders = [Leader(s, {"big": 5_000}) for s in range(1, 21)]
    turns = [asyncio.create_task(combiner.turn(x.shard, x.view)) for x in leaders]
    await _settled()
    leaders[-1].tenants["small"] = 1  # came due on the last shard while all waited
    combiner.release(0)
    await _settled()
    assert turns[-1].done()
    assert sum(t.done() for t in turns) == STATEMENT // MIN_GRANT
    for t in turns:
        t.cancel()


async def test_a_cancelled_turn_gives_its_room_back() -> None:
    combiner = _combiner()
    assert await combiner.turn(0, Leader(0, {"a": 5_000}).view) == STATEMENT
    gone = asyncio.create_task(combiner.turn(1, Leader(1, {"a": 5_000}).view))
    after = asyncio.create_task(combiner.turn(2, Leader(2, {"a": 5_000}).view))
    await _settled()
    gone.cancel()
    await _settled()
    combiner.release(0)
    assert await asyncio.wait_for(after, 1) == STATEMENT
    assert gone.cancelled()


async def test_a_leader_that_has_nothing_left_when_its_turn_comes_gets_none() -> None:
    combiner = _combiner()
    assert await combiner.turn(0, Leader(0, {"a": 5_000}).view) == STATEMENT
    emptied = Leader(1, {"a": 10})
    waiting = asyncio.create_task(combiner.turn(1, emptied.view))
    await _settled()
    emptied.tenants.clear()  # stepped down meanwhile: its view shows nothing
    combiner.release(0)
    assert await asyncio.wait_for(waiting, 1) == 0
    assert await combiner.turn(2, Leader(2, {"a": 5_000}).view) == STATEMENT
