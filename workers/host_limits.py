"""Per-target-host limits that hold for the whole cluster: a rate (GCRA) and a circuit breaker,
their state in Postgres (`target_hosts`, one row per host), taken by every worker.

A host is named by its limit's key: the `TICKWHEEL_TARGET_LIMITS` entry that names it
(`host:port`, else `host`: then every port of the host shares it), else `host:port` under the
default (`TICKWHEEL_TARGET_RATE_PER_S`, `TICKWHEEL_TARGET_BURST`).

The rate. A call waits for a send instant: the calls to one host that wait in this worker at
one moment are asked for together, in ONE `target_take` (an UPDATE … RETURNING of the host's
row, workers/gcra.py has the arithmetic), which grants each an instant within HORIZON_S; the
call sleeps until it, then sends (or, woken more than LATE_S after it, asks again: a late
send would crowd the calls other workers send on time). Calls that got none wait, without a
round trip, until their instants come within the horizon, and are asked for again with
whatever has come since. A run
without a target never gets here; a run with one costs its batch's statement, shared by every
call of the batch to that host.

The breaker, for every worker at once (the row's `failures`, `open_until`, `probe_*`):

    closed ──K consecutive failures, counted by all workers──► open
      ▲                                                          │ cool-down (open_until) over
      │                                                          ▼
      └────── the probe succeeds ──── half-open: one worker claims the probe (fenced UPDATE;
                                      its lease lapses if it dies); the probe fails ──► open

A failure (5xx, 429, timeout, unreachable, cancelled) is written at once (`target_failed`, one
round trip per failed call), so the count is the cluster's; a success is written only when this
worker knows of failures (its last statement for the host returned some), so a healthy host
costs nothing. What a statement returns about the breaker is cached here: until `open_until`
(or the probe's lease, while another worker probes) this worker fails the host's calls fast,
without a round trip, as retryable — the run follows the retry path with the error
"circuit open for HOST (…)". Since the workers learn of an open breaker at their next
statement, calls granted before it opened may still go out: at most a horizon's worth of the
rate, plus the burst.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from tickwheel.db import DB_ERRORS
from tickwheel.workers.gcra import US_PER_S, Rate, next_try_us, send_delays_us
from tickwheel.workers.metrics import WorkerMetrics
from tickwheel.workers.targets import RetryableTargetError

log = logging.getLogger("tickwheel.worker")

# How far ahead a statement grants send instants, seconds. While calls queue for a saturated
# host each worker asks about once per horizon (4 workers at 50/s: 0.38 statements per call,
# docs/OPERATIONS.md); longer means fewer statements but more calls already granted when
# another worker opens the breaker (they go out: at most rate x horizon + burst).
HORIZON_S = 0.2
PROBE_LEASE_S = 30.0  # how long a half-open probe is this worker's before another may probe
# While another worker probes, this one fails the host's calls fast for this long, then asks
# again (the probe may have closed the breaker by then), seconds.
PROBE_RECHECK_S = 1.0
MIN_RETRY_S = 0.001  # the shortest wait before asking again
# A call whose worker wakes up more than this after its send instant (a busy event loop) gives
# the instant up and asks for another, seconds: sent late, it would land together with calls
# other workers send on time, and the host would see up to rate x lateness more in a second.
LATE_S = 0.025


class HostLimit(NamedTuple):
    rate_per_s: float
    burst: int


class CircuitOpen(RetryableTargetError):
    """The host's shared breaker is open (or another worker probes it): failed fast."""


class Take(NamedTuple):
    """What `target_take` returns (the columns in this order)."""

    granted: int
    start_us: int
    now_us: int
    state: str  # closed | open | half_open, before this statement
    tat_us: int
    failures: int
    open_until_us: int | None
    probe_until_us: int | None


class Failed(NamedTuple):
    """What `target_failed` returns."""

    opened: bool
    now_us: int
    failures: int
    open_until_us: int | None


class HostStore(Protocol):
    """The statements of `tickwheel/sql/limits.sql` (workers/store.py: `LimitStore`)."""

    async def take(
        self, key: str, wanted: int, rate: Rate, horizon_us: int, failures_to_open: int
    ) -> Take | None: ...

    async def add(self, key: str) -> None: ...

    async def failed(
        self, key: str, count: int, failures_to_open: int, cooldown_ms: int
    ) -> Failed: ...

    async def succeeded(self, key: str) -> None: ...


@dataclass(frozen=True)
class LimitPolicy:
    default: HostLimit
    per_host: Mapping[str, HostLimit]  # "host:port" or "host", lower case
    breaker_failures: int  # K
    breaker_cooldown_s: float

    def limit_of(self, host: str, port: int) -> tuple[str, HostLimit]:
        """The host's key and limit (module docstring)."""
        host = host.lower()
        key = f"{host}:{port}"
        found = self.per_host.get(key)
        if found is not None:
            return key, found
        found = self.per_host.get(host)
        if found is not None:
            return host, found
        return key, self.default


@dataclass
class _Host:
    """What this worker knows of one host: its rate, the calls waiting, the breaker seen."""

    key: str
    rate: Rate
    waiting: deque[asyncio.Future[float]] = field(default_factory=deque)
    asking: asyncio.Task[None] | None = None
    blocked_until: float = 0.0  # monotonic seconds: fail fast before it
    failures: int = 0  # the cluster's consecutive failures, as last seen
    probing: bool = False  # this worker holds the half-open probe
    metered: bool = True  # a host (labelled in the metrics), not a job's own share


class HostLimiter:
    """The cluster-wide rate and breaker of each target host, for one worker process."""

    def __init__(self, store: HostStore, policy: LimitPolicy, metrics: WorkerMetrics) -> None:
        self.store = store
        self.policy = policy
        self.metrics = metrics
        self._hosts: dict[str, _Host] = {}
        self._horizon_us = int(HORIZON_S * US_PER_S)
        self._cooldown_ms = int(policy.breaker_cooldown_s * 1000)

    def key_of(self, host: str, port: int) -> str:
        return self._host(host, port).key

    async def slot(self, host: str, port: int) -> str:
        """Wait for this call's send instant; return the host's key. Raises CircuitOpen while
        the breaker is open, RetryableTargetError when the state cannot be read."""
        state = self._host(host, port)
        await self._wait(state)
        return state.key

    async def share(self, job: str, rate_per_s: float, burst: int) -> None:
        """Wait for an instant of the job's own rate (`target.limit`; `job` is
        `tenant/job_id`), for all workers together: a row `job:<tenant>/<job_id>` of its own,
        without a breaker. The call then waits for its host's `slot` as every call does, so
        a job's limit only ever lowers what it sends."""
        key = f"job:{job}"
        rate = Rate.of(rate_per_s, burst)
        state = self._hosts.get(key)
        if state is None or state.rate != rate:  # new, or the job's limit was changed
            state = self._hosts[key] = _Host(key, rate, metered=False)
        await self._wait(state)

    async def _wait(self, state: _Host) -> None:
        """Wait for a send instant (the event loop's clock); one this worker woke up for too
        late (module docstring) is given up and another asked for."""
        loop = asyncio.get_running_loop()
        while True:
            self._check_open(state)
            future: asyncio.Future[float] = loop.create_future()
            state.waiting.append(future)
            if state.asking is None:
                state.asking = asyncio.create_task(self._ask(state), name=f"limits {state.key}")
            instant = await future
            delay_s = instant - loop.time()
            if delay_s > 0:
                if state.metered:
                    self.metrics.target_waits.labels(state.key).inc()
                    self.metrics.target_wait_seconds.labels(state.key).inc(delay_s)
                await asyncio.sleep(delay_s)
                if not state.probing:  # the probe is the one call a half-open host gets
                    self._check_open(state)  # opened meanwhile, as this worker learnt
            if state.probing or loop.time() - instant <= LATE_S:
                return
            if state.metered:
                self.metrics.target_late.labels(state.key).inc()

    async def failed(self, key: str) -> None:
        """A call to the host failed: counted for the cluster, maybe opening the breaker."""
        state = self._hosts[key]
        policy = self.policy
        try:
            row = await self.store.failed(key, 1, policy.breaker_failures, self._cooldown_ms)
        except DB_ERRORS:  # the call's own error stands; the count misses one failure
            log.warning("counting a failure of %s failed", key, exc_info=True)
            return
        state.probing = False
        state.failures = row.failures
        self._blocked(state, row.now_us, row.open_until_us)
        if row.opened:
            self.metrics.target_breaker_opens.labels(key).inc()
            log.warning(
                "circuit of %s opened after %d consecutive failures (all workers)",
                key,
                row.failures,
            )

    async def succeeded(self, key: str) -> None:
        """A call to the host succeeded: closes the breaker if this worker knew of failures."""
        state = self._hosts[key]
        if state.failures == 0 and not state.probing:
            return
        try:
            await self.store.succeeded(key)
        except DB_ERRORS:  # the next success (or the probe after the cool-down) closes it
            log.warning("closing the circuit of %s failed", key, exc_info=True)
            return
        state.failures = 0
        state.probing = False
        state.blocked_until = 0.0
        self.metrics.target_breaker_state.labels(key).set(0)

    # --- inside ----------------------------------------------------------------------------

    def _host(self, host: str, port: int) -> _Host:
        key, limit = self.policy.limit_of(host, port)
        state = self._hosts.get(key)
        if state is None:
            rate = Rate.of(limit.rate_per_s, limit.burst)
            state = self._hosts[key] = _Host(key, rate)
        return state

    def _check_open(self, state: _Host) -> None:
        if state.blocked_until > time.monotonic():
            raise self._refusal(state)

    def _blocked(self, state: _Host, now_us: int, until_us: int | None) -> None:
        """Cache the breaker's open state until `until_us` (database clock)."""
        if until_us is not None and until_us > now_us:
            state.blocked_until = time.monotonic() + (until_us - now_us) / US_PER_S
            self.metrics.target_breaker_state.labels(state.key).set(2)
        else:
            state.blocked_until = 0.0
            half_open = state.failures >= self.policy.breaker_failures
            self.metrics.target_breaker_state.labels(state.key).set(1 if half_open else 0)

    async def _ask(self, state: _Host) -> None:
        """Ask for instants for the calls waiting, until none waits (module docstring)."""
        batch: list[asyncio.Future[float]] = []
        try:
            while True:
                batch = [f for f in state.waiting if not f.done()]
                state.waiting.clear()
                if not batch:
                    return
                asked_at = asyncio.get_running_loop().time()  # no later than the database's now
                take = await self._take(state, len(batch))
                state.failures = take.failures
                delays = send_delays_us(take.start_us, take.now_us, take.granted, state.rate)
                for future, delay_us in zip(batch, delays, strict=False):
                    if not future.done():
                        future.set_result(asked_at + delay_us / US_PER_S)
                rest = batch[take.granted :]
                if take.state == "half_open" and take.granted:
                    state.probing = True
                if take.state != "closed":
                    # Open, or half-open with the probe taken (by us or another worker): the
                    # others fail fast until the breaker opens again or the probe's lease ends.
                    until = take.open_until_us
                    if take.state == "half_open" and take.probe_until_us is not None:
                        recheck_us = take.now_us + int(PROBE_RECHECK_S * US_PER_S)
                        until = min(take.probe_until_us, recheck_us)
                    self._blocked(state, take.now_us, until)
                    if take.granted == 0 and state.blocked_until == 0.0:
                        state.blocked_until = time.monotonic() + MIN_RETRY_S
                    error = self._refusal(state)
                    for future in rest:
                        if not future.done():
                            future.set_exception(error)
                    continue
                self._blocked(state, take.now_us, None)
                if rest:
                    wait_us = next_try_us(
                        take.tat_us, take.now_us, state.rate, self._horizon_us, len(rest)
                    )
                    await asyncio.sleep(max(MIN_RETRY_S, wait_us / US_PER_S))
                    state.waiting.extendleft(reversed(rest))
        except DB_ERRORS as exc:
            self._fail_waiting(
                state,
                batch,
                RetryableTargetError(f"the limits of {state.key} cannot be read: {exc}"),
            )
        except Exception as exc:  # a bug: this host's calls fail, the worker goes on
            log.exception("asking for send instants of %s failed", state.key)
            self._fail_waiting(state, batch, RetryableTargetError(f"limits of {state.key}: {exc}"))
        finally:
            state.asking = None

    def _refusal(self, state: _Host) -> CircuitOpen:
        self.metrics.target_refused.labels(state.key).inc()
        return CircuitOpen(
            f"circuit open for {state.key} after {state.failures} consecutive failures "
            "counted by all workers (shared breaker); retried later"
        )

    def _fail_waiting(self, state: _Host, batch: list[asyncio.Future[float]], error: Any) -> None:
        for future in [*batch, *state.waiting]:
            if not future.done():
                future.set_exception(error)
        state.waiting.clear()

    async def _take(self, state: _Host, wanted: int) -> Take:
        policy = self.policy
        for _ in range(2):
            if state.metered:
                self.metrics.target_takes.labels(state.key).inc()
            take = await self.store.take(
                state.key, wanted, state.rate, self._horizon_us, policy.breaker_failures
            )
            if take is not None:
                return take
            await self.store.add(state.key)  # the host's first call in the cluster
        raise RuntimeError(f"the row of target host {state.key} vanished")
