"""Unit-test doubles of pure parts' collaborators.

`MemoryHosts` keeps `target_hosts` rows in a dict and answers the statements of
tickwheel/sql/limits.sql (`target_take`, `target_failed`, `target_succeeded`) as they are
written there, on a clock the test moves, so a `HostLimiter` and `HttpTargets` can be checked
without Postgres (the statements themselves are checked on the real database by
tests/integration/test_cluster_limits.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tickwheel.workers.gcra import Rate, advanced, granted
from tickwheel.workers.host_limits import (
    Failed,
    HostLimit,
    HostLimiter,
    LimitPolicy,
    Take,
)
from tickwheel.workers.metrics import WorkerMetrics


@dataclass
class _Row:
    tat_us: int = 0
    failures: int = 0
    open_until_us: int | None = None
    probe_until_us: int | None = None


class MemoryHosts:
    def __init__(self) -> None:
        self.rows: dict[str, _Row] = {}
        self.now_us = 1_000_000_000
        self.statements: list[str] = []
        self.probe_lease_us = 30_000_000

    async def add(self, key: str) -> None:
        self.statements.append("add")
        self.rows.setdefault(key, _Row())

    async def take(
        self, key: str, wanted: int, rate: Rate, horizon_us: int, failures_to_open: int
    ) -> Take | None:
        self.statements.append("take")
        row = self.rows.get(key)
        if row is None:
            return None
        now = self.now_us
        if row.open_until_us is not None and row.open_until_us > now:
            state = "open"
        elif row.failures >= failures_to_open:
            state = "half_open"
        else:
            state = "closed"
        start = max(row.tat_us, now)
        if state == "open" or (
            state == "half_open" and row.probe_until_us is not None and row.probe_until_us > now
        ):
            count = 0
        else:
            asked = 1 if state == "half_open" else wanted
            count = granted(row.tat_us, now, asked, rate, horizon_us)
        if count:
            row.tat_us = advanced(row.tat_us, now, count, rate)
            if state == "half_open":
                row.probe_until_us = now + self.probe_lease_us
        return Take(
            count, start, now, state, row.tat_us, row.failures, row.open_until_us,
            row.probe_until_us,
        )  # fmt: skip

    async def failed(self, key: str, count: int, failures_to_open: int, cooldown_ms: int) -> Failed:
        self.statements.append("failed")
        row = self.rows[key]
        now = self.now_us
        opening = row.failures + count >= failures_to_open and (
            row.open_until_us is None or row.open_until_us <= now
        )
        row.failures += count
        if opening:
            row.open_until_us = now + cooldown_ms * 1000
            row.probe_until_us = None
        return Failed(opening, now, row.failures, row.open_until_us)

    async def succeeded(self, key: str) -> None:
        self.statements.append("succeeded")
        row = self.rows[key]
        row.failures, row.open_until_us, row.probe_until_us = 0, None, None


LimiterFactory = Callable[..., tuple[HostLimiter, MemoryHosts]]


@pytest.fixture
def make_limiter() -> LimiterFactory:
    """A HostLimiter over MemoryHosts: `make_limiter(failures=2, cooldown_s=60, rate_per_s=1000,
    burst=100, hosts=None)` → (limiter, hosts); pass `hosts` to share rows between limiters
    (two workers)."""

    def make(
        failures: int = 2,
        cooldown_s: float = 60,
        rate_per_s: float = 1000,
        burst: int = 100,
        hosts: MemoryHosts | None = None,
    ) -> tuple[HostLimiter, MemoryHosts]:
        store = hosts or MemoryHosts()
        policy = LimitPolicy(HostLimit(rate_per_s, burst), {}, failures, cooldown_s)
        return HostLimiter(store, policy, WorkerMetrics()), store

    return make
