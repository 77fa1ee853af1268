"""The tenants' exclusion calendars as a scheduler process's leaders read them (D-286).

One `CalendarBook` per process, shared by its leaders: loaded whole before the process leads
any shard, then polled every second by the `calendars` part with the change feed's two steps
(docs/CHANGE_FEED.md) over the `calendars` table. A claim asks it, per occurrence of a job that
names calendars, whether one of them excludes the instant (`reason`); an excluded occurrence is
recorded skipped with that reason. So an edit reaches every leader within a poll, and a leader
that takes over decides with what its process already holds — no calendar is ever copied into
a wheel entry, and the claims of jobs naming none never look here.

A leader about to claim a job naming a calendar the book never saw (created after its last
poll, the job's row reaching the leader first) polls before it plans (`knows`). A calendar
the book saw deleted (`force`) excludes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import asyncpg
import orjson

from tickwheel.queries import QUERIES
from tickwheel.schedule.calendars import Calendar, parse_calendar
from tickwheel.shards.store import DB_ERRORS

log = logging.getLogger("tickwheel.scheduler.calendars")

POLL_INTERVAL_S = 1.0  # an edit reaches every leader within about this long


class CalendarBook:
    """Every tenant's calendars, by (tenant, name), each at the newest version seen."""

    def __init__(self) -> None:
        self._calendars: dict[tuple[str, str], Calendar] = {}
        self._versions: dict[tuple[str, str], int] = {}  # deleted ones too: repeats are old
        self._since: str | None = None
        self.polled_at: float | None = None  # monotonic time of the last successful poll

    @property
    def loaded(self) -> bool:
        return self._since is not None

    def __len__(self) -> int:
        return len(self._calendars)

    def knows(self, tenant: str, names: Iterable[str]) -> bool:
        """Whether the book has seen every one of `names` (held, or deleted): a name it never
        saw means a job written after the book's last poll names a calendar created since."""
        versions = self._versions
        return all((tenant, name) in versions for name in names)

    def reason(self, tenant: str, names: Iterable[str], ms: int) -> str | None:
        """Why the first of `names` that excludes `ms` does ("calendar NAME: RULE"), else None."""
        calendars = self._calendars
        for name in names:
            calendar = calendars.get((tenant, name))
            if calendar is not None and (why := calendar.exclusion(ms)) is not None:
                return why
        return None

    def apply(self, rows: Iterable[Mapping[str, Any] | asyncpg.Record]) -> int:
        """Take the rows of a poll (a row may repeat an older one); returns how many changed."""
        changed = 0
        for row in rows:
            key = (row["tenant"], row["name"])
            version = row["version"]
            if version <= self._versions.get(key, 0):
                continue
            self._versions[key] = version
            changed += 1
            document = row["document"]
            if document is None:
                self._calendars.pop(key, None)
                continue
            try:
                self._calendars[key] = parse_calendar(key[1], orjson.loads(document))
            except Exception as exc:
                # The registry stored only what parses; a calendar this code cannot read
                # (written by a newer registry, or by hand) excludes nothing.
                self._calendars.pop(key, None)
                log.error(
                    "calendar %s/%s version %d cannot be read; it excludes nothing: %r",
                    key[0], key[1], version, exc,
                )  # fmt: skip
        return changed

    async def poll(self, pool: asyncpg.Pool) -> int:
        """One poll: the position first, then every calendar written since the last one."""
        async with pool.acquire() as conn:
            position = await conn.fetchval(QUERIES["feed_position"])
            rows = await conn.fetch(QUERIES["calendars_changed_since"], self._since or "0")
        changed = self.apply(rows)
        self._since = position
        self.polled_at = time.monotonic()
        return changed

    async def run(
        self,
        pool: asyncpg.Pool,
        stop: asyncio.Event,
        on_age: Callable[[float], None] | None = None,
    ) -> None:
        """The `calendars` part: poll every second until `stop`; a failed poll is retried.
        `on_age` is told the seconds since the last successful poll after every attempt (the
        `tickwheel_scheduler_calendars_age_seconds` gauge)."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_INTERVAL_S)
            if stop.is_set():
                return
            try:
                changed = await self.poll(pool)
            except DB_ERRORS:
                log.warning("calendar poll failed; retrying", exc_info=True)
                changed = 0
            if on_age is not None and self.polled_at is not None:
                on_age(time.monotonic() - self.polled_at)
            if changed:
                log.info("calendars changed", extra={"changed": changed, "held": len(self)})
