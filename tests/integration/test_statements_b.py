"""Design B's candidate statements (bench/components/run_path_b.sql) keep the guards the
invariants ask of them, and the harness that measures them beside today's writes every run in
the batches asked for (no timing is asserted: figures live in docs/BENCHMARKS.md)."""

from __future__ import annotations

import pytest

from tickwheel.bench.components.run_path_b import default_schema
from tickwheel.bench.components.run_path_b_guards import check
from tickwheel.bench.components.statements import _round
from tickwheel.bench.components.statements_b import Sizes, _b_round
from tickwheel.stack import Addresses

pytestmark = pytest.mark.integration

JOBS = 640


async def test_b_statements_keep_their_guards(stack: Addresses) -> None:
    """on 2,000 jobs: stale epochs and owners, edited and paused jobs, repeated claims, repeated
    and late results claim or write nothing; the open check and the plans are as designed"""
    assert await check(stack.dsn, 2000, [default_schema()]) == 0


async def test_b_round_claims_checks_and_writes_every_run(stack: Addresses) -> None:
    """640 jobs: one B claim of up to 5,000 carries every shard's; checks and outcomes go in
    statements of 500; every run is written once, and the claim's WAL is its statements'"""
    sizes = Sizes(344, False, 64, 256, 5000, 500, 500)
    phases = await _b_round(stack.dsn, JOBS, sizes, [default_schema()])
    assert [p.name for p in phases] == ["B claim", "B check", "B outcome"]
    claim, check, outcome = phases
    assert all(p.runs == JOBS for p in phases)
    assert (claim.calls, check.calls, outcome.calls) == (1, 2, 2)
    assert claim.statement_wal_bytes_per_run is None or claim.statement_wal_bytes_per_run > 0
    assert check.statement_wal_bytes_per_run in (None, 0)


async def test_today_claims_packed_across_shards(stack: Addresses) -> None:
    """`--claim-across-shards`: today's claims carry exactly --claim jobs, several shards' each"""
    phases = await _round(stack.dsn, JOBS, 300, 64, 256, [], True, True)
    assert phases[0].name == "claim" and phases[0].calls == 3  # 300 + 300 + 40
    assert all(p.runs == JOBS for p in phases)
