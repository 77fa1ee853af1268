"""The operators' page harness end to end on a small ledger: it seeds, every view answers
through its production function, and the JSON has a figure per view (no timing is asserted:
the figures on 1,000,000 jobs and 10,000,000 runs live in docs/BENCHMARKS.md)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tickwheel.stack import Addresses
from tickwheel.testing import database_exists

pytestmark = pytest.mark.integration

JOBS = 2000
RUNS = 20_000
# Every view the harness measures, views.py's two included.
VIEWS = {
    "jobs page", "jobs page: tenant", "jobs page: paused", "jobs page: handler", "jobs page: q",
    "jobs page: tenant + rare q", "jobs page: deep cursor", "get_job: hot job",
    "get_job: paused job", "list_runs", "list_runs: tenant", "list_runs: small tenant",
    "list_runs: job", "list_runs: dead", "list_runs: last hour", "get_run", "replays_of",
    "replay_audit", "run_rates: 10 min", "run_rates: 60 min", "dead_runs: 24 h",
    "dead_runs: 30 days", "shard_leaders", "tenants", "job_detail: hot job", "run_detail",
    "dead_letters: 24 h", "dead_letters: 30 d", "dead_letters: 30 d, tenant",
    "dead_letters: 30 d, rare error",
}  # fmt: skip


@pytest.mark.timeout(120)
def test_every_view_answers_on_a_seeded_ledger(stack: Addresses, tmp_path: Path) -> None:
    """2,000 jobs and 20,000 runs: each view answers without error, with rows where the seed
    holds them, a first call, a median and a max each; the scratch database is dropped"""
    out = tmp_path / "ops_views.json"
    done = subprocess.run(
        [sys.executable, "-m", "tickwheel.bench.components.ops_views", "--jobs", str(JOBS),
         "--runs", str(RUNS), "--repeat", "3", "--explain", "--json", str(out)],
        env={"PATH": str(Path(sys.executable).parent), "TICKWHEEL_DSN": stack.dsn},
        capture_output=True, timeout=110,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = json.loads(out.read_text())
    assert report["jobs"] == JOBS and report["runs"] == RUNS and report["seeded_now"]
    assert "--jobs 2000" in report["command"]
    figures = {f["name"]: f for f in report["views"]}
    assert set(figures) == VIEWS
    for name, f in figures.items():
        assert f["error"] is None, f"{name}: {f['error']}"
        assert all(f[k] is not None and f[k] >= 0 for k in ("first_ms", "median_ms", "max_ms"))
        assert f["met"] in (True, False)
        if f["must_answer"]:
            assert f["rows"] > 0, f"{name} answered nothing"
        # --explain: each statement the view sent, with both plans
        assert f["statements"] and all(
            "Execution Time" in s["custom_plan"] and "Execution Time" in s["generic_plan"]
            for s in f["statements"]
        ), name
    assert figures["shard_leaders"]["rows"] == 64  # every shard led
    assert figures["get_run"]["rows"] > 1  # the replays that met the run
    assert figures["get_job: hot job"]["rows"] == 10  # `jobs show`'s latest runs
    assert "| jobs page |" in done.stdout.decode()
    assert not asyncio.run(database_exists(stack.dsn, report["database"]))
