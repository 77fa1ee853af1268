"""The leader's claim order between tenants (shards/fairness.py), without I/O."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwheel.shards.fairness import TenantQueue

pytestmark = pytest.mark.unit


class Entry(NamedTuple):
    tenant: str
    n: int


def _entries(tenant: str, count: int) -> list[Entry]:
    return [Entry(tenant, i) for i in range(count)]


def test_a_small_tenant_is_served_in_the_first_batch_behind_a_burst() -> None:
    """A tenant with 100 entries queued after another's 100,000 is wholly in the first batch."""
    queue: TenantQueue[Entry] = TenantQueue()
    queue.add(_entries("big", 100_000))
    queue.add(_entries("small", 100))
    first = queue.take(5_000)
    assert len(first) == 5_000
    assert sum(e.tenant == "small" for e in first) == 100
    assert len(queue) == 100_000 - 4_900


def test_shares_a_tenant_does_not_use_go_to_the_others() -> None:
    """Three tenants, one with 2 entries: a batch of 10 is 2 of it and 4 of each other."""
    queue: TenantQueue[Entry] = TenantQueue()
    for tenant, count in (("a", 50), ("b", 2), ("c", 50)):
        queue.add(_entries(tenant, count))
    batch = queue.take(10)
    counts = {t: sum(e.tenant == t for e in batch) for t in "abc"}
    assert counts == {"a": 4, "b": 2, "c": 4}


def test_more_tenants_than_a_batch_holds_are_each_reached_in_turn() -> None:
    """With 10 tenants and batches of 3, every tenant is served within four batches."""
    queue: TenantQueue[Entry] = TenantQueue()
    for t in range(10):
        queue.add(_entries(f"t{t}", 5))
    served: set[str] = set()
    for _ in range(4):
        served |= {e.tenant for e in queue.take(3)}
    assert served == {f"t{t}" for t in range(10)}


def test_entries_added_between_batches_join_the_next_one() -> None:
    """A tenant whose entries come due during a burst is in the very next batch."""
    queue: TenantQueue[Entry] = TenantQueue()
    queue.add(_entries("big", 1_000))
    queue.take(100)
    queue.add(_entries("late", 10))
    assert sum(e.tenant == "late" for e in queue.take(100)) == 10


@given(
    st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 30)), max_size=12),
    st.integers(1, 40),
)
def test_every_entry_comes_out_once_in_its_tenants_order(
    adds: list[tuple[str, int]], size: int
) -> None:
    """Whatever is added comes out exactly once, each tenant's entries in the order added."""
    queue: TenantQueue[Entry] = TenantQueue()
    added: list[Entry] = []
    seq = 0
    for tenant, count in adds:
        batch = [Entry(tenant, seq + i) for i in range(count)]
        seq += count
        queue.add(batch)
        added.extend(batch)
    out: list[Entry] = []
    while len(queue):
        got = queue.take(size)
        assert 1 <= len(got) <= size
        out.extend(got)
    assert sorted(out) == sorted(added)
    for tenant in set(e.tenant for e in added):
        mine = [e.n for e in out if e.tenant == tenant]
        assert mine == sorted(mine)
    assert queue.take(size) == []
