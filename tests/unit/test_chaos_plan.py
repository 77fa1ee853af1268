"""The chaos harness's pure parts: the seeded plan and the execution log's reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from tickwheel.bench.chaos.faults import FAULTS
from tickwheel.bench.chaos.harness import Options, plan
from tickwheel.bench.chaos.workload import make_workload
from tickwheel.bench.ledger import read_executions
from tickwheel.domain import run_key
from tickwheel.sharding import shard_of

pytestmark = pytest.mark.unit


def test_every_cycle_of_the_plan_covers_every_fault_kind() -> None:
    """any 9 rounds from a cycle start hold each kind once; the same seed, the same plan"""
    rounds = plan(Options(rounds=27, seed=5))
    for start in (0, 9, 18):
        assert sorted(k for k, _, _ in rounds[start : start + 9]) == sorted(FAULTS)
    assert plan(Options(rounds=27, seed=5)) == rounds
    assert plan(Options(rounds=27, seed=6)) != rounds


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
    expected = w.expected(registered_ms=10_500, deleted_ms=20_000)
    assert run_key("t", "b0", 50_000) in expected
    steady = {int(k.rsplit("@", 1)[1]) for k in expected if "/s" in k}
    assert steady == set(range(13_000, 18_001, 1000))
    assert len(expected) == 3 + 16 * 6
