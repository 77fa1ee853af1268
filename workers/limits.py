"""Protecting downstream hosts: a token bucket per host and a circuit breaker per host.

Both are pure: they take `now` (monotonic seconds) from the caller and own no clock or task.

Token bucket: `rate_per_s` tokens per second up to `burst`. `take(now)` takes a token if one
is there (returns 0) or says how long until the next one (takes nothing); the caller sleeps
and asks again, and sends right after a successful take. Tokens are taken at the moment of
sending, never reserved ahead: a caller that reserved a future slot and then got out late
(a busy loop, a slow connect) would send together with callers on time, and the host would
see more than rate + burst in a second. Taken at send time, a late start only wastes tokens.

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

TOKEN_EPSILON = 1e-6  # tokens


class TokenBucket:
    def __init__(self, rate_per_s: float, burst: int) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate_per_s > 0 and burst >= 1")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._tokens = float(burst)
        self._at: float | None = None  # monotonic seconds of the last refill

    def take(self, now: float) -> float:
        """Take a token (return 0), or return the seconds until one is there (take nothing)."""
        if self._at is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now
        # Refills are floats: 0.01 s at 100/s may come to 0.9999999 tokens, and a wait of
        # 1e-9 s would not move a float clock; a hair below one token counts as one.
        if self._tokens >= 1.0 - TOKEN_EPSILON:
            self._tokens = max(0.0, self._tokens - 1.0)
            return 0.0
        return (1.0 - self._tokens) / self.rate_per_s


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
