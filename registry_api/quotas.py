"""Per-tenant quotas on registrations: how many jobs a tenant may have, how fast it may register.

Pure: the store (store.py) locks the quota rows of a batch's tenants (`tenant_usage`, with the
quotas of `tenants`) inside the batch's transaction, hands them to a `Budget` with the
database's clock, asks it about each operation in the batch's order while it folds them, and
writes what the budget changed back in one statement before commit. Two registry processes
writing the same tenant wait for each other on its row, so a quota holds for the cluster.

- **Jobs (`max_jobs`).** The tenant's registered jobs (rows not deleted: active, paused, and
  completed one-offs until the retention removes them) are a counter, `tenant_usage.jobs`,
  moved by the same fold that writes the jobs: an operation that would make one job more than
  the quota is refused; one that makes none more (an update, a delete, a pause) never is.
- **Rate (`max_registrations_per_s`, `registrations_burst`).** A GCRA (the generic cell rate
  algorithm: one timestamp per tenant, the theoretical arrival time `tat`): each registration
  moves `tat` one emission interval (1 / rate) later, starting from now if `tat` lies in the
  past; it conforms while `tat` stays within `burst` intervals of now. Only a registration that
  conforms is charged; a redelivered Kafka message (a replay) costs nothing.

A refusal changes nothing of the tenant and says which quota, in one sentence, with the
seconds after which trying again can succeed (HTTP 429 `Retry-After`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from tickwheel.domain import Quota

JOBS_QUOTA = Quota.MAX_JOBS
RATE_QUOTA = Quota.MAX_REGISTRATIONS_PER_S
# seconds: a job count frees up only when jobs are deleted, so no instant is right. Above the
# 60 s that tickwheel.client waits at most, so a client reports the refusal at once instead of
# waiting for a count that time does not lower.
JOBS_RETRY_AFTER_S = 300
US_PER_S = 1_000_000


@dataclass(frozen=True)
class TenantQuotas:
    """One tenant's quotas and their state, as locked for one batch."""

    tenant: str
    max_jobs: int | None
    jobs: int
    rate_per_s: float | None
    burst: int | None  # None: one second's worth of the rate
    tat_us: int  # unix microseconds


@dataclass(frozen=True)
class QuotaRefusal:
    """Why an operation was refused: the quota's name, one sentence, when to retry."""

    quota: Quota
    detail: str
    retry_after_s: int


def effective_burst(rate_per_s: float, burst: int | None) -> int:
    """The burst a rate allows: as set, else one second's worth (at least one)."""
    return burst if burst is not None else max(1, math.ceil(rate_per_s))


def emission_interval_us(rate_per_s: float) -> int:
    """Microseconds between two registrations at the rate (at least one)."""
    return max(1, round(US_PER_S / rate_per_s))


def gcra_take(tat_us: int, now_us: int, rate_per_s: float, burst: int) -> tuple[int, int]:
    """Take one registration: (the new tat, 0) if it conforms, else (the tat unchanged, the
    microseconds until one would)."""
    interval = emission_interval_us(rate_per_s)
    later = max(tat_us, now_us) + interval
    allowed_until = now_us + burst * interval
    if later <= allowed_until:
        return later, 0
    return tat_us, later - allowed_until


@dataclass
class _Usage:
    quotas: TenantQuotas
    jobs: int
    tat_us: int


class Budget:
    """One batch's decisions: the quotas of its tenants that have any, and the change of
    every tenant's job count (the counter is kept for tenants without a quota too, so one set
    later starts from the truth)."""

    def __init__(self, rows: Iterable[TenantQuotas], now_us: int) -> None:
        self.now_us = now_us
        self._usage = {r.tenant: _Usage(r, r.jobs, r.tat_us) for r in rows}
        self._jobs_delta: dict[str, int] = {}

    def admit(self, tenant: str, job_id: str, jobs_delta: int) -> QuotaRefusal | None:
        """Decide one operation that changes the tenant's job count by `jobs_delta` (-1, 0,
        +1); None: admitted and charged; else why it is refused (nothing charged)."""
        usage = self._usage.get(tenant)
        if usage is not None:
            refusal = self._refusal(usage, job_id, jobs_delta)
            if refusal is not None:
                return refusal
        if jobs_delta:
            self._jobs_delta[tenant] = self._jobs_delta.get(tenant, 0) + jobs_delta
            if usage is not None:
                usage.jobs += jobs_delta
        return None

    def _refusal(self, usage: _Usage, job_id: str, jobs_delta: int) -> QuotaRefusal | None:
        q = usage.quotas
        if jobs_delta > 0 and q.max_jobs is not None and usage.jobs + jobs_delta > q.max_jobs:
            return QuotaRefusal(
                JOBS_QUOTA,
                f"quota {JOBS_QUOTA} exceeded: tenant {q.tenant!r} has {usage.jobs} jobs, its "
                f"quota is {q.max_jobs}, and job {job_id!r} would be one more; delete jobs "
                "or ask an operator for a higher quota (tickwheel tenant quota)",
                JOBS_RETRY_AFTER_S,
            )
        if q.rate_per_s is None:
            return None
        burst = effective_burst(q.rate_per_s, q.burst)
        tat, wait_us = gcra_take(usage.tat_us, self.now_us, q.rate_per_s, burst)
        if wait_us:
            retry_s = max(1, math.ceil(wait_us / US_PER_S))
            return QuotaRefusal(
                RATE_QUOTA,
                f"quota {RATE_QUOTA} exceeded: tenant {q.tenant!r} may register "
                f"{q.rate_per_s:g} times per second (a burst of {burst}); retry in {retry_s} s",
                retry_s,
            )
        usage.tat_us = tat
        return None

    def changes(self) -> list[tuple[str, int, int | None]]:
        """(tenant, job count change, new tat or None) of each tenant whose row changes, in
        tenant order (the order the rows are locked in)."""
        out = []
        for tenant in sorted(self._jobs_delta.keys() | self._usage.keys()):
            usage = self._usage.get(tenant)
            tat = None if usage is None or usage.tat_us == usage.quotas.tat_us else usage.tat_us
            delta = self._jobs_delta.get(tenant, 0)
            if delta or tat is not None:
                out.append((tenant, delta, tat))
        return out
