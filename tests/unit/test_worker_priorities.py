"""Smooth weighted round robin over the priority levels that have work."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwheel.workers.priorities import WeightedPicker

pytestmark = pytest.mark.unit

LEVELS = ("high", "normal", "low")


def test_all_backlogged_follows_weights_in_every_window() -> None:
    """6:3:1 with all levels ready: exactly 6, 3 and 1 picks in every ten consecutive picks"""
    picker = WeightedPicker({"high": 6, "normal": 3, "low": 1})
    picks = [picker.pick(LEVELS) for _ in range(1000)]
    for start in range(0, 1000, 10):
        assert Counter(picks[start : start + 10]) == {"high": 6, "normal": 3, "low": 1}


def test_idle_level_lends_its_share() -> None:
    """with high idle, normal and low split the slots 3:1"""
    picker = WeightedPicker({"high": 6, "normal": 3, "low": 1})
    picks = Counter(picker.pick(("normal", "low")) for _ in range(400))
    assert picks == {"normal": 300, "low": 100}


def test_idle_level_banks_no_credit() -> None:
    """a level idle for a long time does not burst when it returns"""
    picker = WeightedPicker({"high": 6, "normal": 3, "low": 1})
    for _ in range(100):
        picker.pick(("normal",))
    picks = [picker.pick(LEVELS) for _ in range(10)]
    assert Counter(picks) == {"high": 6, "normal": 3, "low": 1}


@given(
    weights=st.tuples(st.integers(1, 20), st.integers(1, 20), st.integers(1, 20)),
    ready=st.lists(st.sets(st.sampled_from(LEVELS), min_size=1), min_size=1, max_size=300),
)
def test_a_ready_level_waits_at_most_sum_of_weights_picks(
    weights: tuple[int, int, int], ready: list[set[str]]
) -> None:
    """no starvation: a level ready throughout a run of sum(weights) picks is picked in it"""
    picker = WeightedPicker(dict(zip(LEVELS, weights, strict=True)))
    picks = [picker.pick(r) for r in ready]
    assert all(p in r for p, r in zip(picks, ready, strict=True))
    span = sum(weights)
    for level in LEVELS:
        waited = 0
        for p, r in zip(picks, ready, strict=True):
            if level not in r or p == level:
                waited = 0
            else:
                waited += 1
            assert waited < span


def test_reserved_slots_go_to_high_only() -> None:
    """with 2 slots reserved, the last two free slots are refused to normal and low"""
    picker = WeightedPicker({"high": 6, "normal": 3, "low": 1}, reserved_high=2)
    assert picker.pick(("normal", "low"), free_slots=2) is None
    assert picker.pick(("normal", "high"), free_slots=1) == "high"
    assert picker.pick(("normal",), free_slots=3) == "normal"


def test_nothing_ready_picks_nothing() -> None:
    """no ready level: None"""
    assert WeightedPicker({"high": 1, "normal": 1, "low": 1}).pick(()) is None


def test_weights_must_be_positive() -> None:
    """a zero weight would starve its level: refused"""
    with pytest.raises(ValueError, match="positive"):
        WeightedPicker({"high": 1, "normal": 0, "low": 1})
