"""The timing wheel against a reference model (a dict plus a sort), driven by hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tickwheel.wheel import TimingWheel

pytestmark = pytest.mark.unit

KEYS = st.integers(min_value=0, max_value=11)
YEAR_MS = 365 * 86_400_000

# Offsets from the model's clock: mostly near (inside one bucket, one rotation, the past), some
# far (overflow levels), up to the ten-year delay a shard may be asked to hold.
NEAR_OFFSETS = st.integers(min_value=-40, max_value=400)
FAR_OFFSETS = st.integers(min_value=-(10**6), max_value=10 * YEAR_MS)
STEPS = st.one_of(
    st.integers(min_value=0, max_value=15),
    st.integers(min_value=0, max_value=3_000),
    st.integers(min_value=-200, max_value=-1),
    st.integers(min_value=0, max_value=12 * YEAR_MS),
)


class WheelModel(RuleBasedStateMachine):
    """Every operation is applied to a TimingWheel and to a dict; their answers must agree."""

    wheel: TimingWheel[int, int]
    pending: dict[int, tuple[int, int]]  # key -> (due_ms, value)
    last_advance_ms: int | None
    clock_ms: int  # base for generated due times: start_ms, then the latest forward advance
    tick_ms: int
    wheel_size: int

    @initialize(
        tick_ms=st.sampled_from([1, 2, 10, 1_000]),
        wheel_size=st.sampled_from([2, 3, 4, 64]),
        start_ms=st.one_of(st.integers(-10_000, 10_000), st.just(1_767_225_600_123)),
    )
    def create(self, tick_ms: int, wheel_size: int, start_ms: int) -> None:
        self.wheel = TimingWheel(tick_ms, wheel_size, start_ms)
        self.pending = {}
        self.last_advance_ms = None
        self.clock_ms = start_ms
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size

    def _schedule(self, key: int, due_ms: int, value: int) -> None:
        self.wheel.schedule(key, due_ms, value)
        self.pending[key] = (due_ms, value)

    @rule(key=KEYS, offset=st.one_of(NEAR_OFFSETS, FAR_OFFSETS), value=st.integers())
    def schedule(self, key: int, offset: int, value: int) -> None:
        self._schedule(key, self.clock_ms + offset, value)

    @rule(
        key=KEYS,
        level=st.integers(min_value=0, max_value=8),
        multiple=st.integers(min_value=0, max_value=5),
        nudge=st.sampled_from([-1, 0, 1]),
        value=st.integers(),
    )
    def schedule_on_a_span_boundary(
        self, key: int, level: int, multiple: int, nudge: int, value: int
    ) -> None:
        span = self.tick_ms * self.wheel_size**level
        boundary = (self.clock_ms // span + multiple) * span
        self._schedule(key, boundary + nudge, value)

    @rule(key=KEYS, other=KEYS, delta=st.integers(min_value=-3, max_value=3), value=st.integers())
    def schedule_beside_another(self, key: int, other: int, delta: int, value: int) -> None:
        # Clusters inside one tick are where partly due buckets and in-tick moves happen.
        if other in self.pending:
            self._schedule(key, self.pending[other][0] + delta, value)

    @rule(key=KEYS)
    def cancel(self, key: int) -> None:
        assert self.wheel.cancel(key) is (self.pending.pop(key, None) is not None)

    def _advance_to(self, now: int) -> list[tuple[int, int, int | None]]:
        got = self.wheel.advance(now)
        if self.last_advance_ms is not None and now < self.last_advance_ms:
            assert got == []
            return got
        self.last_advance_ms = now
        self.clock_ms = now
        expected = sorted(
            ((key, due, value) for key, (due, value) in self.pending.items() if due <= now),
            key=lambda entry: entry[1],
        )
        for key, _, _ in expected:
            del self.pending[key]
        # Order among equal due_ms is unspecified: compare the due sequence, then the multiset.
        assert [due for _, due, _ in got] == [due for _, due, _ in expected]
        assert sorted(got) == sorted(expected)
        return got

    @rule(step=STEPS)
    def advance(self, step: int) -> None:
        self._advance_to(self.clock_ms + step)

    @rule(data=st.data())
    def advance_to_a_pending_due_time(self, data: st.DataObject) -> None:
        if self.pending:
            due = data.draw(st.sampled_from(sorted(due for due, _ in self.pending.values())))
            self._advance_to(due)

    @rule()
    def advance_to_next_deadline(self) -> None:
        deadline = self.wheel.next_deadline_ms()
        if deadline is not None:
            # The deadline may precede the last advance (an entry scheduled in the past).
            last = self.last_advance_ms
            now = deadline if last is None else max(deadline, last)
            assert self._advance_to(now) != []

    @invariant()
    def agrees_with_model(self) -> None:
        assert len(self.wheel) == len(self.pending)
        for key in range(12):
            assert (key in self.wheel) == (key in self.pending)
        earliest = min((due for due, _ in self.pending.values()), default=None)
        assert self.wheel.next_deadline_ms() == earliest


WheelModel.TestCase.settings = settings(max_examples=250, stateful_step_count=40, deadline=None)
TestWheelModel = WheelModel.TestCase
TestWheelModel.__doc__ = "Any sequence of schedule, cancel and advance agrees with the model."
