"""The chaos harness's pure parts: the seeded plan, the workload's judged and allowed runs, and
the execution log's reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from tickwheel.bench.chaos.deployment import REPLICATED, SINGLE, Deployment, Ports
from tickwheel.bench.chaos.faults import DEFAULT_KINDS, FAULTS
from tickwheel.bench.chaos.plan import Options, plan
from tickwheel.bench.chaos.workload import dst_jobs, fold_at, make_workload
from tickwheel.bench.ledger import read_executions
from tickwheel.domain import run_key
from tickwheel.sharding import shard_of

pytestmark = pytest.mark.unit


def test_every_cycle_of_the_plan_covers_every_fault_kind() -> None:
    """any len(kinds) rounds from a cycle start hold each kind once; the same seed, the same
    plan; victims spread over two processes and three brokers alike"""
    kinds = DEFAULT_KINDS[SINGLE]
    n = len(kinds)
    rounds = plan(Options(rounds=3 * n, seed=5, kinds=kinds))
    for start in (0, n, 2 * n):
        assert sorted(k for k, _, _ in rounds[start : start + n]) == sorted(kinds)
    assert plan(Options(rounds=3 * n, seed=5, kinds=kinds)) == rounds
    assert plan(Options(rounds=3 * n, seed=6, kinds=kinds)) != rounds
    victims = {v for _, _, v in plan(Options(rounds=60, seed=1, kinds=kinds))}
    assert {v % 2 for v in victims} == {0, 1} and {v % 3 for v in victims} == {0, 1, 2}


def test_each_stack_draws_at_most_eleven_kinds_it_can_run() -> None:
    """every default kind exists and runs on its stack; 5 cycles fit 55 or 50 rounds"""
    for stack, kinds in DEFAULT_KINDS.items():
        assert all(stack in FAULTS[k].stacks for k in kinds), stack
        assert len(set(kinds)) == len(kinds) <= 11
    assert len(DEFAULT_KINDS[REPLICATED]) == 10


def test_execution_log_lines_of_other_tenants_and_torn_lines_are_ignored(tmp_path: Path) -> None:
    """began/ok lines of the tenant are read; another tenant's and a line cut by kill -9 are
    not"""
    log = tmp_path / "executions.log"
    log.write_text(
        "began t1/a@1000 1 w1 41\nok t1/a@1000 1 w1 41\nbegan t2/a@1000 1 w1 41\n"
        "began t1/b@1000 1 w"
    )
    found = read_executions(log, "t1")
    assert [(e.run_key, e.returned, e.pid) for e in found] == [
        ("t1/a@1000", False, 41),
        ("t1/a@1000", True, 41),
    ]


def test_workload_has_steady_jobs_on_every_shard_and_judges_the_window() -> None:
    """2 cron jobs per shard; judged: every burst run and each second inside the margins"""
    w = make_workload("t", 8, burst=3, burst_ms=50_000)
    shards = [shard_of("t", j, 8) for j in w.steady_ids]
    assert sorted(set(shards)) == list(range(8)) and len(shards) == 16
    expected = w.expected(registered_ms=10_500, deleted_ms=20_000, paused_ms=20_000)
    assert run_key("t", "b0", 50_000) in expected
    steady = {int(k.rsplit("@", 1)[1]) for k in expected if "/s" in k}
    assert steady == set(range(13_000, 18_001, 1000))
    assert len(expected) == 3 + 16 * 6


def test_the_paused_job_is_judged_until_its_pause_and_allowed_no_run_after_it() -> None:
    """the paused job: judged to pause - margin, allowed to the pause; the others to the
    deletion; nothing allowed after the deletion"""
    w = make_workload("t", 8, burst=1, burst_ms=50_000)
    expected = w.expected(registered_ms=10_500, deleted_ms=30_000, paused_ms=20_000)
    allowed = w.allowed(start_ms=10_000, deleted_ms=30_000, paused_ms=20_000)
    paused = {int(k.rsplit("@", 1)[1]) for k in expected if k.startswith(f"t/{w.paused_id}@")}
    assert paused == set(range(13_000, 18_001, 1000))
    assert run_key("t", w.paused_id, 20_000) in allowed
    assert run_key("t", w.paused_id, 21_000) not in allowed
    other = w.steady_ids[1]
    assert run_key("t", other, 30_000) in allowed and run_key("t", other, 31_000) not in allowed
    assert run_key("t", other, 28_000) in expected and run_key("t", other, 29_000) not in expected


def test_dst_jobs_are_judged_and_allowed_by_their_overlap_policy() -> None:
    """a fold of 12 s at a minute's second 10: `first` has no run in the second copy, `last`
    none in the first, `both` one per copy; all three jobs share shard 0"""
    at = fold_at(1_800_000_010_000)
    assert (at // 1000) % 60 <= 48
    d = dst_jobs("t", "ChaosFold/R1", at, 8)
    assert {shard_of("t", j, 8) for j in d.ids.values()} == {0}
    w = make_workload("t", 8, burst=1, burst_ms=at, dst=d)
    allowed = w.allowed(start_ms=at - 60_000, deleted_ms=at + 60_000, paused_ms=at)
    first_copy = [run_key("t", d.ids[p], at - 5000) for p in ("first", "last", "both")]
    second_copy = [run_key("t", d.ids[p], at + 5000) for p in ("first", "last", "both")]
    assert [k in allowed for k in first_copy] == [True, False, True]
    assert [k in allowed for k in second_copy] == [False, True, True]


def test_the_dispatch_window_reaches_the_system_under_test_only_when_given() -> None:
    """`--dispatch-window N` sets the processes' TICKWHEEL_TENANT_DISPATCH_WINDOW; without it
    they keep the system's default (no such variable leaks in from the harness's own env)."""
    deployment = Deployment(Path("/nonexistent"), Ports())
    assert "TICKWHEEL_TENANT_DISPATCH_WINDOW" not in deployment.env()
    deployment.dispatch_window = 50
    assert deployment.env()["TICKWHEEL_TENANT_DISPATCH_WINDOW"] == "50"
