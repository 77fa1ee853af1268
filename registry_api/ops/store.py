"""The status page's cross-tenant reads (`/v1/ops/…`, `/ui`).

Every read here is bounded — by the shard count, by a time window over indexed columns, by a
limit — so an open status page costs the database the same whatever the size of the run
ledger. The shards' leaders and how far behind they are are the reads `tickwheel status`
makes too (`ops_shard_leaders`, `ops_shards_behind`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from tickwheel.domain import run_key
from tickwheel.queries import QUERIES

BUCKET_MS = 10_000  # the throughput chart's resolution, milliseconds
# How much earlier than the window a counted run may be scheduled: runs finishing in the window
# after a retry of up to this long are counted; older ones are not read at all.
SCHEDULED_SLACK_MS = 5 * 60_000


@dataclass(frozen=True)
class ShardLeader:
    shard: int
    owner: str | None  # None: never led, or its last leader stepped down
    epoch: int  # 0: never led
    since_ms: int | None
    behind_ms: int | None  # how long its oldest due job has waited to be claimed; None: none


@dataclass(frozen=True)
class Bucket:
    start_ms: int
    created: int
    published: int
    finished: int
    dead: int
    lag_p50_ms: float | None  # None: no first publish in the bucket
    lag_p99_ms: float | None


@dataclass(frozen=True)
class DeadRun:
    run_key: str
    tenant: str
    job_id: str
    scheduled_ms: int
    attempt: int
    dead_ms: int
    last_error: str | None


def window(now_ms: int, buckets: int, bucket_ms: int = BUCKET_MS) -> tuple[int, int]:
    """[start, end) in ms of the `buckets` buckets ending with the one holding `now_ms`.

    Buckets are aligned to multiples of `bucket_ms` since the epoch, so a page refreshed a few
    seconds later sees the same buckets, the last one still filling.
    """
    end = (now_ms // bucket_ms + 1) * bucket_ms
    return end - buckets * bucket_ms, end


def fill(
    rows: Sequence[asyncpg.Record] | Sequence[Mapping[str, Any]],
    start_ms: int,
    buckets: int,
    bucket_ms: int,
) -> list[Bucket]:
    """One `Bucket` per bucket of the window, zero where the query returned no row."""
    found = {row["bucket"]: row for row in rows}
    out = []
    for i in range(buckets):
        row = found.get(i)
        if row is None:
            out.append(Bucket(start_ms + i * bucket_ms, 0, 0, 0, 0, None, None))
            continue
        out.append(
            Bucket(
                start_ms + i * bucket_ms,
                row["created"],
                row["published"],
                row["finished"],
                row["dead"],
                row["lag_p50_ms"],
                row["lag_p99_ms"],
            )
        )
    return out


class OpsStore:
    """The status page's reads across tenants."""

    def __init__(self, pool: asyncpg.Pool, shards: int) -> None:
        self.pool = pool
        self.shards = shards

    async def shard_leaders(self) -> list[ShardLeader]:
        """Every shard of the deployment, led or not, in shard order, with how far behind it is
        (the queries of `tickwheel status`)."""
        rows = {r["shard_id"]: r for r in await self.pool.fetch(QUERIES["ops_shard_leaders"])}
        behind = {
            r["shard_id"]: r["behind_ms"]
            for r in await self.pool.fetch(QUERIES["ops_shards_behind"])
        }
        out = []
        for shard in range(self.shards):
            row = rows.get(shard)
            late = behind.get(shard)
            if row is None:
                out.append(ShardLeader(shard, None, 0, None, late))
            else:
                out.append(ShardLeader(shard, row["owner"], row["epoch"], row["since_ms"], late))
        return out

    async def run_rates(
        self, now_ms: int, buckets: int, bucket_ms: int = BUCKET_MS
    ) -> list[Bucket]:
        start, end = window(now_ms, buckets, bucket_ms)
        rows = await self.pool.fetch(
            QUERIES["ops_run_rates"], start, end, bucket_ms, SCHEDULED_SLACK_MS
        )
        return fill(rows, start, buckets, bucket_ms)

    async def dead_runs(self, since_ms: int, limit: int) -> list[DeadRun]:
        rows = await self.pool.fetch(QUERIES["ops_dead_runs"], since_ms, limit)
        return [
            DeadRun(
                run_key(r["tenant"], r["job_id"], r["scheduled_ms"]),
                r["tenant"],
                r["job_id"],
                r["scheduled_ms"],
                r["attempt"],
                r["dead_ms"],
                r["last_error"],
            )
            for r in rows
        ]
