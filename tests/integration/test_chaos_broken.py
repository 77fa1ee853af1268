"""The chaos checker against deliberately broken builds (tickwheel/broken.py): one short round
per variant, with the fault that exposes it, on one private stack shared by the module. Each
must be caught — its verdict other than 0 — so that a green chaos run means something. On the
same stack: the correct build's control rounds, and a round whose scheduler's clock steps."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tickwheel import broken
from tickwheel.bench.chaos.checker import VERDICTS
from tickwheel.bench.chaos.deployment import Deployment, Ports
from tickwheel.bench.chaos.faults import have_faketime
from tickwheel.bench.chaos.harness import Harness
from tickwheel.bench.chaos.plan import Options, default_jars, plan
from tickwheel.bench.supervisor import free_ports

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    # DevStack starts its JVMs as daemons and drops their Popen objects on purpose (they are
    # tracked by pid files); the garbage collector's "still running" note is expected here.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

LONG_BURST_MS = 2000  # burst runs hold their slot this long, so a fault finds them in flight
# A burst-phase `rebalance` round whose worker joins 485 ms after T0, while every burst run is
# in hand. (The first burst-phase seed, 1, joins 46 ms before T0: the rebalance raced the
# burst's first fetch, and once moved nothing in flight, so the broken build went uncaught.)
REBALANCE_SEED = 4
# Its runs hold their slot well past the rebalance, so the new owner of a moved partition finds
# them still running under the first worker. The rebalance took ~3 s with the range assignor on
# a quiet machine and 7.2 s in one full suite's run, when 5 s runs had finished before it ended
# and nothing was caught: 10 s leaves room.
REBALANCE_BURST_MS = 10_000


@pytest.fixture(scope="module")
def private_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One private single-node stack for every broken build of the module."""
    root = tmp_path_factory.mktemp("chaos-broken")
    deployment = Deployment(root / "stack", Ports(*free_ports(4)))
    try:
        deployment.start_stack(default_jars())
        yield deployment
    finally:
        deployment.close()


def _one_round(
    deployment: Deployment,
    variant: str | None,
    kind: str,
    burst_sleep_ms: int = 100,
    seed: int | None = None,
) -> dict[str, Any]:
    """One round of `kind` (in the burst phase, unless `seed` says) with every process
    running `variant`."""
    if seed is None:
        seed = next(s for s in range(100) if plan(Options(1, s, kinds=(kind,)))[0][1] == "burst")
    options = Options(
        rounds=1,
        seed=seed,
        burst=100,
        kinds=(kind,),
        root=deployment.root,
        ports=deployment.ports,
        broken=frozenset() if variant is None else frozenset({variant}),
        burst_sleep_ms=burst_sleep_ms,
    )
    lines: list[str] = []
    report = Harness(options, echo=lines.append, deployment=deployment).run()
    print("\n".join(lines))
    return report


def test_a_leader_without_its_epoch_fence_is_caught_claiming_after_a_takeover(
    private_stack: Deployment,
) -> None:
    """epoch_fence off, a split-brain scheduler leading every shard beside the others: rows
    claimed under an epoch after a newer one took the shard over (stale claims > 0)"""
    report = _one_round(private_stack, broken.EPOCH_FENCE, "split_brain")
    assert report["stale_claims"] > 0, report["detail"]


def test_offsets_committed_before_the_result_write_are_caught(
    private_stack: Deployment,
) -> None:
    """offsets_before_results: the workers' committed offsets pass runs whose results are not
    written yet (offsets ahead > 0), though the leases would still recover any run"""
    report = _one_round(private_stack, broken.OFFSETS_BEFORE_RESULTS, "leader_kill", LONG_BURST_MS)
    assert report["offsets_ahead"] > 0, report["detail"]


def test_an_ignored_dst_overlap_policy_is_caught_across_a_failover_in_the_fold(
    private_stack: Deployment,
) -> None:
    """dst_overlap_ignored: the `first` and `last` jobs fire in both copies of the repeated
    wall time (unexpected runs > 0)"""
    report = _one_round(private_stack, broken.DST_OVERLAP_IGNORED, "dst_failover")
    assert report["unexpected"] > 0, report["detail"]


def test_a_claim_that_ignores_the_lease_is_caught_running_a_run_twice(
    private_stack: Deployment,
) -> None:
    """claim_ignores_lease, a worker joining mid-burst: a partition's new owner claims again
    runs still running under their first worker's lease — marked so when their partition was
    taken away — and runs each a second time under the same attempt while the first worker
    lives on (unexplained re-executions > 0; one result per attempt lands, so no duplicate
    success, D-268)"""
    report = _one_round(
        private_stack, broken.CLAIM_IGNORES_LEASE, "rebalance", REBALANCE_BURST_MS, REBALANCE_SEED
    )
    assert report["detail"][0]["fault_offset_ms"] > 0  # the premise: runs in hand at the join
    assert report["unexplained_reexecutions"] > 0, report["detail"]


def test_the_same_rounds_of_the_correct_build_find_nothing(private_stack: Deployment) -> None:
    """the control: the split-brain and long-burst rebalance rounds without a broken variant
    keep every verdict at 0, so the catches above are the variants' doing"""
    for kind, sleep_ms, seed in (
        ("split_brain", 100, None),
        ("rebalance", REBALANCE_BURST_MS, REBALANCE_SEED),
    ):
        report = _one_round(private_stack, None, kind, sleep_ms, seed)
        found = {v: report[v] for v in VERDICTS if report[v]}
        assert found == {}, (kind, report["detail"])


def test_a_scheduler_whose_wall_clock_steps_back_dispatches_nothing_early(
    private_stack: Deployment,
) -> None:
    """a leading scheduler's wall clock stepped 30 s back and forth again (libfaketime): no
    run early — by the rows, whose published_at is the envelope's stamp, nor by the run
    topics — and every other verdict 0 (the ledger said 128 runs were early before envelopes
    carried the leaders' clock)"""
    if not have_faketime():
        message = "libfaketime is not installed (Debian: apt-get install faketime)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the clock-step round, but {message}")
        pytest.skip(message)
    seed = next(s for s in range(100) if plan(Options(1, s, kinds=("clock_step",)))[0][2] % 2)
    report = _one_round(private_stack, None, "clock_step", seed=seed)
    assert report["detail"][0]["notes"]["clock_step_s"] == -30
    found = {v: report[v] for v in VERDICTS if report[v]}
    assert found == {}, report["detail"]
