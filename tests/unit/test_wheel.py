"""The timing wheel's contract, clause by clause, and regressions known from other wheels."""

from __future__ import annotations

import ast
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

import tickwheel.wheel
from tickwheel.wheel import TimingWheel

pytestmark = pytest.mark.unit

T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, unix ms
SECOND_MS = 1_000
DAY_MS = 86_400_000
TEN_YEARS_MS = (10 * 365 + 2) * DAY_MS  # two leap days in any ten years from 2026


def _dues(entries: Sequence[tuple[object, int, object]]) -> list[int]:
    return [due for _, due, _ in entries]


# --- constructor -------------------------------------------------------------------------------


@pytest.mark.parametrize("tick_ms", [0, -1, -1000])
def test_non_positive_tick_is_rejected(tick_ms: int) -> None:
    """tick_ms <= 0 raises ValueError naming tick_ms."""
    with pytest.raises(ValueError, match=r"tick_ms must be a positive number of milliseconds"):
        TimingWheel(tick_ms, 64, 0)


@pytest.mark.parametrize("wheel_size", [1, 0, -64])
def test_wheel_size_below_two_is_rejected(wheel_size: int) -> None:
    """wheel_size < 2 raises ValueError naming wheel_size."""
    with pytest.raises(ValueError, match=r"wheel_size must be at least 2"):
        TimingWheel(1, wheel_size, 0)


@pytest.mark.parametrize(
    ("tick_ms", "wheel_size", "start_ms"), [(1.5, 64, 0), (1, 64.0, 0), (True, 64, 0), (1, 64, "0")]
)
def test_non_integer_arguments_are_rejected(
    tick_ms: object, wheel_size: object, start_ms: object
) -> None:
    """Constructor arguments that are not ints (bool included) raise TypeError."""
    with pytest.raises(TypeError, match=r"must be an int"):
        TimingWheel(tick_ms, wheel_size, start_ms)  # type: ignore[arg-type]


def test_package_exports_the_wheel() -> None:
    """tickwheel.wheel exports TimingWheel and names it in __all__."""
    assert tickwheel.wheel.__all__ == ["TimingWheel"]
    assert tickwheel.wheel.TimingWheel is TimingWheel


def test_wheel_is_generic_in_key_and_value() -> None:
    """TimingWheel[K, V] can be subscripted at runtime, for callers that annotate instances."""
    wheel = TimingWheel[str, int](1, 64, 0)
    wheel.schedule("a", 5, 7)
    assert wheel.advance(5) == [("a", 5, 7)]


def test_wheel_module_is_pure() -> None:
    """The wheel imports nothing that could read a clock, start a thread or do I/O."""
    allowed = {
        "__future__",
        "bisect",
        "collections.abc",
        "heapq",
        "itertools",
        "operator",
        "typing",
    }
    for path in Path(tickwheel.wheel.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert {alias.name for alias in node.names} <= allowed, path
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module in allowed, path


# --- schedule ----------------------------------------------------------------------------------


def test_entry_fires_at_its_due_time_not_before() -> None:
    """An entry is returned by the first advance whose now_ms reaches its due_ms."""
    wheel: TimingWheel[str, str] = TimingWheel(1, 64, T0_MS)
    wheel.schedule("job", T0_MS + 90_000, "payload")
    assert wheel.advance(T0_MS + 89_999) == []
    assert wheel.advance(T0_MS + 90_000) == [("job", T0_MS + 90_000, "payload")]


def test_value_defaults_to_none() -> None:
    """schedule without a value stores None as the value."""
    wheel: TimingWheel[str, int] = TimingWheel(1, 64, 0)
    wheel.schedule("job", 10)
    assert wheel.advance(10) == [("job", 10, None)]


@pytest.mark.parametrize(("first_ms", "second_ms"), [(100, 5_000), (5_000, 100), (100, 100)])
def test_scheduling_a_pending_key_moves_it(first_ms: int, second_ms: int) -> None:
    """Scheduling a pending key replaces its due time and value; it fires once, at the new time."""
    wheel: TimingWheel[str, str] = TimingWheel(1, 64, 0)
    wheel.schedule("job", first_ms, "old")
    wheel.schedule("job", second_ms, "new")
    assert len(wheel) == 1
    assert wheel.next_deadline_ms() == second_ms
    assert wheel.advance(second_ms - 1) == []
    assert wheel.advance(10_000) == [("job", second_ms, "new")]


def test_past_due_time_fires_on_the_next_advance() -> None:
    """A due time before the wheel's clock fires on the next advance, even at an unchanged now."""
    wheel: TimingWheel[str, None] = TimingWheel(10, 64, T0_MS)
    wheel.schedule("late", T0_MS - 3 * DAY_MS)
    assert wheel.advance(T0_MS) == [("late", T0_MS - 3 * DAY_MS, None)]
    wheel.schedule("later", T0_MS - 1)
    assert wheel.advance(T0_MS) == [("later", T0_MS - 1, None)]


def test_a_fired_key_can_be_scheduled_again() -> None:
    """After a key fired it is not pending; scheduling it again makes it pending anew."""
    wheel: TimingWheel[str, None] = TimingWheel(1, 64, 0)
    wheel.schedule("cron", 1_000)
    assert _dues(wheel.advance(1_000)) == [1_000]
    assert "cron" not in wheel
    wheel.schedule("cron", 2_000)
    assert "cron" in wheel
    assert _dues(wheel.advance(2_000)) == [2_000]


def test_get_gives_the_value_a_key_is_pending_with() -> None:
    """get follows schedule, a move and a cascade; a fired or cancelled key gives None"""
    wheel: TimingWheel[str, str] = TimingWheel(1, 4, 0)
    assert wheel.get("a") is None
    wheel.schedule("a", 100, "first")
    wheel.schedule("b", 3, "b")
    assert wheel.get("a") == "first"
    wheel.schedule("a", 50, "moved")
    assert wheel.get("a") == "moved"
    assert _dues(wheel.advance(10)) == [3]  # "a" cascaded to a finer level meanwhile
    assert wheel.get("a") == "moved" and wheel.get("b") is None
    wheel.cancel("a")
    assert wheel.get("a") is None


# --- cancel ------------------------------------------------------------------------------------


def test_cancelled_entry_never_fires() -> None:
    """cancel of a pending key returns True, and the entry never comes out of advance."""
    wheel: TimingWheel[str, None] = TimingWheel(1, 64, 0)
    wheel.schedule("keep", 500)
    wheel.schedule("drop", 500)
    assert wheel.cancel("drop") is True
    assert wheel.advance(10**9) == [("keep", 500, None)]


def test_cancel_of_a_key_not_pending_returns_false() -> None:
    """cancel returns False for an unknown, an already cancelled and an already fired key."""
    wheel: TimingWheel[str, None] = TimingWheel(1, 64, 0)
    assert wheel.cancel("unknown") is False
    wheel.schedule("once", 5)
    assert wheel.cancel("once") is True
    assert wheel.cancel("once") is False
    wheel.schedule("fired", 5)
    wheel.advance(5)
    assert wheel.cancel("fired") is False


class _CountingKey:
    """A key that counts how often the wheel hashes or compares keys."""

    hashes = 0
    comparisons = 0

    def __init__(self, n: int) -> None:
        self.n = n

    def __hash__(self) -> int:
        _CountingKey.hashes += 1
        return hash(self.n)

    def __eq__(self, other: object) -> bool:
        _CountingKey.comparisons += 1
        return isinstance(other, _CountingKey) and other.n == self.n


def test_cancel_touches_a_constant_number_of_keys() -> None:
    """cancel is O(1): it hashes the key a fixed number of times and scans no other entries."""
    wheel: TimingWheel[_CountingKey, None] = TimingWheel(1, 64, 0)
    keys = [_CountingKey(n) for n in range(20_000)]
    for n, key in enumerate(keys):
        wheel.schedule(key, 1_000 + n % 3_000)
    for victim in (keys[0], keys[10_000], keys[-1]):
        _CountingKey.hashes = _CountingKey.comparisons = 0
        assert wheel.cancel(victim) is True
        assert _CountingKey.hashes <= 2
        assert _CountingKey.comparisons <= 2


# --- advance -----------------------------------------------------------------------------------


def test_advance_returns_due_entries_sorted_by_due_time() -> None:
    """advance returns every entry with due_ms <= now_ms, in due_ms order, and nothing later."""
    rng = random.Random(3)
    wheel: TimingWheel[int, None] = TimingWheel(1, 8, 0)
    dues = [rng.randrange(0, 100_000) for _ in range(2_000)]
    for key, due in enumerate(dues):
        wheel.schedule(key, due)
    fired = wheel.advance(50_000)
    assert _dues(fired) == sorted(due for due in dues if due <= 50_000)
    assert {key for key, _, _ in fired} == {k for k, due in enumerate(dues) if due <= 50_000}
    assert len(wheel) == sum(due > 50_000 for due in dues)


def test_each_entry_fires_exactly_once() -> None:
    """Repeating or continuing advance never returns an entry a second time."""
    wheel: TimingWheel[str, None] = TimingWheel(1, 64, 0)
    wheel.schedule("a", 100)
    wheel.schedule("b", 200)
    assert _dues(wheel.advance(150)) == [100]
    assert wheel.advance(150) == []
    assert _dues(wheel.advance(300)) == [200]
    assert wheel.advance(10**12) == []


@pytest.mark.parametrize("tick_ms", [10, 1_000])
def test_nothing_due_later_than_now_fires_even_inside_the_current_tick(tick_ms: int) -> None:
    """Entries of a partly due bucket that are due after now_ms stay pending."""
    wheel: TimingWheel[int, None] = TimingWheel(tick_ms, 4, 0)
    base = 7 * tick_ms
    for offset in range(tick_ms):
        wheel.schedule(offset, base + offset)
    half = tick_ms // 2
    assert _dues(wheel.advance(base + half)) == [base + o for o in range(half + 1)]
    assert len(wheel) == tick_ms - half - 1
    assert wheel.next_deadline_ms() == base + half + 1
    assert _dues(wheel.advance(base + tick_ms - 1)) == [base + o for o in range(half + 1, tick_ms)]


def test_an_earlier_now_returns_nothing_and_harms_nothing() -> None:
    """advance with a now_ms before an earlier call's returns [] and changes no pending entry."""
    wheel: TimingWheel[str, None] = TimingWheel(10, 4, 0)
    wheel.advance(10_000)
    wheel.schedule("past", 4_000)
    wheel.schedule("future", 20_000)
    assert wheel.advance(5_000) == []
    assert len(wheel) == 2
    assert wheel.next_deadline_ms() == 4_000
    assert wheel.advance(10_000) == [("past", 4_000, None)]
    assert wheel.advance(20_000) == [("future", 20_000, None)]


def test_the_first_advance_may_precede_start_ms() -> None:
    """Before any advance, start_ms only places entries: an earlier now still fires what is due."""
    wheel: TimingWheel[str, None] = TimingWheel(1, 64, 1_000)
    wheel.schedule("early", 500)
    wheel.schedule("later", 900)
    assert wheel.advance(700) == [("early", 500, None)]
    assert wheel.advance(600) == []
    assert wheel.advance(900) == [("later", 900, None)]


def test_equal_due_times_fire_together() -> None:
    """Entries sharing a due_ms fire in the same advance; their relative order is unspecified."""
    wheel: TimingWheel[int, None] = TimingWheel(1, 4, 0)
    for key in range(50):
        wheel.schedule(key, 64 if key % 2 else 1_024)
    assert wheel.advance(63) == []
    fired = wheel.advance(1_024)
    assert _dues(fired) == [64] * 25 + [1_024] * 25
    assert sorted(key for key, _, _ in fired) == list(range(50))


# --- next_deadline_ms, len, in -----------------------------------------------------------------


def test_next_deadline_is_none_when_empty() -> None:
    """next_deadline_ms is None for a new wheel and again once everything fired or was cancelled."""
    wheel: TimingWheel[str, None] = TimingWheel(1, 64, 0)
    assert wheel.next_deadline_ms() is None
    wheel.schedule("a", 5)
    wheel.schedule("b", 6)
    wheel.cancel("b")
    wheel.advance(5)
    assert wheel.next_deadline_ms() is None


def test_next_deadline_is_the_earliest_pending_due_time() -> None:
    """next_deadline_ms is exactly the smallest pending due_ms, whatever level holds it."""
    wheel: TimingWheel[int, None] = TimingWheel(10, 4, 0)
    for key, due in enumerate([9_999_999, 70_001, 1_234, 45]):
        wheel.schedule(key, due)
        assert wheel.next_deadline_ms() == min([9_999_999, 70_001, 1_234, 45][: key + 1])
    assert wheel.advance(44) == []
    assert _dues(wheel.advance(wheel.next_deadline_ms() or 0)) == [45]
    assert wheel.next_deadline_ms() == 1_234


def test_next_deadline_follows_cancel_and_reschedule_of_the_earliest() -> None:
    """Cancelling or moving the earliest entry moves next_deadline_ms to the new earliest."""
    wheel: TimingWheel[str, None] = TimingWheel(10, 64, 0)
    for key, due in (("a", 101), ("b", 105), ("c", 109), ("d", 50_000)):
        wheel.schedule(key, due)
    wheel.cancel("a")
    assert wheel.next_deadline_ms() == 105
    wheel.schedule("b", 60_000)
    assert wheel.next_deadline_ms() == 109
    wheel.schedule("d", 20)
    assert wheel.next_deadline_ms() == 20


def test_next_deadline_may_lie_before_the_last_advance() -> None:
    """An entry scheduled in the past makes next_deadline_ms its own due time: advance at once."""
    wheel: TimingWheel[str, None] = TimingWheel(1, 64, 0)
    wheel.advance(10_000)
    wheel.schedule("missed", 9_000)
    assert wheel.next_deadline_ms() == 9_000
    assert _dues(wheel.advance(10_000)) == [9_000]


def test_len_and_in_track_pending_keys() -> None:
    """len counts pending keys and `in` is true exactly for them, through every operation."""
    wheel: TimingWheel[str, None] = TimingWheel(1, 64, 0)
    wheel.schedule("a", 10)
    wheel.schedule("b", 20)
    wheel.schedule("b", 30)
    assert len(wheel) == 2
    assert "a" in wheel and "b" in wheel and "c" not in wheel
    wheel.cancel("a")
    assert len(wheel) == 1 and "a" not in wheel
    wheel.advance(30)
    assert len(wheel) == 0 and "b" not in wheel


# --- regressions known from other wheels -------------------------------------------------------


@pytest.mark.parametrize(("tick_ms", "wheel_size"), [(1, 4), (10, 4), (1, 64), (7, 3)])
def test_exact_multiples_of_every_level_span_fire_exactly_on_time(
    tick_ms: int, wheel_size: int
) -> None:
    """Due times on a level's span boundary (and one ms either side) fire at their millisecond."""
    start = 5 * tick_ms
    wheel: TimingWheel[int, None] = TimingWheel(tick_ms, wheel_size, start)
    dues: set[int] = set()
    for level in range(7):
        span = tick_ms * wheel_size**level
        for boundary in (span, wheel_size * span, (start // span + 1) * span):
            dues |= {due for due in (boundary - 1, boundary, boundary + 1) if due > start}
    for key, due in enumerate(sorted(dues)):
        wheel.schedule(key, due)
    for due in sorted(dues):
        assert wheel.advance(due - 1) == []
        assert _dues(wheel.advance(due)) == [due]
    assert len(wheel) == 0


@pytest.mark.parametrize("wheel_size", [2, 4, 64])
def test_slot_equal_to_the_current_pointer_fires_a_full_rotation_later(wheel_size: int) -> None:
    """A due time that maps to the clock's own slot modulo the wheel size is not fired early."""
    tick_ms = 10
    start = 3 * tick_ms + 4
    wheel: TimingWheel[int, None] = TimingWheel(tick_ms, wheel_size, start)
    rotation_dues = [start + tick_ms * wheel_size**level for level in (1, 2, 3)]
    for key, due in enumerate(rotation_dues):
        wheel.schedule(key, due)
    for due in rotation_dues:
        assert wheel.advance(due - 1) == []
        assert _dues(wheel.advance(due)) == [due]


def test_catching_up_after_oversleeping_returns_everything_once_in_order() -> None:
    """One late advance returns every missed entry from every level, sorted, and leaves none."""
    rng = random.Random(11)
    wheel: TimingWheel[int, None] = TimingWheel(1, 16, T0_MS)
    dues = [T0_MS + rng.randrange(0, 2 * DAY_MS) for _ in range(5_000)]
    for key, due in enumerate(dues):
        wheel.schedule(key, due)
    wheel.advance(T0_MS + 1_000)
    fired = wheel.advance(T0_MS + 3 * DAY_MS)
    assert _dues(fired) == sorted(due for due in dues if due > T0_MS + 1_000)
    assert len(wheel) == 0
    assert wheel.next_deadline_ms() is None


def test_cancel_and_reschedule_inside_the_due_tick() -> None:
    """Inside a partly fired tick, cancel and moving entries (earlier or later) take effect."""
    wheel: TimingWheel[int, None] = TimingWheel(10, 4, 0)
    for due in range(100, 110):
        wheel.schedule(due, due)
    assert _dues(wheel.advance(104)) == [100, 101, 102, 103, 104]
    assert wheel.cancel(106) is True
    wheel.schedule(108, 103)  # moved into the already passed part of the tick
    wheel.schedule(107, 150)  # moved out of the tick
    wheel.schedule(109, 105)  # moved within the tick
    assert wheel.advance(104) == [(108, 103, None)]
    assert sorted(wheel.advance(109)) == [(105, 105, None), (109, 105, None)]
    assert wheel.advance(149) == []
    assert wheel.advance(150) == [(107, 150, None)]
    assert len(wheel) == 0


def test_ten_year_delay() -> None:
    """An entry ten years out is exact: it is the next deadline and fires at its millisecond."""
    wheel: TimingWheel[str, None] = TimingWheel(1, 64, T0_MS)
    due = T0_MS + TEN_YEARS_MS
    wheel.schedule("decade", due)
    wheel.schedule("soon", T0_MS + 5)
    assert _dues(wheel.advance(T0_MS + 5)) == [T0_MS + 5]
    assert wheel.next_deadline_ms() == due
    assert wheel.advance(due - DAY_MS) == []
    assert wheel.advance(due - 1) == []
    assert wheel.advance(due) == [("decade", due, None)]


def test_one_ms_tick_with_a_thirty_day_jump() -> None:
    """A 1 ms tick survives a 30-day jump: all fire at once; new entries follow the new clock."""
    rng = random.Random(5)
    wheel: TimingWheel[int, None] = TimingWheel(1, 64, T0_MS)
    dues = [T0_MS + rng.randrange(0, 30 * DAY_MS) for _ in range(3_000)]
    for key, due in enumerate(dues):
        wheel.schedule(key, due)
    after = T0_MS + 30 * DAY_MS
    assert _dues(wheel.advance(after)) == sorted(dues)
    # After the jump, new entries are placed against the new clock, to the millisecond.
    for offset in (1, 63, 64, 65, 4_096, 600_000):
        wheel.schedule(-offset, after + offset)
    for offset in (1, 63, 64, 65, 4_096, 600_000):
        assert wheel.advance(after + offset - 1) == []
        assert wheel.advance(after + offset) == [(-offset, after + offset, None)]


def test_a_bucket_emptied_by_cancels_is_skipped() -> None:
    """Buckets emptied by cancels are dropped lazily and never stand in for the next deadline."""
    wheel: TimingWheel[int, None] = TimingWheel(1, 4, 0)
    for key in range(100):
        wheel.schedule(key, 10 + key)
    wheel.schedule(-1, 5_000)
    for key in range(100):
        wheel.cancel(key)
    assert wheel.next_deadline_ms() == 5_000
    assert wheel.advance(4_999) == []
    assert _dues(wheel.advance(5_000)) == [5_000]
