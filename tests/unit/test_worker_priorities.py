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
def test_a_ready_level_waits_at_most_sum_of_weights_plus_one_picks(
    weights: tuple[int, int, int], ready: list[set[str]]
) -> None:
    """no starvation, whatever comes and goes: a ready level waits at most sum(weights) + 1
    picks (sum(weights) + levels - 2, with three levels)"""
    picker = WeightedPicker(dict(zip(LEVELS, weights, strict=True)))
    picks = [picker.pick(r) for r in ready]
    assert all(p in r for p, r in zip(picks, ready, strict=True))
    assert _longest_wait(picks, ready) <= sum(weights) + 1


@given(
    weights=st.tuples(st.integers(1, 20), st.integers(1, 20), st.integers(1, 20)),
    stable=st.sets(st.sampled_from(LEVELS), min_size=1),
    picks=st.integers(1, 200),
)
def test_with_a_stable_set_a_ready_level_waits_less_than_sum_of_weights(
    weights: tuple[int, int, int], stable: set[str], picks: int
) -> None:
    """while the levels with work stay the same, each is picked in every sum(weights) picks"""
    picker = WeightedPicker(dict(zip(LEVELS, weights, strict=True)))
    ready = [stable] * picks
    chosen = [picker.pick(r) for r in ready]
    assert _longest_wait(chosen, ready) < sum(weights[LEVELS.index(lv)] for lv in stable)


def test_found_case_of_credit_carried_over_set_changes() -> None:
    """weights 1:1:1, high ready throughout while the others come and go: smooth weighted
    round robin alone makes high wait 3 picks (its debt from the first pick); the guard
    serves it on its third"""
    ready = [set(LEVELS), {"high", "low"}, {"high", "low"}, {"high", "normal"}]
    picker = WeightedPicker(dict.fromkeys(LEVELS, 1))
    chosen = [picker.pick(r) for r in ready]
    assert chosen == ["high", "low", "low", "high"]
    assert _longest_wait(chosen, ready) == 2


def _longest_wait(picks: list[str | None], ready: list[set[str]]) -> int:
    """The most picks any level waited while ready, across the sequence."""
    longest = 0
    for level in LEVELS:
        waited = 0
        for p, r in zip(picks, ready, strict=True):
            waited = 0 if level not in r or p == level else waited + 1
            longest = max(longest, waited)
    return longest


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
