"""What a finished attempt becomes: pure decisions, no I/O, no clock.

    outcome of the attempt          attempt < max_attempts   attempt >= max_attempts
    success                         succeeded                succeeded
    retryable failure               retrying (retry_at)      dead (exhausted)
    PermanentError / unknown name   dead                     dead

The retry delay is "full jitter" (AWS Architecture Blog, "Exponential Backoff and Jitter"):
uniform in [0, min(cap, base * 2**attempt)] milliseconds. Full jitter spreads a burst of
failures (a hot second against a downstream that fell over) evenly over the window instead of
sending them back together.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from tickwheel.domain import RunStatus

# 2**62 already exceeds any cap a bigint column holds; larger exponents only cost big ints.
MAX_EXPONENT = 62


def backoff_ceiling_ms(attempt: int, base_ms: int, cap_ms: int) -> int:
    """min(cap, base * 2**attempt), milliseconds: the upper bound of the jittered delay."""
    if attempt < 0 or base_ms < 0 or cap_ms < 0:
        raise ValueError("attempt, base_ms and cap_ms must not be negative")
    return min(cap_ms, base_ms * (1 << min(attempt, MAX_EXPONENT)))


def full_jitter_ms(
    attempt: int, base_ms: int, cap_ms: int, draw: Callable[[int, int], int] = random.randint
) -> int:
    """A delay uniform in [0, min(cap, base * 2**attempt)], milliseconds (both ends included)."""
    return draw(0, backoff_ceiling_ms(attempt, base_ms, cap_ms))


@dataclass(frozen=True)
class Decision:
    status: RunStatus  # SUCCEEDED, RETRYING or DEAD
    retry_in_ms: int | None = None  # RETRYING only: retry_at = now + this
    error: str | None = None


def decide(
    *,
    error: str | None,
    permanent: bool,
    attempt: int,
    max_attempts: int,
    base_ms: int,
    cap_ms: int,
    draw: Callable[[int, int], int] = random.randint,
) -> Decision:
    """The status an attempt's outcome leads to (see the table above)."""
    if error is None:
        return Decision(RunStatus.SUCCEEDED)
    if permanent:
        return Decision(RunStatus.DEAD, error=error)
    if attempt >= max_attempts:
        return Decision(RunStatus.DEAD, error=f"{error} (attempt {attempt} of {max_attempts})")
    return Decision(
        RunStatus.RETRYING, retry_in_ms=full_jitter_ms(attempt, base_ms, cap_ms, draw), error=error
    )
