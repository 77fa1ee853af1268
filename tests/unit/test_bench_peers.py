"""`tickwheel bench peers`' figures from the records the peers' handlers write
(bench/peers/harness.py), without I/O: first starts, duplicates, stray and torn records,
percentiles, and the comparison's lines."""

from __future__ import annotations

import pytest

from tickwheel.bench.peers.harness import (
    RECORD,
    Figures,
    comparison_table,
    figures_of,
    floor_figures,
    starts_of,
    tickwheel_figures,
)
from tickwheel.bench.peers.systems import PEERS

pytestmark = pytest.mark.unit

T0_MS = 1_700_000_000_000


def records(*starts: tuple[int, float]) -> bytes:
    """(job index, seconds after T0) as the handlers write them."""
    return b"".join(RECORD.pack(i, round((T0_MS + s * 1000) * 1000)) for i, s in starts)


def test_first_start_counts_and_a_second_start_is_a_duplicate() -> None:
    first, duplicates, strays = starts_of(records((0, 0.5), (1, 0.2), (0, 0.1)), jobs=2)
    assert first == {0: (T0_MS + 100) * 1000, 1: (T0_MS + 200) * 1000}
    assert (duplicates, strays) == (1, 0)


def test_an_index_past_the_jobs_is_a_stray_and_a_torn_record_is_ignored() -> None:
    data = records((0, 0.1), (7, 0.2)) + RECORD.pack(1, 0)[:5]
    first, duplicates, strays = starts_of(data, jobs=2)
    assert list(first) == [0] and duplicates == 0 and strays == 1


def test_figures_are_seconds_after_t0_by_nearest_rank() -> None:
    starts = [(i, (i + 1) / 100) for i in range(100)]  # 0.01 .. 1.00 s
    figures = figures_of(PEERS["river"], "v1", 101, records(*starts), T0_MS, 2.02, [])
    assert figures.last_start_s == 1.0
    assert figures.start_p50_s == 0.5 and figures.start_p99_s == 0.99
    assert figures.missing == 1 and figures.duplicates == 0
    assert figures.cpu_us_per_run == 20_000  # 2.02 CPU-s over 101 jobs
    assert figures.system == "River" and figures.version == "v1"


def test_a_run_with_no_start_has_no_times() -> None:
    figures = figures_of(PEERS["graphile"], "0", 3, b"", T0_MS, 0.0, ["stopped"])
    assert figures.last_start_s is None and figures.cpu_us_per_run is None
    assert figures.missing == 3 and figures.notes == ["stopped"]


def test_tickwheel_and_floor_lines_come_from_the_hot_seconds_figures() -> None:
    burst = {
        "jobs": 1000, "started_max_s": 4.0, "started_p50_s": 2.0, "started_p99_s": 3.9,
        "duplicates": 0, "lost": 2, "notes": ["late"], "published_max_s": 3.5,
        "completed_max_s": 6.0,
        "cpu_seconds_t0_to_done": {"scheduler": 0.05, "worker": 0.05, "rest_of_machine": 0.1},
    }  # fmt: skip
    ours = tickwheel_figures(burst, "0.1.0", "defaults")
    assert (ours.last_start_s, ours.missing, ours.cpu_us_per_run) == (4.0, 2, 200)
    floor = floor_figures(
        {"jobs": 1000, "completed_max_s": 2.0, "completed_p50_s": 1.0, "completed_p99_s": 1.9,
         "published_max_s": 1.5,
         "completed_count": 1000, "cpu_seconds_t0_to_done": {"whole_machine": 0.04}}
    )  # fmt: skip
    assert (floor.last_start_s, floor.missing, floor.cpu_us_per_run) == (2.0, 0, 40)
    table = comparison_table([floor, ours])
    assert "| tickwheel 0.1.0 | 4.00 | 2.00 | 3.90 | 0 | 2 | 200 |" in table
    assert "tickwheel's last start ÷ floor's 2.00" in table
    assert "NOTE (tickwheel): late" in table
    assert "tickwheel: published max 3.50 s, completed max 6.00 s" in table


def test_a_system_without_a_last_start_gets_no_ratio() -> None:
    ours = Figures("tickwheel", "", 10, 1.0, 0.5, 0.9, 0, 0, 50, "")
    lost = Figures("River", "v1", 10, None, None, None, 0, 10, None, "", ["stopped"])
    table = comparison_table([ours, lost])
    assert "| River v1 | — | — | — | 0 | 10 | — |" in table
    assert "÷" not in table
