"""The tenants' quotas as a batch decides them (registry_api/quotas.py): the GCRA's bound, the
job count, and what a batch writes back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwheel.domain import Quota
from tickwheel.registry_api.quotas import (
    JOBS_RETRY_AFTER_S,
    US_PER_S,
    Budget,
    TenantQuotas,
    effective_burst,
    emission_interval_us,
    gcra_take,
)

pytestmark = pytest.mark.unit

NOW_US = 1_800_000_000 * US_PER_S


def _quotas(**fields: object) -> TenantQuotas:
    values: dict[str, object] = {
        "tenant": "acme",
        "max_jobs": None,
        "jobs": 0,
        "rate_per_s": None,
        "burst": None,
        "tat_us": 0,
    }
    values.update(fields)
    return TenantQuotas(**values)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    rate=st.sampled_from([0.1, 1.0, 3.0, 50.0, 1000.0]),
    burst=st.integers(1, 20),
    gaps_us=st.lists(st.integers(0, 2 * US_PER_S), min_size=1, max_size=200),
    window_us=st.integers(1, 10 * US_PER_S),
)
def test_gcra_never_admits_more_than_burst_plus_rate_in_any_window(
    rate: float, burst: int, gaps_us: list[int], window_us: int
) -> None:
    """admitted registrations in any window of w seconds are at most burst + rate * w"""
    tat, now, admitted = 0, NOW_US, []
    for gap in gaps_us:
        now += gap
        tat, wait = gcra_take(tat, now, rate, burst)
        if not wait:
            admitted.append(now)
    interval = emission_interval_us(rate)
    for i, start in enumerate(admitted):
        inside = sum(1 for t in admitted[i:] if t < start + window_us)
        assert inside <= burst + window_us // interval + 1


def test_gcra_admits_a_burst_at_once_then_one_per_interval() -> None:
    """from idle, `burst` registrations pass at the same instant, the next waits one interval"""
    tat = 0
    for _ in range(3):
        tat, wait = gcra_take(tat, NOW_US, 2.0, 3)
        assert wait == 0
    unchanged, wait = gcra_take(tat, NOW_US, 2.0, 3)
    assert unchanged == tat and wait == US_PER_S // 2
    assert gcra_take(tat, NOW_US + wait, 2.0, 3)[1] == 0


def test_the_default_burst_is_one_seconds_worth_and_at_least_one() -> None:
    """no burst set: ceil(rate), at least 1; a burst set is kept"""
    assert effective_burst(0.1, None) == 1
    assert effective_burst(2.5, None) == 3
    assert effective_burst(100.0, 7) == 7


def test_the_job_quota_refuses_one_job_more_but_never_an_update_or_delete() -> None:
    """at max_jobs a creation is refused naming max_jobs; updates (0) and deletes (-1) pass,
    and a delete makes room for the next creation"""
    budget = Budget([_quotas(max_jobs=2, jobs=1)], NOW_US)
    assert budget.admit("acme", "a", 1) is None
    refused = budget.admit("acme", "b", 1)
    assert refused is not None
    assert refused.quota is Quota.MAX_JOBS
    assert refused.retry_after_s == JOBS_RETRY_AFTER_S
    assert "max_jobs" in refused.detail and "'b'" in refused.detail
    assert budget.admit("acme", "a", 0) is None
    assert budget.admit("acme", "a", -1) is None
    assert budget.admit("acme", "b", 1) is None
    assert budget.changes() == [("acme", 1, None)]


def test_a_refusal_costs_nothing_and_the_rate_counts_every_admitted_operation() -> None:
    """rate 1/s burst 2: two operations pass, the third is refused naming the rate with a
    Retry-After of a second; a job-quota refusal takes no rate"""
    budget = Budget([_quotas(max_jobs=0, rate_per_s=1.0, burst=2)], NOW_US)
    assert budget.admit("acme", "a", 1) is not None  # max_jobs 0: refused, rate untouched
    assert budget.admit("acme", "a", 0) is None
    assert budget.admit("acme", "a", -1) is None
    refused = budget.admit("acme", "a", 0)
    assert refused is not None and refused.quota is Quota.MAX_REGISTRATIONS_PER_S
    assert refused.retry_after_s == 1
    [(tenant, delta, tat)] = budget.changes()
    assert (tenant, delta) == ("acme", -1)
    assert tat == NOW_US + 2 * US_PER_S


def test_tenants_without_a_quota_are_only_counted() -> None:
    """a tenant the batch holds no quota row of is never refused; its counter still moves,
    and the changes come in tenant order (the order rows are locked in)"""
    budget = Budget([_quotas(tenant="m", rate_per_s=1000.0)], NOW_US)
    for i in range(50):
        assert budget.admit("z", f"j{i}", 1) is None
    assert budget.admit("b", "x", -1) is None
    assert budget.admit("m", "y", 0) is None
    changes = budget.changes()
    assert [c[0] for c in changes] == ["b", "m", "z"]
    assert changes[0] == ("b", -1, None) and changes[2] == ("z", 50, None)
    assert changes[1][1] == 0 and changes[1][2] is not None
