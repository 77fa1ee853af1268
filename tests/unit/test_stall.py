"""The stall judgement (tickwheel/stall.py): waiting messages unread for `after_s` are a stall;
nothing waiting, a moving position, a transactional tail, or another member's partitions are
not. A worker's cut sample (`Backlog.only`) and its group membership (`Absence`);
the calls a loop has under way (`Underway`)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tickwheel.stall import Absence, Backlog, StallWatch, Underway, samples

pytestmark = pytest.mark.unit

A, B = ("regs", 0), ("regs", 1)


def _backlog(held: set[tuple[str, int]], reached: dict, ends: dict) -> Backlog:
    return Backlog(frozenset(held), reached, ends)


def test_waiting_messages_unread_for_the_window_are_a_stall() -> None:
    watch = StallWatch(after_s=60)
    sample = _backlog({A, B}, {A: 10, B: 5}, {A: 14, B: 5})
    assert watch.judge(sample, 0) == []
    assert watch.judge(sample, 59.9) == []
    [stall] = watch.judge(sample, 60)
    assert (stall.topic, stall.partition, stall.held, stall.reached, stall.waiting) == (
        "regs", 0, True, 10, 4,
    )  # fmt: skip
    assert stall.describe(60) == (
        "regs[0] (held by this consumer): 4 message(s) waiting after offset 10, unread for 60 s"
    )


def test_a_moving_position_restarts_the_window() -> None:
    watch = StallWatch(after_s=60)
    watch.judge(_backlog({A}, {A: 10}, {A: 20}), 0)
    watch.judge(_backlog({A}, {A: 12}, {A: 30}), 45)  # read two: progress
    assert watch.judge(_backlog({A}, {A: 12}, {A: 30}), 100) == []  # 55 s since the move
    assert len(watch.judge(_backlog({A}, {A: 12}, {A: 30}), 105)) == 1


def test_nothing_waiting_is_never_a_stall() -> None:
    """An idle consumer at the end of its partitions, as long as it likes; librdkafka's
    position past a transaction's marker or aborted records is the partition's end too."""
    watch = StallWatch(after_s=60)
    for now in (0, 100, 1000):
        assert watch.judge(_backlog({A}, {A: 18}, {A: 18}), now) == []


def test_a_gap_in_the_waiting_restarts_the_window() -> None:
    watch = StallWatch(after_s=60)
    watch.judge(_backlog({A}, {A: 10}, {A: 11}), 0)
    watch.judge(_backlog({A}, {A: 11}, {A: 11}), 30)  # read up
    watch.judge(_backlog({A}, {A: 11}, {A: 12}), 40)  # a new one arrives
    assert watch.judge(_backlog({A}, {A: 11}, {A: 12}), 80) == []
    assert len(watch.judge(_backlog({A}, {A: 11}, {A: 12}), 100)) == 1


def test_other_members_partitions_are_not_judged_while_this_one_holds_some() -> None:
    watch = StallWatch(after_s=60)
    sample = _backlog({A}, {A: 5, B: 0}, {A: 5, B: 9})  # B waits, but B is not ours
    assert watch.judge(sample, 0) == [] and watch.judge(sample, 120) == []


def test_holding_nothing_while_the_group_has_messages_is_a_stall() -> None:
    """No partition held: the group's committed offsets stand for whoever should read them."""
    watch = StallWatch(after_s=60)
    sample = _backlog(set(), {A: 5, B: 3}, {A: 5, B: 9})
    watch.judge(sample, 0)
    [stall] = watch.judge(sample, 61)
    assert (stall.partition, stall.held, stall.waiting) == (1, False, 6)
    assert "held by no one this consumer sees" in stall.describe(61)


def test_reset_forgets_what_was_seen() -> None:
    """While the loop backs off from a failure it reports, the window starts again after."""
    watch = StallWatch(after_s=60)
    sample = _backlog({A}, {A: 1}, {A: 2})
    watch.judge(sample, 0)
    watch.reset()
    assert watch.judge(sample, 70) == []
    assert len(watch.judge(sample, 130)) == 1


def test_a_sample_reads_held_partitions_by_position_and_the_rest_by_the_groups_offset() -> None:
    """Held: the consumer's position (past a transaction's marker: the end); held but no
    position yet, or not held: the group's committed offset; none committed: the start."""
    C = ("regs", 2)
    sample = Backlog.of(
        held=frozenset({A, B}),
        positions={A: 18},
        starts={A: 0, B: 3, C: 5},
        ends={A: 18, B: 9, C: 7},
        committed={A: 12, B: 4},
    )
    assert sample.reached == {A: 18, B: 4, C: 5}
    assert sample.waiting() == {B: 5, C: 2}


def test_a_cut_sample_judges_only_the_partitions_kept() -> None:
    """A worker keeps the held partitions it fetches: a paused one waits unjudged, and with
    none kept nothing is judged (not even by the group's offsets, as holding none would be)."""
    watch = StallWatch(after_s=60)
    sample = _backlog({A, B}, {A: 10, B: 5}, {A: 14, B: 9})
    watch.judge(sample.only(frozenset({A})), 0)
    [stall] = watch.judge(sample.only(frozenset({A})), 60)
    assert (stall.topic, stall.partition) == A
    assert sample.only(frozenset({A})) == _backlog({A}, {A: 10}, {A: 14})
    idle = StallWatch(after_s=60)
    nothing = sample.only(frozenset())
    assert idle.judge(nothing, 0) == [] and idle.judge(nothing, 600) == []


def test_absence_from_the_group_for_the_window_is_a_stall() -> None:
    absence = Absence(after_s=60)
    assert absence.judge(False, 10) is None
    assert absence.judge(False, 69.9) is None
    assert absence.judge(False, 70) == 10
    assert absence.judge(True, 71) is None  # back in the group: the clock starts again
    assert absence.judge(False, 72) is None and absence.judge(False, 131) is None
    assert absence.judge(False, 132) == 72
    absence.reset()  # a sample the broker did not answer forgets the absence
    assert absence.judge(False, 133) is None and absence.judge(False, 193) == 133


def test_underway_names_the_oldest_call_until_it_returns_or_raises() -> None:
    now = [100.0]
    underway = Underway(clock=lambda: now[0])
    assert underway.oldest() is None
    with underway.call("claim"):
        now[0] = 130.0
        with underway.call("heartbeat"):
            assert underway.oldest() == ("claim", 100.0)
        assert underway.oldest() == ("claim", 100.0)
    assert underway.oldest() is None
    with pytest.raises(ConnectionError), underway.call("result write"):
        raise ConnectionError("the database is down")
    assert underway.oldest() is None  # a call that failed is no longer under way


async def test_samples_come_every_quarter_window_until_stop() -> None:
    stop = asyncio.Event()
    seen: list[float] = []
    async for now in samples(stop, 0.2):
        seen.append(now)
        if len(seen) == 3:
            stop.set()
    assert len(seen) == 3
    assert all(later - earlier >= 0.04 for earlier, later in itertools.pairwise(seen))
