"""Benchmarks of one component each, beside the whole-system harness of `tickwheel bench`:

    wheel.py         the timing wheel against a heap and a sorted list (pure, no services)
    schedule.py      next-fire computation and the schedule cache against croniter (pure)
    http.py          the registry's HTTP latency under a fixed request rate (open loop)
    intake.py        registrations per second through Kafka into Postgres, and a per-message
                     baseline;  intake_group.py  the same with several registry processes
    hot_second.py    several runs of `tickwheel bench hot-second`, with their table
    statements.py    the three statements a run pays for (the leader's claim, the worker's
                     claim, its result write) one at a time: Postgres CPU per run of each

Run one as `.venv/bin/python -m tickwheel.bench.components.<name> [options]` from the checkout;
those that need services use the dev stack (`tickwheel dev up`). They write their figures to
docs/results/ (RESULTS), which docs/BENCHMARKS.md cites. Nothing here is a test or asserted.
"""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"  # in a checkout
