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


def test_a_tenant_without_room_keeps_its_entries_and_the_others_take_the_batch() -> None:
    """The dispatch window: a tenant with room for 30 gets 30; one with none gets nothing and
    keeps every entry; the rest of the batch goes to a tenant with room."""
    queue: TenantQueue[Entry] = TenantQueue()
    for tenant in ("full", "some", "free"):
        queue.add(_entries(tenant, 1_000))
    room = {"full": 0, "some": 30, "free": 10_000}
    batch = queue.take(300, room.__getitem__)
    counts = {t: sum(e.tenant == t for e in batch) for t in room}
    assert counts == {"full": 0, "some": 30, "free": 270}
    assert queue.ready(room.__getitem__)
    assert not queue.ready({"full": 0, "some": 0, "free": 0}.__getitem__)
    nothing = queue.take(300, {"full": 0, "some": 0, "free": 0}.__getitem__)
    assert nothing == [] and len(queue) == 3_000 - 300
    # The held tenant is served, from its first entry, once it has room.
    later = queue.take(300, {"full": 5, "some": 0, "free": 0}.__getitem__)
    assert [e.n for e in later] == [0, 1, 2, 3, 4] and {e.tenant for e in later} == {"full"}


@given(
    st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 30)), max_size=10),
    st.integers(1, 40),
    st.dictionaries(st.sampled_from("abcd"), st.integers(-5, 25)),
)
def test_no_take_exceeds_a_tenants_room(
    adds: list[tuple[str, int]], size: int, room: dict[str, int]
) -> None:
    """However entries and room fall, one take never gives a tenant more than its room, and
    a take is empty only when no waiting tenant has room."""
    queue: TenantQueue[Entry] = TenantQueue()
    for tenant, count in adds:
        queue.add(_entries(tenant, count))

    def of(tenant: str) -> int:
        return room.get(tenant, 1_000)

    ready = queue.ready(of)
    got = queue.take(size, of)
    assert len(got) <= size
    assert bool(got) == ready
    for tenant in "abcd":
        assert sum(e.tenant == tenant for e in got) <= max(0, of(tenant))
