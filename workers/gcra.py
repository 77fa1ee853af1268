"""The arithmetic of a target host's cluster-wide rate: GCRA (the generic cell rate algorithm).

Pure: plain integers in, plain integers out; the state is one number per host, its theoretical
arrival time (`tat_us`, microseconds on the database's clock), kept in `target_hosts` and
advanced by the statement `target_take` (tickwheel/sql/limits.sql), which computes `granted`
exactly as written here. A host allows `rate_per_s` requests a second and `burst` at once:

    T (interval_us)  = 1 s / rate_per_s     the spacing of sends once the burst is spent
    τ (tolerance_us) = (burst - 1) · T      how far ahead of its TAT a send may go

A batch of `wanted` sends asked for at `now` starts at `start = max(tat, now)`; its i-th send
(from 0) may go at `start + i·T - τ` (never before now). The statement grants the sends whose
instant lies within `horizon_us` of now, advances the TAT by `T` per send granted, and the
worker sleeps until each granted instant: ONE statement per batch of runs to a host, whatever
the number of workers, and a run that got no slot asks again at the instant the next one comes
within the horizon (`next_try_us`), never in a loop.

Why it holds across workers: every grant moves the one TAT by T per send, under the row's
lock, so the instants granted to all workers together are those a single sender would use.
Between any two instants granted `n` sends apart lie at least `(n - burst)·T`: any window of
one second holds at most `rate_per_s + burst` of them (the unit tests check it on random
sequences of batches). A worker sends at its instant or later (a busy event loop); it cannot
send earlier, so lateness only ever spreads the sends.
"""

from __future__ import annotations

from typing import NamedTuple

US_PER_S = 1_000_000


class Rate(NamedTuple):
    """A host's rate in the units the statement uses: microseconds between sends, and how far
    ahead of the TAT a send may go (the burst)."""

    interval_us: int
    tolerance_us: int

    @classmethod
    def of(cls, rate_per_s: float, burst: int) -> Rate:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("a rate needs rate_per_s > 0 and burst >= 1")
        interval_us = max(1, round(US_PER_S / rate_per_s))
        return cls(interval_us, (burst - 1) * interval_us)


def granted(tat_us: int, now_us: int, wanted: int, rate: Rate, horizon_us: int) -> int:
    """How many of `wanted` sends get an instant within `horizon_us` of `now_us`."""
    start = max(tat_us, now_us)
    room = now_us + horizon_us + rate.tolerance_us - start
    if wanted <= 0 or room < 0:
        return 0
    return min(wanted, room // rate.interval_us + 1)


def advanced(tat_us: int, now_us: int, count: int, rate: Rate) -> int:
    """The TAT after `count` sends were granted."""
    return max(tat_us, now_us) + count * rate.interval_us


def send_delays_us(start_us: int, now_us: int, count: int, rate: Rate) -> list[int]:
    """For `count` sends granted from `start_us` (the statement's `max(tat, now)`): how long
    after `now_us` each may go, microseconds."""
    base = start_us - rate.tolerance_us - now_us
    step = rate.interval_us
    return [max(0, base + i * step) for i in range(count)]


def next_try_us(tat_us: int, now_us: int, rate: Rate, horizon_us: int, waiting: int = 1) -> int:
    """How long after `now_us` the next `waiting` sends (at most a horizon's worth) come
    within the horizon (0: now). Waiting for several rather than the first keeps a worker
    from asking once per interval while its calls queue: it asks about once per horizon."""
    per_horizon = max(1, horizon_us // rate.interval_us)
    more = min(waiting, per_horizon) - 1
    first = max(tat_us, now_us) - rate.tolerance_us - now_us - horizon_us
    return max(0, first + more * rate.interval_us)
