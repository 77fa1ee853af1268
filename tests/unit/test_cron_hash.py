"""Jenkins-style H fields: stable per job, within their ranges, spread across jobs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.schedule import ScheduleError, parse_cron, stable_hash

pytestmark = pytest.mark.unit

KEYS = st.text(min_size=1, max_size=40).map(lambda s: f"tenant/{s}")


def _field_values(expr: str, key: str, index: int) -> list[int]:
    return [int(v) for v in parse_cron(expr, key=key).resolved.split()[index].split(",")]


def test_resolution_is_pinned() -> None:
    """The hash and the resolution of known keys never change (runs would move otherwise)."""
    assert stable_hash("acme/nightly", "minute#0") == 10237884099985351695
    assert parse_cron("H H * * *", key="acme/nightly").resolved == "15 0 * * *"
    assert parse_cron("H H * * * *", key="acme/nightly").resolved == "28 15 * * * *"
    assert parse_cron("H H H * *", key="acme/nightly").resolved == "15 0 22 * *"
    assert parse_cron("H H(9-17)/2 * * H(1-5)", key="acme/nightly").resolved == (
        "15 9,11,13,15,17 * * 1"
    )


def test_resolution_is_the_same_in_other_processes() -> None:
    """Interpreters with different hash seeds resolve H identically (no built-in hash())."""
    code = (
        "from tickwheel.schedule import parse_cron;"
        "print(parse_cron('H H H * H', key='globex/sync-42').resolved)"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert outputs == {parse_cron("H H H * H", key="globex/sync-42").resolved + "\n"}


def test_editing_another_field_keeps_the_slot() -> None:
    """H depends on job and field only: adding seconds or a weekday keeps minute and hour."""
    base = parse_cron("H H * * *", key="acme/report").resolved.split()
    weekdays = parse_cron("H H * * 1-5", key="acme/report").resolved.split()
    seconds = parse_cron("0 H H * * *", key="acme/report").resolved.split()
    assert base[:2] == weekdays[:2] == seconds[1:3]


def test_jobs_spread_over_the_hour() -> None:
    """A thousand jobs on 'H * * * *' use nearly every minute, none heavily."""
    minutes = Counter(_field_values("H * * * *", f"acme/job-{i}", 0)[0] for i in range(1000))
    assert len(minutes) >= 58
    assert max(minutes.values()) <= 35


@settings(max_examples=200, deadline=None)
@given(key=KEYS)
def test_bare_h_stays_in_the_fields_hash_range(key: str) -> None:
    """Bare H: second/minute 0-59, hour 0-23, day-of-month 1-28, month 1-12, weekday 0-6."""
    values = [int(v) for v in parse_cron("H H H H H H", key=key).resolved.split()]
    second, minute, hour, day, month, weekday = values
    assert 0 <= second <= 59
    assert 0 <= minute <= 59
    assert 0 <= hour <= 23
    assert 1 <= day <= 28
    assert 1 <= month <= 12
    assert 0 <= weekday <= 6


@settings(max_examples=200, deadline=None)
@given(key=KEYS, low=st.integers(0, 59), high=st.integers(0, 59), step=st.integers(1, 60))
def test_ranged_and_stepped_h_forms(key: str, low: int, high: int, step: int) -> None:
    """H(a-b) is one value in a..b; H(a-b)/n steps by n from an offset below a+n, up to b."""
    low, high = min(low, high), max(low, high)
    (single,) = _field_values(f"H({low}-{high}) * * * *", key, 0)
    assert low <= single <= high
    stepped = _field_values(f"H({low}-{high})/{step} * * * *", key, 0)
    assert low <= stepped[0] < low + step
    assert stepped == list(range(stepped[0], high + 1, step))
    every = _field_values(f"H/{step} * * * *", key, 0)
    assert every == list(range(every[0], 60, step))
    assert every[0] < step


def test_h_in_a_list_hashes_each_item_separately() -> None:
    """'H,30' resolves the H item and keeps 30 beside it."""
    values = _field_values("H(0-9),30 * * * *", "acme/list", 0)
    assert values[-1] == 30
    assert 0 <= values[0] <= 9


def test_h_needs_a_key() -> None:
    """Without a job key there is nothing to hash: ScheduleError naming the item."""
    with pytest.raises(ScheduleError, match=r"minute item 'H' uses H, which needs the job key"):
        parse_cron("H * * * *")


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("H(5-2) * * * *", "needs a range a-b with 0 <= a <= b <= 59"),
        ("H(0-60) * * * *", "needs a range a-b with 0 <= a <= b <= 59"),
        ("0 H(0-24) * * *", "needs a range a-b with 0 <= a <= b <= 23"),
        ("H/0 * * * *", "needs a step n >= 1"),
        ("Hx * * * *", "is not a valid H form"),
        ("H(1-) * * * *", "is not a valid H form"),
        ("0 0 * * H(MON-FRI)", "is not a valid H form"),
    ],
)
def test_malformed_h_forms_are_rejected(expr: str, fragment: str) -> None:
    """Malformed H items are ScheduleError('schedule') saying which form is expected."""
    with pytest.raises(ScheduleError, match=r"^schedule: ") as raised:
        parse_cron(expr, key="acme/bad")
    assert fragment in raised.value.message
