"""One round's workload: per-second cron jobs on every shard (steady load), one of them paused
mid-round, a burst of one-off jobs due at the same instant, and in a `dst_failover` round three
fixed-hour jobs in a zone that falls back during the round (zones.py), one per `dst.overlap`
policy; all registered through the registry's Kafka intake.

Two sets of run keys come out of it: the occurrences judged for loss (`expected`: every burst
run, and the steady and DST occurrences well inside the round) and every occurrence that may
exist at all (`allowed`: anything else is an unexpected run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tickwheel.bench.chaos.zones import Fold, allowed_fires
from tickwheel.domain import PRIORITIES, run_key
from tickwheel.sharding import shard_of

HANDLER = "chaos.record"
STEADY_PER_SHARD = 2  # per-second cron jobs per shard: every shard dispatches every second
BURST_SLEEP_MS = 100  # a burst run holds its slot this long, so kills land mid-handler
STEADY_SLEEP_MS = 20
# Occurrences in the gap of a fault run late rather than being skipped: the checker is stricter.
MISFIRE = {"policy": "run_all", "grace_ms": 120_000, "max_catchup": 1000}
JUDGED_MARGIN_MS = 2000  # steady occurrences this close to registration or deletion are not judged
DST_POLICIES = ("first", "last", "both")
FOLD_S = 12  # the DST round's fall-back: these many wall seconds happen twice
MS = 1000


@dataclass(frozen=True)
class DstJobs:
    """A `dst_failover` round's jobs: `* minute hour * * *` in `zone`, which falls back by
    `fold`, one job per overlap policy, all on `shard`."""

    zone: str
    fold: Fold
    hour: int
    minute: int
    ids: dict[str, str]  # policy → job id
    shard: int

    def fires(self, policy: str, start_ms: int, end_ms: int) -> list[int]:
        first = (start_ms // MS + 1) * MS
        return allowed_fires(
            self.fold, self.hour, self.minute, policy, range(first, end_ms + 1, MS)
        )


def fold_at(earliest_ms: int, fold_s: int = FOLD_S) -> int:
    """The first whole second from `earliest_ms` at which a fold of `fold_s` seconds stays
    inside one wall minute (so one fixed minute and hour name every repeated wall time)."""
    at = -(-earliest_ms // MS) * MS
    while (at // MS) % 60 > 60 - fold_s:
        at += MS
    return at


def dst_jobs(tenant: str, zone: str, at_ms: int, shards: int, fold_s: int = FOLD_S) -> DstJobs:
    """Three job ids on one shard (shard 0's), one per policy, around a fold at `at_ms`."""
    ids: dict[str, str] = {}
    n = 0
    while len(ids) < len(DST_POLICIES):
        job_id = f"dst{n}"
        if shard_of(tenant, job_id, shards) == 0:
            ids[DST_POLICIES[len(ids)]] = job_id
        n += 1
    wall_s = at_ms // MS  # the offset after the fold is 0: wall time is UTC from at_ms on
    return DstJobs(zone, Fold(at_ms, fold_s), (wall_s // 3600) % 24, (wall_s // 60) % 60, ids, 0)


@dataclass(frozen=True)
class Workload:
    tenant: str
    steady_ids: list[str]
    burst_ids: list[str]
    burst_ms: int
    dst: DstJobs | None = None
    burst_sleep_ms: int = BURST_SLEEP_MS

    @property
    def paused_id(self) -> str:
        """The steady job paused mid-round: it may have no run after its pause."""
        return self.steady_ids[0]

    @property
    def cron_ids(self) -> list[str]:
        """Every cron job of the round (deleted when it ends)."""
        return [*self.steady_ids, *(self.dst.ids.values() if self.dst else ())]

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
                "payload": {"sleep_ms": self.burst_sleep_ms},
                "misfire": MISFIRE,
                "priority": PRIORITIES[n % len(PRIORITIES)],
            }
            for n, job_id in enumerate(self.burst_ids)
        ]
        dst = []
        if self.dst is not None:
            d = self.dst
            dst = [
                {
                    "id": job_id,
                    "schedule": f"* {d.minute} {d.hour} * * *",
                    "timezone": d.zone,
                    "dst": {"overlap": policy},
                    "handler": HANDLER,
                    "payload": {"sleep_ms": STEADY_SLEEP_MS},
                    "misfire": MISFIRE,
                }
                for policy, job_id in d.ids.items()
            ]
        return burst + steady + dst

    def expected(self, registered_ms: int, deleted_ms: int, paused_ms: int) -> frozenset[str]:
        """Run keys judged for loss: every burst run, and every second of the steady jobs
        between their registration (when the last job was in the database) and their
        deletion (the paused one: its pause), less a margin on both sides; the DST jobs'
        fires over the same span. A job the registry never stored leaves its burst run lost:
        burst runs are judged whatever happened to their registration."""
        first = (registered_ms // MS + 1) * MS + JUDGED_MARGIN_MS
        last = deleted_ms - JUDGED_MARGIN_MS
        keys = {run_key(self.tenant, j, self.burst_ms) for j in self.burst_ids}
        for ms in range(first, last + 1, MS):
            keys.update(run_key(self.tenant, j, ms) for j in self.steady_ids[1:])
        for ms in range(first, paused_ms - JUDGED_MARGIN_MS + 1, MS):
            keys.add(run_key(self.tenant, self.paused_id, ms))
        if self.dst is not None:
            for policy, job_id in self.dst.ids.items():
                fires = self.dst.fires(policy, first - MS, last)
                keys.update(run_key(self.tenant, job_id, ms) for ms in fires)
        return frozenset(keys)

    def allowed(self, start_ms: int, deleted_ms: int, paused_ms: int) -> frozenset[str]:
        """Every run key that may exist: the burst's, each whole second of a steady job after
        the round began and up to its deletion (the paused one: its pause), and the DST jobs'
        fires under their policies over the same span. Another row is a run of a deleted or
        paused job, or of an occurrence its DST policy excludes."""
        keys = {run_key(self.tenant, j, self.burst_ms) for j in self.burst_ids}
        first = (start_ms // MS + 1) * MS
        for ms in range(first, deleted_ms + 1, MS):
            keys.update(run_key(self.tenant, j, ms) for j in self.steady_ids[1:])
        for ms in range(first, paused_ms + 1, MS):
            keys.add(run_key(self.tenant, self.paused_id, ms))
        if self.dst is not None:
            for policy, job_id in self.dst.ids.items():
                fires = self.dst.fires(policy, start_ms, deleted_ms)
                keys.update(run_key(self.tenant, job_id, ms) for ms in fires)
        return frozenset(keys)


def make_workload(
    tenant: str,
    shards: int,
    burst: int,
    burst_ms: int,
    dst: DstJobs | None = None,
    burst_sleep_ms: int = BURST_SLEEP_MS,
) -> Workload:
    found: dict[int, list[str]] = {s: [] for s in range(shards)}
    n = 0
    while any(len(ids) < STEADY_PER_SHARD for ids in found.values()):
        job_id = f"s{n}"
        ids = found[shard_of(tenant, job_id, shards)]
        if len(ids) < STEADY_PER_SHARD:
            ids.append(job_id)
        n += 1
    steady = [j for ids in found.values() for j in ids]
    return Workload(tenant, steady, [f"b{n}" for n in range(burst)], burst_ms, dst, burst_sleep_ms)


def _iso(ms: int) -> str:
    from tickwheel.clock import format_ms

    return format_ms(ms)
