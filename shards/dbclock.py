"""The leaders' clock: `time.monotonic()` pinned to the database's clock, never ahead of it (I8).

"Never early" is judged by Postgres's clock, which run rows and leases are written with, so the
process measures its offset to it and ticks on the monotonic clock (immune to wall-clock steps).
The database's answer was read at some instant between sending the query (t0) and receiving the
answer (t1); we take it as read at t1, the latest possibility. The estimate of the database's
time is therefore late by at most one round trip and never early.
"""

from __future__ import annotations

import time

from tickwheel.queries import QUERIES
from tickwheel.shards.store import Conn

FLOOR_MARGIN_MS = 1  # see sync()


class DbClock:
    """Database time in unix milliseconds, from the monotonic clock plus a measured offset."""

    def __init__(self) -> None:
        self._offset_ms: int | None = None
        self.round_trip_ms = 0

    async def sync(self, conn: Conn) -> None:
        """Measure the offset to the database's clock (at start and on every re-sync)."""
        started = time.monotonic_ns()
        db_ms: int = await conn.fetchval(QUERIES["db_clock_ms"])
        received = time.monotonic_ns()
        self.round_trip_ms = (received - started) // 1_000_000
        # Both readings are floored to the millisecond; the monotonic one may thus lag its
        # true value by up to 1 ms, which would put our estimate up to 1 ms ahead: take it off.
        self._offset_ms = db_ms - received // 1_000_000 - FLOOR_MARGIN_MS

    @property
    def synced(self) -> bool:
        return self._offset_ms is not None

    def now_ms(self) -> int:
        if self._offset_ms is None:
            raise RuntimeError("DbClock.now_ms before the first sync")
        return time.monotonic_ns() // 1_000_000 + self._offset_ms
