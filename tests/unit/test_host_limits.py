"""A worker's HostLimiter over the target_hosts statements (answered by MemoryHosts): one
statement per batch of calls to a host, a breaker counted for all workers, one probe at a
time while half-open, an open breaker failed fast from the cache."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from tickwheel.workers.host_limits import CircuitOpen

pytestmark = pytest.mark.unit

HOST, PORT = "gw.example", 443
KEY = f"{HOST}:{PORT}"


async def test_a_batch_of_calls_to_a_host_costs_one_statement(
    make_limiter: Callable[..., Any],
) -> None:
    """50 calls waiting at once are granted by one target_take (the host's first call in the
    cluster adds its row first); a second batch costs one more"""
    limiter, hosts = make_limiter(rate_per_s=10_000, burst=100)
    keys = await asyncio.gather(*(limiter.slot(HOST, PORT) for _ in range(50)))
    assert set(keys) == {KEY}
    assert hosts.statements == ["take", "add", "take"]
    await asyncio.gather(*(limiter.slot(HOST, PORT) for _ in range(50)))
    assert hosts.statements == ["take", "add", "take", "take"]


async def test_calls_beyond_the_horizon_wait_and_are_asked_for_again(
    make_limiter: Callable[..., Any],
) -> None:
    """at 200/s with a burst of 1, a batch of 40 is granted in a few statements, not one per
    call, and every call gets its instant"""
    limiter, hosts = make_limiter(rate_per_s=200, burst=1)
    real = hosts.take

    async def take_on_the_loop_clock(*args: Any) -> Any:
        hosts.now_us = int(asyncio.get_running_loop().time() * 1_000_000)
        return await real(*args)

    hosts.take = take_on_the_loop_clock  # type: ignore[method-assign]
    await asyncio.gather(*(limiter.slot(HOST, PORT) for _ in range(40)))
    takes = hosts.statements.count("take")
    assert 2 <= takes <= 12, hosts.statements


async def test_failures_of_all_workers_open_the_breaker_for_every_worker(
    make_limiter: Callable[..., Any],
) -> None:
    """K = 2: one failure at each of two workers opens the shared breaker; both then fail
    their calls fast, the second and later ones without a round trip"""
    first, hosts = make_limiter(failures=2)
    second, _ = make_limiter(failures=2, hosts=hosts)
    for limiter in (first, second):
        key = await limiter.slot(HOST, PORT)
        await limiter.failed(key)
    for limiter in (first, second):
        with pytest.raises(CircuitOpen, match=r"circuit open for gw\.example:443"):
            await limiter.slot(HOST, PORT)
    before = len(hosts.statements)
    for limiter in (first, second):
        with pytest.raises(CircuitOpen):
            await limiter.slot(HOST, PORT)
    assert len(hosts.statements) == before
    assert first.metrics.target_breaker_opens.labels(KEY)._value.get() == 0
    assert second.metrics.target_breaker_opens.labels(KEY)._value.get() == 1


async def test_half_open_lets_one_probe_through_and_its_success_closes_it(
    make_limiter: Callable[..., Any],
) -> None:
    """after the cool-down one worker's call is the probe, the other's fails fast; the
    probe's success closes the breaker for the cluster"""
    first, hosts = make_limiter(failures=1, cooldown_s=0.05)
    second, _ = make_limiter(failures=1, cooldown_s=0.05, hosts=hosts)
    await first.failed(await first.slot(HOST, PORT))
    await asyncio.sleep(0.06)
    hosts.now_us += 60_000
    probe = await first.slot(HOST, PORT)
    with pytest.raises(CircuitOpen):
        await second.slot(HOST, PORT)
    await first.succeeded(probe)
    assert hosts.rows[KEY].failures == 0 and hosts.rows[KEY].open_until_us is None


async def test_a_success_costs_no_statement_while_no_failure_is_known(
    make_limiter: Callable[..., Any],
) -> None:
    """a healthy host's successes write nothing; after a failure, the next success closes"""
    limiter, hosts = make_limiter(failures=3)
    key = await limiter.slot(HOST, PORT)
    await limiter.succeeded(key)
    assert "succeeded" not in hosts.statements
    await limiter.failed(key)
    await limiter.succeeded(key)
    assert hosts.statements[-1] == "succeeded" and hosts.rows[KEY].failures == 0


async def test_a_jobs_own_limit_is_a_row_of_its_own_before_the_hosts(
    make_limiter: Callable[..., Any],
) -> None:
    """target.limit waits on a row `job:<tenant>/<job>` at the job's rate, and the call then
    on its host's row as every call does: the job can only lower what it sends"""
    limiter, hosts = make_limiter(rate_per_s=1000, burst=100)
    await asyncio.gather(*(limiter.share("acme/sms", 2, 3) for _ in range(3)))
    assert set(hosts.rows) == {"job:acme/sms"}
    assert hosts.statements == ["take", "add", "take"]  # three at once: the job's burst
    row = hosts.rows["job:acme/sms"]
    assert row.tat_us == hosts.now_us + 3 * 500_000  # 2/s: the TAT moved by 3 x 0.5 s


async def test_an_instant_woken_for_too_late_is_given_up_and_another_asked_for(
    make_limiter: Callable[..., Any],
) -> None:
    """a call whose event loop was stalled past its send instant does not send late (it would
    crowd other workers' calls): it asks again, and the give-up is counted"""
    limiter, hosts = make_limiter(rate_per_s=10, burst=1)
    await limiter.slot(HOST, PORT)  # the burst: at once

    async def stall() -> None:
        await asyncio.sleep(0.01)
        time.sleep(0.25)  # the event loop is busy past the next instant (+100 ms)

    await asyncio.gather(limiter.slot(HOST, PORT), stall())
    assert limiter.metrics.target_late.labels(KEY)._value.get() == 1
    assert hosts.statements.count("take") == 4  # first, the late one, and again
