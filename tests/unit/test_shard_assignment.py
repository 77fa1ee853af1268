"""The pure shard assignment: complete, balanced within ⌈shards/members⌉, deterministic, sticky."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwheel.shards.assignment import assign, capacity

pytestmark = pytest.mark.unit

names = st.lists(st.text("abcdefghij:.-0123456789", min_size=1, max_size=8), max_size=12)


@given(shards=st.integers(1, 256), members=names)
def test_every_shard_has_exactly_one_member_within_the_bound(
    shards: int, members: list[str]
) -> None:
    """each shard goes to exactly one live member and nobody gets more than ⌈shards/members⌉"""
    owned = assign(shards, members)
    if not members:
        assert owned == {}
        return
    assert set(owned) == set(members)
    all_shards = [s for ids in owned.values() for s in ids]
    assert sorted(all_shards) == list(range(shards))
    assert max(len(ids) for ids in owned.values()) <= capacity(shards, len(set(members)))


def test_the_answer_does_not_depend_on_member_order() -> None:
    """every process computes the same assignment from the same member set"""
    assert assign(64, ["b", "a", "c"]) == assign(64, ["c", "b", "a", "a"])


def test_a_joining_member_moves_few_shards() -> None:
    """adding a fourth member to three moves about a quarter of the shards, not all of them"""
    before = assign(64, ["a", "b", "c"])
    after = assign(64, ["a", "b", "c", "d"])
    moved = sum(1 for m in ("a", "b", "c") for s in before[m] if s not in after[m])
    assert len(after["d"]) == 16
    assert moved <= 24


def test_no_shards_is_refused() -> None:
    """a shard count below one is a configuration error"""
    with pytest.raises(ValueError, match="shards"):
        assign(0, ["a"])
