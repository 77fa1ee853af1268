"""The names the processes of one deployment agree on besides its topics (topics.py) and its
messages (envelopes.py): the workers' consumer group, the ZooKeeper folder, and what a
scheduler's member node holds.

A deployment is named by its topic prefix (`TICKWHEEL_TOPIC_PREFIX`). Writers and readers of
these names live in different areas — the scheduler registers its member node and the workers
join their group, while `tickwheel status` and the status page read both — so they are defined
here, in the ground every area imports, and no area reads another's code to find them.

ZooKeeper layout under `zk_root(prefix)` (shards/election.py keeps it):

    members/<id>   ephemeral, one per live scheduler process; data = `member_data(...)`
    shards/<n>     ephemeral, created by the process leading shard n; data = its id
"""

from __future__ import annotations

import orjson


def worker_group(topic_prefix: str) -> str:
    """The consumer group every worker of one deployment joins."""
    return f"{topic_prefix}.workers"


def zk_root(topic_prefix: str) -> str:
    """The ZooKeeper folder of one deployment."""
    return f"/tickwheel/{topic_prefix}"


def member_data(member_id: str, metrics_address: str | None) -> bytes:
    """What a member node holds: its id and where its metrics are served (or null)."""
    return orjson.dumps({"id": member_id, "metrics": metrics_address})


def parse_member_data(member_id: str, data: bytes) -> str | None:
    """The metrics address a member node advertises; None when it has none (or is unreadable)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None  # a node written by an older scheduler held just its id
    address = value.get("metrics") if isinstance(value, dict) else None
    return address if isinstance(address, str) else None
