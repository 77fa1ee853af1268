"""Protecting downstream hosts: a token bucket per host and a circuit breaker per host.

Both are pure: they take `now` (monotonic seconds) from the caller and own no clock or task.

Token bucket: `rate_per_s` tokens per second up to `burst`. `reserve(now)` takes a token and
says how long to wait before using it (0: at once). Reserving ahead, rather than refusing,
queues concurrent callers fairly: the n-th caller of a burst waits (n - burst) / rate.

Circuit breaker, per host:

    closed ──K consecutive failures──► open ──cool-down elapsed──► half-open
      ▲                                 ▲                              │
      └──────────── a success ──────────┼──── the trial call fails ────┘
                                        (one trial call at a time while half-open)

While open, calls fail fast (the caller records them as retryable failures: the DB retries
them later with backoff) instead of piling onto a host that is down.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class TokenBucket:
    def __init__(self, rate_per_s: float, burst: int) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate_per_s > 0 and burst >= 1")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._tokens = float(burst)
        self._at: float | None = None  # monotonic seconds of the last refill

    def reserve(self, now: float) -> float:
        """Take one token; return the seconds to wait before it may be used."""
        if self._at is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.rate_per_s


class BreakerState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass
class CircuitBreaker:
    failures_to_open: int  # K consecutive failures
    cooldown_s: float
    state: BreakerState = BreakerState.CLOSED
    failures: int = 0
    opened_at: float = 0.0
    _trial_out: bool = field(default=False, repr=False)

    def allow(self, now: float) -> bool:
        """May a call go out now? (While half-open, one trial call at a time.)"""
        if self.state is BreakerState.OPEN:
            if now - self.opened_at < self.cooldown_s:
                return False
            self.state = BreakerState.HALF_OPEN
            self._trial_out = False
        if self.state is BreakerState.HALF_OPEN:
            if self._trial_out:
                return False
            self._trial_out = True
        return True

    def succeeded(self) -> None:
        self.state = BreakerState.CLOSED
        self.failures = 0
        self._trial_out = False

    def failed(self, now: float) -> None:
        self.failures += 1
        if self.state is BreakerState.HALF_OPEN or self.failures >= self.failures_to_open:
            self.state = BreakerState.OPEN
            self.opened_at = now
            self._trial_out = False
