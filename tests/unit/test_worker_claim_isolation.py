"""A batch claim the database refuses for its data is split until each culprit is alone: the
rest of the batch is claimed, the culprits come back with the database's reason."""

from __future__ import annotations

import asyncpg
import pytest

from tickwheel.workers.store import Claim, Keys, RunId, RunStore

pytestmark = pytest.mark.unit


class _FakeStore(RunStore):
    """A RunStore whose claim statement fails, as Postgres would, for batches holding a
    poisoned run; every other run is claimed."""

    def __init__(self, poisoned: set[str], unavailable: bool = False) -> None:
        super().__init__(pool=None, worker_id="w", lease_ms=1000)  # type: ignore[arg-type]
        self.poisoned = poisoned
        self.unavailable = unavailable
        self.statements = 0
        self.sealed: list[bool] = []

    async def claim(self, keys: Keys, sealed: bool = False) -> dict[RunId, Claim]:
        self.statements += 1
        self.sealed.append(sealed)
        if self.unavailable:
            raise ConnectionRefusedError("the database is down")
        if any(job in self.poisoned for job in keys.job_ids):
            raise asyncpg.DataError("value out of int64 range")
        return {
            keys.run(i): Claim(*keys.run(i), keys.attempts[i], 3, 0, 10, 100, "h", None, "{}", 1)
            for i in range(len(keys))
        }


def _items(n: int) -> Keys:
    keys = Keys()
    for k in range(n):
        keys.add(("acme", f"job-{k}", 1000 + k), 1)
    return keys


async def test_one_poisoned_run_is_isolated_and_the_rest_claimed() -> None:
    """of 64 runs one is refused: 63 are claimed, the one comes back with the reason"""
    store = _FakeStore({"job-17"})
    claims, refused = await store.claim_isolating(_items(64))
    assert len(claims) == 63 and ("acme", "job-17", 1017) not in claims
    assert list(refused) == [(("acme", "job-17", 1017), 1)]
    assert "value out of int64 range" in refused[(("acme", "job-17", 1017), 1)]
    # bisection: about 2 log2(64) statements, not one per run
    assert store.statements <= 2 * 6 + 1


async def test_a_sealed_batch_is_isolated_with_the_sealed_claim() -> None:
    """the halves of a refused sealed batch are claimed as sealed too"""
    store = _FakeStore({"job-3"})
    claims, refused = await store.claim_isolating(_items(8), sealed=True)
    assert len(claims) == 7 and list(refused) == [(("acme", "job-3", 1003), 1)]
    assert store.sealed and all(store.sealed)


async def test_a_clean_batch_is_one_statement() -> None:
    """without a culprit the claim is the one statement it always was"""
    store = _FakeStore(set())
    claims, refused = await store.claim_isolating(_items(10))
    assert len(claims) == 10 and refused == {} and store.statements == 1


async def test_an_unavailable_database_is_not_taken_for_bad_data() -> None:
    """a connection failure raises (the batch waits and retries), it is never bisected"""
    store = _FakeStore(set(), unavailable=True)
    with pytest.raises(ConnectionRefusedError):
        await store.claim_isolating(_items(8))
    assert store.statements == 1
