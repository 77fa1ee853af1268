"""`make demo` stays true: `tickwheel demo` runs end to end on the real stack and its ledger
check finds nothing lost and nothing duplicated.

The suite runs it shorter than `make demo` does (`--duration 20 --hot 2000` instead of 60 s
and 10,000 jobs in the hot second) so that it fits the suite's budget on a loaded machine;
every step is the same."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from tickwheel.kafka.clients import admin_client
from tickwheel.stack import Addresses

pytestmark = pytest.mark.integration

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")
DEMO_TIMEOUT_S = 240


async def _databases(dsn: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return {r["datname"] for r in await conn.fetch("SELECT datname FROM pg_database")}
    finally:
        await conn.close()


@pytest.mark.timeout(DEMO_TIMEOUT_S + 30)
def test_demo_runs_end_to_end(stack: Addresses, db_dsn: str) -> None:
    """the demo registers over HTTP and Kafka, survives a scheduler's kill -9, replays its dead
    run, reports lost: 0 and duplicates: 0, exits 0 and leaves no database or topic behind"""
    env = {**os.environ, "TICKWHEEL_DSN": db_dsn}
    out = subprocess.run(
        [TICKWHEEL, "demo", "--duration", "20", "--hot", "2000"],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        check=False,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    text = out.stdout
    assert "POST /v1/jobs → 201" in text
    assert "Kafka job landed" in text
    assert "rejected onto" in text and "has 2 fields" in text
    assert "['invoice-42', 'nightly-report']" in text
    assert re.search(r"failover: demo-sched-a took over all \d+ shards", text)
    assert re.search(r"replayed 1 dead run", text)
    assert re.search(r"^lost: 0$", text, re.MULTILINE)
    assert re.search(r"^duplicates: 0$", text, re.MULTILINE)
    due = re.search(r"due occurrences: (\d+)", text)
    assert due and int(due.group(1)) > 2000, "the ledger check covered the hot second"
    database = re.search(r"1\. database (\S+) ", text)
    prefix = re.search(r"topics (\S+)\.\*", text)
    assert database and prefix
    assert database.group(1) not in asyncio.run(_databases(db_dsn))
    left = admin_client(stack.kafka).list_topics(timeout=10).topics
    assert not [t for t in left if t.startswith(prefix.group(1) + ".")]
