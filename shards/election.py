"""ZooKeeper side of leadership: live members, one lock node per shard, session state.

Choice (docs/DECISIONS.md D-104): an own pure assignment (`assignment.py`) over ephemeral
member nodes plus one ephemeral lock node per shard, rather than kazoo's `Election`/`Lock` per
shard (64 contenders queued on every shard leave the balance to chance) or `SetPartitioner`
(it releases *every* partition on each membership change and waits for everyone to do so: a
rebalance would stop all dispatching). Layout under `/tickwheel/<topic prefix>`:

    members/<id>   ephemeral, one per live scheduler process; data = JSON
                   {"id": <id>, "metrics": "host:port" or null} (how `tickwheel status`
                   finds each scheduler's Prometheus endpoint)
    shards/<n>     ephemeral, created by the process leading shard n, data = its id

A process leads shard n only while it holds `shards/<n>`; it contends only for the shards the
assignment gives it and deletes (only its own) nodes of the others. When a process dies its
session expires, both kinds of nodes vanish together, the survivors' watches fire, and the
shards go to their new assignees. ZooKeeper decides *who*; Postgres's epoch fences *what* an
old holder can still write (I2).

kazoo runs callbacks on its own threads; everything here hands them to the event loop with
`loop.call_soon_threadsafe`, and blocking kazoo calls run on the loop's default executor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from tickwheel.deployment import member_data

log = logging.getLogger("tickwheel.scheduler.election")

START_TIMEOUT_S = 15.0  # seconds to wait for the first ZooKeeper connection
REGISTER_RETRY_S = 0.5  # seconds between tries while an old session's member node lingers


class Election:
    """Membership and shard nodes of one process; state changes arrive on the event loop."""

    def __init__(
        self,
        hosts: str,
        root: str,
        member_id: str,
        session_timeout_s: float,
        on_state: Callable[[str], None],
        metrics_address: str | None = None,
    ) -> None:
        self.root = root
        self.member_id = member_id
        self.member_data = member_data(member_id, metrics_address)
        self.members: list[str] = []
        self.taken: set[int] = set()  # shards whose node exists (anyone's)
        self.connected = False
        self.registered = False
        self.changed = asyncio.Event()
        self._on_state = on_state
        self._loop = asyncio.get_running_loop()
        self.client = KazooClient(
            hosts=hosts,
            timeout=session_timeout_s,
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
            command_retry={"max_tries": 3, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
        )
        self.client.add_listener(self._state_listener)

    @property
    def members_path(self) -> str:
        return f"{self.root}/members"

    @property
    def shards_path(self) -> str:
        return f"{self.root}/shards"

    def shard_path(self, shard: int) -> str:
        return f"{self.shards_path}/{shard}"

    # --- kazoo threads → event loop -----------------------------------------------------------

    def _state_listener(self, state: str) -> None:
        self._loop.call_soon_threadsafe(self._state_changed, state)

    def _state_changed(self, state: str) -> None:
        self.connected = state == KazooState.CONNECTED
        if state == KazooState.LOST:
            self.registered = False
            self.taken.clear()
        log.info("zookeeper session %s", state.lower(), extra={"member": self.member_id})
        self._on_state(state)
        self.changed.set()

    def _set_members(self, children: list[str]) -> None:
        self._loop.call_soon_threadsafe(self._members_changed, sorted(children))

    def _members_changed(self, children: list[str]) -> None:
        self.members = children
        self.changed.set()

    def _set_taken(self, children: list[str]) -> None:
        self._loop.call_soon_threadsafe(self._taken_changed, children)

    def _taken_changed(self, children: list[str]) -> None:
        self.taken = {int(c) for c in children if c.isdigit()}
        self.changed.set()

    # --- blocking calls, run on the executor ------------------------------------------------

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self._loop.run_in_executor(None, lambda: fn(*args, **kwargs))

    async def start(self) -> None:
        """Connect, create the folders, register this member, watch members and shards."""
        await self._call(self.client.start, timeout=START_TIMEOUT_S)
        await self._call(self.client.ensure_path, self.members_path)
        await self._call(self.client.ensure_path, self.shards_path)
        self.connected = True
        await self.register()
        ChildrenWatch(self.client, self.members_path, self._set_members, allow_session_lost=True)
        ChildrenWatch(self.client, self.shards_path, self._set_taken, allow_session_lost=True)

    async def register(self) -> None:
        """Create our ephemeral member node (again, after a lost session)."""
        path = f"{self.members_path}/{self.member_id}"
        warned = False
        while True:
            try:
                await self._call(self.client.create, path, self.member_data, ephemeral=True)
                break
            except NodeExistsError:
                _, stat = await self._call(self.client.get, path)
                if stat.ephemeralOwner == self.client.client_id[0]:
                    break
                # A previous process with our id whose session has not expired yet (or, if it
                # never goes, a second live process started with the same --id).
                if not warned:
                    log.warning("member %s is registered by another session; waiting", path)
                    warned = True
                await asyncio.sleep(REGISTER_RETRY_S)
        self.registered = True
        self.changed.set()

    async def acquire(self, shard: int) -> bool:
        """Create the shard's node for us; False when someone else holds it."""
        try:
            await self._call(
                self.client.create, self.shard_path(shard), self.member_id.encode(), ephemeral=True
            )
        except NodeExistsError:
            return False
        return True

    async def release(self, shard: int) -> None:
        """Delete the shard's node if it is still ours (a later holder's node is left alone)."""
        path = self.shard_path(shard)
        session = self.client.client_id
        if session is None:
            return  # no session: our ephemeral nodes are gone (or go with it)
        try:
            stat = await self._call(self.client.exists, path)
            if stat is not None and stat.ephemeralOwner == session[0]:
                await self._call(self.client.delete, path, version=stat.version)
        except NoNodeError:
            pass

    async def close(self) -> None:
        """End the session: our ephemeral nodes vanish at once (no waiting for a timeout)."""
        await self._call(self.client.stop)
        await self._call(self.client.close)
