"""The order in which a leader claims what is due: fair between tenants (pure).

A tick can hold many tenants' entries. Claimed in the order the wheel hands them over, a
tenant with 100,000 runs due at 09:00 would go out ahead of every other tenant's 09:00 runs:
the leader claims and publishes in batches of `claim_batch`, and the workers consume each
partition in order, so a run published after the burst starts after it. `TenantQueue` holds
the due entries per tenant and takes each batch as equal shares of every tenant that has
entries waiting (the shares of tenants with fewer go to the others), tenants in the order they
first had entries due. Entries that come due while a burst is being dispatched join the queue
between batches (`ShardLeader._dispatch`), so a tenant whose runs come due during another's
burst is served in the next batch rather than after the burst.

Within a tenant the order is the wheel's (by due time). One tenant alone costs one slice per
batch; many tenants cost one slice per tenant per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar


class HasTenant(Protocol):
    @property
    def tenant(self) -> str: ...


E = TypeVar("E", bound=HasTenant)


class TenantQueue(Generic[E]):
    """Due entries by tenant; `take(n)` draws up to `n` of them in fair shares."""

    __slots__ = ("_entries", "_next", "_size")

    def __init__(self) -> None:
        # Per tenant, its entries and the index of the next one (a take is a slice). The dict's
        # order is the order of service: a tenant served and not emptied moves to the end, so
        # when there are more tenants than a batch has room for, each is reached in turn.
        self._entries: dict[str, list[E]] = {}
        self._next: dict[str, int] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, entries: Iterable[E]) -> None:
        by_tenant, nxt = self._entries, self._next
        added = 0
        for entry in entries:
            tenant = entry.tenant
            waiting = by_tenant.get(tenant)
            if waiting is None:
                by_tenant[tenant] = [entry]
                nxt[tenant] = 0
            else:
                waiting.append(entry)
            added += 1
        self._size += added

    def take(self, n: int, room: Callable[[str], int] | None = None) -> list[E]:
        """Up to `n` entries: every waiting tenant's share (shares left unused go to the
        others), and no more of a tenant than `room(tenant)` allows (the dispatch window,
        `window.py`); a tenant emptied leaves the queue, one served moves to the end of it,
        one without room keeps its place."""
        out: list[E] = []
        by_tenant, nxt = self._entries, self._next
        allowed = None if room is None else {t: room(t) for t in by_tenant}
        while len(out) < n:
            eligible = [t for t in by_tenant if allowed is None or allowed[t] > 0]
            if not eligible:
                break
            share = max(1, (n - len(out)) // len(eligible))
            for tenant in eligible:
                entries = by_tenant.pop(tenant)
                start = nxt.pop(tenant)
                cap = share if allowed is None else min(share, allowed[tenant])
                end = min(start + cap, start + n - len(out), len(entries))
                out.extend(entries[start:end])
                if allowed is not None:
                    allowed[tenant] -= end - start
                if end < len(entries):
                    by_tenant[tenant] = entries
                    nxt[tenant] = end
                if len(out) >= n:
                    break
        self._size -= len(out)
        return out

    def tenants(self) -> Iterable[str]:
        """The tenants with entries waiting."""
        return self._entries.keys()

    def ready(self, room: Callable[[str], int]) -> bool:
        """Some waiting tenant has room."""
        return any(room(t) > 0 for t in self._entries)
