"""The commit-cutting proxy against the real Postgres: a transaction through it commits, the
client sees its connection drop instead of the reply, and the proxy forwards everything else
(prepared statements, COPY, other transactions) untouched."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import asyncpg
import pytest

from tickwheel.bench.chaos.proxy import CommitCutProxy, CommitCutter
from tickwheel.db import DB_ERRORS

pytestmark = pytest.mark.integration


def _upstream(dsn: str) -> tuple[str, int]:
    parts = urlsplit(dsn)
    return parts.hostname or "127.0.0.1", parts.port or 5432


def _through(dsn: str, port: int) -> str:
    parts = urlsplit(dsn)
    return parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}").geturl()


async def test_a_marked_commit_lands_while_the_client_sees_a_dropped_connection(
    db_dsn: str,
) -> None:
    """a transaction holding the marker commits on the server, the client's COMMIT raises a
    connection error; an unmarked transaction before it and a new connection after it go
    through unharmed, COPY included"""
    cutter = CommitCutter()
    proxy = CommitCutProxy(cutter, _upstream(db_dsn))
    port = await proxy.start()
    names = [f"cut-{uuid.uuid4().hex[:8]}-{n}" for n in range(3)]
    count = "SELECT count(*) FROM tenants WHERE name = ANY($1::text[])"
    direct = await asyncpg.connect(db_dsn)
    try:
        conn = await asyncpg.connect(_through(db_dsn, port))
        async with conn.transaction():  # unarmed: forwarded as it is
            await conn.copy_records_to_table("tenants", records=[(names[0],)], columns=["name"])
            await conn.execute("INSERT INTO tenants (name) VALUES ($1)", names[1])
        cutter.arm("cut-me")
        with pytest.raises(DB_ERRORS):
            async with conn.transaction():
                await conn.execute("INSERT INTO tenants (name) VALUES ($1) -- cut-me", names[2])
        assert cutter.fired.is_set() and cutter.marker is None
        assert conn.is_closed()
        assert await direct.fetchval(count, names) == 3
        again = await asyncpg.connect(_through(db_dsn, port))
        assert await again.fetchval(count, names) == 3
        await again.close()
    finally:
        await direct.close()
        await proxy.close()
