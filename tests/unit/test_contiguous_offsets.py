"""ContiguousOffsets against a model: the committable position never passes an unfinished
message, and a revoked partition's late completions are ignored."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwheel.kafka.offsets import ContiguousOffsets

pytestmark = pytest.mark.unit

TP = ("runs.normal", 0)


@given(st.permutations(list(range(30))), st.integers(0, 30))
def test_position_is_lowest_unfinished_offset(order: list[int], finished: int) -> None:
    """after finishing any subset in any order, the position is the lowest unfinished offset
    (or one past the last when all are done)"""
    offsets = ContiguousOffsets()
    gens = [offsets.track(TP, o) for o in range(30)]
    done = set(order[:finished])
    for o in order[:finished]:
        offsets.done(TP, o, gens[o])
    expected = min(set(range(30)) - done, default=30)
    assert offsets.position(TP) == expected
    assert offsets.outstanding() == 30 - finished


def test_advanced_reports_only_moves() -> None:
    """advanced() returns a partition once per move of its position"""
    offsets = ContiguousOffsets()
    gen = offsets.track(TP, 5)
    offsets.track(TP, 6)
    assert offsets.advanced() == {TP: 5}
    assert offsets.advanced() == {}
    offsets.done(TP, 6, gen)
    assert offsets.advanced() == {}
    offsets.done(TP, 5, gen)
    assert offsets.advanced() == {TP: 7}


def test_gaps_between_offsets_are_skipped() -> None:
    """offsets need not be consecutive (transaction markers): done ones advance past gaps"""
    offsets = ContiguousOffsets()
    gen = offsets.track(TP, 10)
    offsets.track(TP, 14)
    offsets.done(TP, 10, gen)
    assert offsets.position(TP) == 14
    offsets.done(TP, 14, gen)
    assert offsets.position(TP) == 15


def test_revoked_partition_ignores_late_done() -> None:
    """revoke returns the final position; a done of the old generation after a re-assign is
    ignored, so it cannot move the new period's position"""
    offsets = ContiguousOffsets()
    old = offsets.track(TP, 0)
    offsets.track(TP, 1)
    offsets.done(TP, 0, old)
    assert offsets.revoke(TP) == 1
    new = offsets.assign(TP)
    assert new != old
    offsets.track(TP, 1)
    offsets.done(TP, 1, old)
    assert offsets.position(TP) == 1
    offsets.done(TP, 1, new)
    assert offsets.position(TP) == 2


def test_redelivered_outstanding_offset_counts_once() -> None:
    """tracking an offset that is still outstanding does not need two dones"""
    offsets = ContiguousOffsets()
    gen = offsets.track(TP, 3)
    offsets.track(TP, 3)
    offsets.done(TP, 3, gen)
    assert offsets.position(TP) == 4
