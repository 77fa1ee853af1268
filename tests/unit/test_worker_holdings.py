"""The heartbeat of a worker's runs in hand (workers/holdings.py), without I/O: an unmarked
run still executing after a second is marked `running`; one whose attempt finished and whose
result waits for the recorder's batch is not (its result is on its way)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from tickwheel.clock import now_ms
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.stall import Underway
from tickwheel.workers.deliveries import Delivery
from tickwheel.workers.holdings import FINISHED_MARK_AFTER_MS, Holdings
from tickwheel.workers.metrics import WorkerMetrics
from tickwheel.workers.store import Keys, RunId

pytestmark = pytest.mark.unit


class Store:
    """What the heartbeat writes, recorded."""

    def __init__(self) -> None:
        self.marked: list[RunId] = []

    async def heartbeat(self, keys: Keys) -> int:
        return len(keys)

    async def mark_running(self, keys: Keys, ran_ms: Sequence[int]) -> set[RunId]:
        runs = set(zip(keys.tenants, keys.job_ids, keys.scheduled_ms, strict=True))
        self.marked.extend(sorted(runs))
        return runs


def _delivery(job_id: str) -> Delivery:
    env = RunEnvelope(
        run_key=f"t/{job_id}/1000", tenant="t", job_id=job_id, scheduled_at=1000, attempt=1,
        epoch=1, priority="normal", payload={}, timeout_ms=1000, handler="noop",
    )  # fmt: skip
    return Delivery(("runs", 0), 0, 1, "normal", env, 1000, b"", sealed=True, suspect=False)


async def _one_beat(holdings: Holdings) -> None:
    recorded = asyncio.Event()
    beat = asyncio.create_task(holdings.heartbeat(recorded))
    await asyncio.sleep(0.05)  # lease_s 0.03: a beat every 10 ms
    recorded.set()
    await beat


@pytest.mark.parametrize("held_ms", [2_000, FINISHED_MARK_AFTER_MS + 1_000])
async def test_a_finished_run_waiting_for_its_write_is_not_marked_until_long_after(
    held_ms: int,
) -> None:
    store = Store()
    holdings = Holdings(store, None, None, WorkerMetrics(), Underway(), 0.03)  # type: ignore[arg-type]
    started = now_ms() - held_ms
    for job_id in ("executing", "finished"):
        d = _delivery(job_id)
        holdings.leased[d.run] = 1
        holdings.unmarked[d.run] = (d, started)
    holdings.finished.add(("t", "finished", 1000))
    await _one_beat(holdings)
    expected = [("t", "executing", 1000)]
    if held_ms > FINISHED_MARK_AFTER_MS:  # its write is that late: marked after all
        expected.append(("t", "finished", 1000))
    assert sorted(store.marked) == sorted(expected)
    assert not holdings.unmarked.keys() & set(store.marked)
    assert not holdings.finished & set(store.marked)
