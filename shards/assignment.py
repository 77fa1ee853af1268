"""Which live scheduler process should lead which shard: a pure, deterministic function.

Every process computes the same answer from the same member list (the ephemeral member nodes in
ZooKeeper), so nobody negotiates: a process contends only for the shards assigned to it and
gives up the others. The rule is rendezvous (highest-random-weight) hashing with a capacity of
⌈shards / members⌉ per member:

    for each shard, rank the members by a stable hash of (shard, member);
    walk the shards in order and give each to its best-ranked member that is not yet full.

So the load is balanced (no member leads more than ⌈shards/members⌉) and stable: a member
joining or leaving moves about shards/members shards, not all of them, because every other
shard keeps its best-ranked member whenever that member still has room.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def _weight(shard: int, member: str) -> int:
    digest = hashlib.blake2b(f"{shard}:{member}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def capacity(shards: int, members: int) -> int:
    """The most shards one member leads at steady state: ⌈shards / members⌉."""
    return -(-shards // members)


def assign(shards: int, members: Iterable[str]) -> dict[str, frozenset[int]]:
    """Shard ids per member (every member present, possibly with none); no members: empty."""
    names = sorted(set(members))
    if shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    if not names:
        return {}
    room = capacity(shards, len(names))
    owned: dict[str, set[int]] = {name: set() for name in names}
    for shard in range(shards):
        ranked = sorted(names, key=lambda name: (-_weight(shard, name), name))
        for name in ranked:
            if len(owned[name]) < room:
                owned[name].add(shard)
                break
    return {name: frozenset(ids) for name, ids in owned.items()}
