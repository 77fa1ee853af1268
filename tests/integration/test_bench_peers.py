"""`tickwheel bench peers` end to end on a thousand jobs: the floor, tickwheel, graphile-worker
and River each start every job once, the JSON and the table carry one line per system, and the
peers' scratch databases are gone afterwards. The peers are built from the package's sources
(npm and the Go module proxy on first use). No timing is asserted: speed lives in
docs/BENCHMARKS.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from tickwheel.stack import Addresses

pytestmark = pytest.mark.integration

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")
JOBS = 1000


@pytest.mark.timeout(900)
async def test_peers_beside_tickwheel_run_every_job_once(stack: Addresses, tmp_path: Path) -> None:
    """floor, tickwheel, graphile-worker, River: 1,000 jobs each, none missing or twice"""
    out = tmp_path / "peers.json"
    env = {
        **os.environ,
        "TICKWHEEL_DSN": stack.dsn,
        "TICKWHEEL_KAFKA": stack.kafka,
        "TICKWHEEL_ZK": stack.zk,
        "TICKWHEEL_SHARDS": "8",
    }
    done = subprocess.run(
        [TICKWHEEL, "bench", "peers", "--jobs", str(JOBS), "--lead-s", "15",
         "--json", str(out), "--log-dir", str(tmp_path / "logs")],
        env=env, capture_output=True, timeout=880,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    systems = {s["system"]: s for s in json.loads(out.read_text())["systems"]}
    assert list(systems) == ["floor", "tickwheel", "graphile-worker", "River"]
    for name, figures in systems.items():
        assert figures["jobs"] == JOBS, name
        assert figures["missing"] == 0 and figures["duplicates"] == 0, (name, figures)
        assert 0 < figures["start_p50_s"] <= figures["start_p99_s"] <= figures["last_start_s"]
        assert figures["machine_cpu_us_per_run"] > 0, name
    assert systems["graphile-worker"]["version"] == "0.17.3"
    assert systems["River"]["version"] == "v0.51.2"
    table = done.stdout.decode()
    for line in ("| floor |", "| tickwheel ", "| graphile-worker 0.17.3 |", "| River v0.51.2 |"):
        assert line in table, table
    assert "tickwheel's last start ÷ floor's" in table
    conn = await asyncpg.connect(stack.dsn)
    try:
        left = await conn.fetchval("SELECT count(*) FROM pg_database WHERE datname LIKE 'peer\\_%'")
    finally:
        await conn.close()
    assert left == 0


def test_a_peer_without_its_tools_is_left_out_with_one_line(tmp_path: Path) -> None:
    """With Node and Go off PATH and tickwheel not asked for, nothing can be measured: each
    peer says which tools are missing, and the command fails instead of printing an empty
    table"""
    done = subprocess.run(
        [TICKWHEEL, "bench", "peers", "--no-tickwheel", "--jobs", "10"],
        env={"PATH": str(tmp_path), "HOME": str(tmp_path)}, capture_output=True, timeout=60,
    )  # fmt: skip
    lines = done.stdout.decode().splitlines()
    assert "graphile-worker: not run, node, npm not found on PATH" in lines
    assert "River: not run, go not found on PATH" in lines
    assert done.returncode == 1
    assert "nothing to measure" in done.stderr.decode()
