"""`tickwheel bench hot-second` end to end on a few thousand jobs: the measured run, the floor
and the naive baseline each complete with nothing lost or duplicated, and the JSON carries the
figures the docs compare (no timing is asserted: speed lives in docs/BENCHMARKS.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tickwheel.stack import Addresses

pytestmark = pytest.mark.integration

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")
JOBS = 2000


@pytest.mark.timeout(300)
def test_hot_second_with_floor_and_naive_baselines(stack: Addresses, tmp_path: Path) -> None:
    """2,000 jobs: tickwheel, the floor and the naive pollers all run every job once; the JSON
    has the floor's completed max, its CPU, and the ratio to it"""
    out = tmp_path / "hot.json"
    env = {
        "PATH": str(Path(sys.executable).parent),
        "TICKWHEEL_DSN": stack.dsn,
        "TICKWHEEL_KAFKA": stack.kafka,
        "TICKWHEEL_ZK": stack.zk,
        "TICKWHEEL_SHARDS": "8",
    }
    done = subprocess.run(
        [TICKWHEEL, "bench", "hot-second", "--jobs", str(JOBS), "--baseline", "both",
         "--lead-s", "20", "--json", str(out), "--log-dir", str(tmp_path / "logs")],
        env=env, capture_output=True, timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    result = json.loads(out.read_text())
    assert result["jobs"] == JOBS and result["completed_count"] == JOBS
    assert result["duplicates"] == 0 and result["lost"] == 0 and result["not_completed"] == 0
    floor = result["floor"]
    assert floor["jobs"] == JOBS and floor["completed_count"] == JOBS
    assert result["floor_completed_max_s"] == floor["completed_max_s"] > 0
    assert result["floor_cpu_s"] == floor["cpu_seconds_t0_to_done"]["whole_machine"]
    assert result["ratio_vs_floor"] == pytest.approx(
        result["completed_max_s"] / floor["completed_max_s"], abs=0.01
    )
    assert result["baseline"]["jobs"] == JOBS and result["baseline_claimed_per_s"] > 0
    table = done.stdout.decode()
    assert "floor (the design's least work" in table and "baseline (3 naive pollers)" in table


@pytest.mark.timeout(300)
def test_two_tenant_burst_reports_each_tenant(stack: Addresses, tmp_path: Path) -> None:
    """bench tenants: the burst alone, then beside another tenant's jobs; every run of both
    completes once and the JSON has each tenant's starts and the ratio to the burst alone"""
    out = tmp_path / "tenants.json"
    env = {
        "PATH": str(Path(sys.executable).parent),
        "TICKWHEEL_DSN": stack.dsn,
        "TICKWHEEL_KAFKA": stack.kafka,
        "TICKWHEEL_ZK": stack.zk,
        "TICKWHEEL_SHARDS": "8",
    }
    done = subprocess.run(
        [TICKWHEEL, "bench", "tenants", "--jobs", "1000", "--other-jobs", "20",
         "--lead-s", "15", "--json", str(out), "--log-dir", str(tmp_path / "logs"),
         "--plot", str(tmp_path / "tenants.png")],
        env=env, capture_output=True, timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert (tmp_path / "tenants.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads(out.read_text())
    assert set(result["alone"]) == {"bench"} and set(result["together"]) == {"bench", "bench-b"}
    assert result["together"]["bench"]["completed_count"] == 1000
    assert result["together"]["bench-b"]["completed_count"] == 20
    assert result["alone"]["bench"]["completed_count"] == 1000
    for burst in ("alone_burst", "together_burst"):
        assert result[burst]["lost"] == 0 and result[burst]["duplicates"] == 0
        assert result[burst]["not_completed"] == 0
    assert result["burst_completed_vs_alone"] > 0
    assert "bench-b (20)" in done.stdout.decode()


@pytest.mark.timeout(300)
def test_statements_component_runs_the_statements_and_a_variant(
    stack: Addresses, tmp_path: Path
) -> None:
    """`bench.components.statements` on 640 jobs, with the leader's claim given as a variant
    (its own text): both rounds claim, start (the suspect path's claim, asked for) and write
    every run, then the claimed jobs' positions, in the batches asked for, and the floor's two
    statements beside them; an unknown statement name is refused by name"""
    from tickwheel.queries import QUERIES

    variant = tmp_path / "claim.sql"
    variant.write_text(QUERIES["claim_due"])
    out = tmp_path / "statements.json"
    module = [sys.executable, "-m", "tickwheel.bench.components.statements"]
    env = {"PATH": str(Path(sys.executable).parent), "TICKWHEEL_DSN": stack.dsn}
    done = subprocess.run(
        [*module, "--jobs", "640", "--claim", "100", "--start", "64", "--result", "256",
         "--variant", f"claim_due={variant}", "--json", str(out)],
        env=env, capture_output=True, timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = json.loads(out.read_text())
    assert [r["label"] for r in report["rounds"]] == ["current", "variant"]
    for r in report["rounds"]:
        claim, start, result, positions, floor_claim, floor_result = r["phases"]
        assert [p["name"] for p in r["phases"]] == [
            "claim", "start", "result", "positions", "floor claim", "floor result"
        ]  # fmt: skip
        assert all(p["runs"] == 640 for p in r["phases"])
        assert 7 <= claim["calls"] <= 64  # at most 100 per claim, one shard at a time
        assert start["calls"] == 10 and result["calls"] == 3
        assert positions["calls"] == 1  # 5,000 per statement
        assert floor_claim["calls"] == 1 and floor_result["calls"] == 2
        assert all(p["postgres_cpu_us_per_run"] >= 0 for p in r["phases"])
    refused = subprocess.run(
        [*module, "--jobs", "10", "--variant", f"no_such_statement={variant}"],
        env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0 and b"no_such_statement" in refused.stderr
