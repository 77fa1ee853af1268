"""One round's workload: per-second cron jobs on every shard (steady load) and a burst of
one-off jobs due at the same instant, registered through the registry's Kafka intake."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tickwheel.domain import PRIORITIES, run_key
from tickwheel.sharding import shard_of

HANDLER = "chaos.record"
STEADY_PER_SHARD = 2  # per-second cron jobs per shard: every shard dispatches every second
BURST_SLEEP_MS = 100  # a burst run holds its slot this long, so kills land mid-handler
STEADY_SLEEP_MS = 20
# Occurrences in the gap of a fault run late rather than being skipped: the checker is stricter.
MISFIRE = {"policy": "run_all", "grace_ms": 120_000, "max_catchup": 1000}
JUDGED_MARGIN_MS = 2000  # steady occurrences this close to registration or deletion are not judged


@dataclass(frozen=True)
class Workload:
    tenant: str
    steady_ids: list[str]
    burst_ids: list[str]
    burst_ms: int

    def documents(self) -> list[dict[str, Any]]:
        steady = [
            {
                "id": job_id,
                "schedule": "* * * * * *",
                "handler": HANDLER,
                "payload": {"sleep_ms": STEADY_SLEEP_MS},
                "misfire": MISFIRE,
                "priority": PRIORITIES[n % len(PRIORITIES)],
            }
            for n, job_id in enumerate(self.steady_ids)
        ]
        burst = [
            {
                "id": job_id,
                "at": _iso(self.burst_ms),
                "handler": HANDLER,
                "payload": {"sleep_ms": BURST_SLEEP_MS},
                "misfire": MISFIRE,
                "priority": PRIORITIES[n % len(PRIORITIES)],
            }
            for n, job_id in enumerate(self.burst_ids)
        ]
        return burst + steady

    def expected(self, registered_ms: int, deleted_ms: int) -> frozenset[str]:
        """Run keys judged for loss: every burst run, and every second of the steady jobs
        between their registration (when the last job was in the database) and their
        deletion, less a margin on both sides. A job the registry never stored leaves its
        burst run lost: burst runs are judged whatever happened to their registration."""
        first = (registered_ms // 1000 + 1) * 1000 + JUDGED_MARGIN_MS
        last = deleted_ms - JUDGED_MARGIN_MS
        keys = {run_key(self.tenant, j, self.burst_ms) for j in self.burst_ids}
        for ms in range(first, last + 1, 1000):
            keys.update(run_key(self.tenant, j, ms) for j in self.steady_ids)
        return frozenset(keys)


def make_workload(tenant: str, shards: int, burst: int, burst_ms: int) -> Workload:
    found: dict[int, list[str]] = {s: [] for s in range(shards)}
    n = 0
    while any(len(ids) < STEADY_PER_SHARD for ids in found.values()):
        job_id = f"s{n}"
        ids = found[shard_of(tenant, job_id, shards)]
        if len(ids) < STEADY_PER_SHARD:
            ids.append(job_id)
        n += 1
    steady = [j for ids in found.values() for j in ids]
    return Workload(tenant, steady, [f"b{n}" for n in range(burst)], burst_ms)


def _iso(ms: int) -> str:
    from tickwheel.clock import format_ms

    return format_ms(ms)
