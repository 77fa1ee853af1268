"""The workers' sessions (`db.KEYED_LOOKUPS`) on the real server: no statement of theirs is
compiled by JIT. With every plan but index probes switched off, a plain scan is costed at
10^10 and crossed every JIT threshold: the capped-tenants read, one page of `tenants`, was
compiled with LLVM on every call (~20 ms idle, ~200 ms in a burst)."""

from __future__ import annotations

import asyncpg
import pytest

from tickwheel.db import KEYED_LOOKUPS
from tickwheel.queries import QUERIES

pytestmark = pytest.mark.integration


async def test_a_workers_session_compiles_no_plan(db_dsn: str) -> None:
    conn = await asyncpg.connect(db_dsn, server_settings=KEYED_LOOKUPS)
    try:
        assert await conn.fetchval("SHOW jit") == "off"
        plan = await conn.fetch("EXPLAIN (ANALYZE) " + QUERIES["tenant_caps"])
        lines = [r[0] for r in plan]
        assert any("Seq Scan on tenants" in line for line in lines)  # the disabled plan
        assert not any(line.lstrip().startswith("JIT:") for line in lines), lines
    finally:
        await conn.close()
