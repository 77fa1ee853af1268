"""The benchmark reads its figures back from a real database and real run topics."""

from __future__ import annotations

import asyncpg
import pytest

from tickwheel.bench.analysis import summarize
from tickwheel.bench.observe import fetch_runs, run_deliveries
from tickwheel.bench.scratch import stamp_on_append
from tickwheel.clock import now_ms
from tickwheel.kafka.clients import producer
from tickwheel.kafka.producing import Outgoing, publish_confirmed
from tickwheel.stack import Addresses
from tickwheel.topics import Topics

pytestmark = pytest.mark.integration

T0 = 1_800_000_000_000  # unix ms, 2027-01-15


@pytest.mark.foreign_messages("runs.normal")  # bare deliveries: the read-back counts keys only
async def test_rows_and_run_topics_give_duplicates_and_losses(
    db_dsn: str, topics: Topics, stack: Addresses
) -> None:
    """crafted rows and messages: a message twice, an unexpected run, a run never published"""
    conn = await asyncpg.connect(db_dsn)
    try:
        await conn.execute("INSERT INTO tenants (name) VALUES ('bench') ON CONFLICT DO NOTHING")
        await conn.executemany(
            "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, epoch, status,"
            " attempt, created_at, published_at, started_at, finished_at)"
            " VALUES ('bench', $1, to_timestamp($2 / 1000.0), 0, 'normal', 1, $3, $4,"
            " to_timestamp($5 / 1000.0), to_timestamp($6 / 1000.0), to_timestamp($7 / 1000.0),"
            " to_timestamp($8 / 1000.0))",
            [
                ("j0", T0, "succeeded", 1, T0 + 100, T0 + 200, T0 + 300, T0 + 400),
                ("j1", T0, "succeeded", 2, T0 + 100, T0 + 250, T0 + 900, T0 + 1000),
                ("j2", T0, "pending", 1, T0 + 100, None, None, None),
                ("other", T0, "succeeded", 1, T0 + 100, T0 + 200, T0 + 300, T0 + 400),
            ],
        )
        rows = await fetch_runs(conn)
    finally:
        await conn.close()
    sends = [("j0", 2), ("j1", 1), ("j3", 1), ("other", 1)]  # j3: a message, but no row
    stamp_on_append(stack.kafka, [topics.runs("normal")])
    before_ms = now_ms()
    prod = producer(stack.kafka)
    out = [
        Outgoing(
            topics.runs("normal"),
            value=b"{}",
            key=job,
            headers=[("run_key", f"bench/{job}@{T0}".encode())],
        )
        for job, times in sends
        for _ in range(times)
    ]
    assert publish_confirmed(prod, out) == {}

    after_ms = now_ms()
    found = run_deliveries(stack.kafka, topics)
    deliveries = found.counts
    expected = [f"bench/j{i}@{T0}" for i in range(4)]
    summary = summarize(expected, rows, deliveries, T0)

    assert sorted(r.run_key for r in rows) == sorted([*expected[:3], f"bench/other@{T0}"])
    assert deliveries[expected[0]] == 2
    assert summary.duplicate_messages == 2  # j0's second, and the unexpected run's message
    assert summary.unexpected_rows == 1
    assert summary.lost == 2  # j2: never on a topic; j3: no row
    assert summary.reattempted == 1
    assert summary.published.count == 2
    assert summary.published.p50_s == 0.25  # j0 at 0.2 s, j1 at 0.25 s, j2/j3 missing
    assert summary.completed.count == 2 and summary.completed.max_s == float("inf")
    # The broker stamped every message on append: a run's publish instant comes from its topic.
    assert set(found.first_append_ms) == {f"bench/{job}@{T0}" for job, _ in sends}
    assert all(before_ms - 1000 <= t <= after_ms + 1000 for t in found.first_append_ms.values())
    with_topic_times = summarize(expected, rows, deliveries, T0, found.first_append_ms)
    # j0 and j1 now take their topic times (today, long before the crafted T0); j2 has none.
    topic_s = sorted((found.first_append_ms[k] - T0) / 1000 for k in expected[:2])
    assert with_topic_times.published.count == 2
    assert with_topic_times.published.p50_s == topic_s[1]
    assert with_topic_times.recorded.p50_s == 0.25
