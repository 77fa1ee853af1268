"""The names the processes of one deployment agree on besides its topics (topics.py) and its
messages (envelopes/): the workers' consumer group, the ZooKeeper folder, what a
scheduler's member node holds, and which deployment a database belongs to.

A deployment is named by its topic prefix (`TICKWHEEL_TOPIC_PREFIX`), and it owns its
database (docs/DECISIONS.md D-048): the database records the prefix it was migrated under
(migration 0014), and a scheduler, worker or registry of any other prefix refuses to start
(`ownership_problem`, checked by `tickwheel.db.check_deployment`) — epochs, claims and the run
ledger are the database's, so a process of another deployment would lead its shards and take
its runs. Writers and readers of
these names live in different areas — the scheduler registers its member node and the workers
join their group, while `tickwheel status` and the status page read both — so they are defined
here, in the ground every area imports, and no area reads another's code to find them.

ZooKeeper layout under `zk_root(prefix)` (shards/election.py keeps it):

    members/<id>   ephemeral, one per live scheduler process; data = `member_data(...)`
    shards/<n>     ephemeral, created by the process leading shard n; data = its id
"""

from __future__ import annotations

import re

import orjson

PREFIX_FORM = re.compile(r"[A-Za-z0-9._-]{1,100}")  # a topic prefix (config.py's pattern)
RENAME_COMMAND = "tickwheel db deployment rename"


class WrongDeployment(Exception):
    """A database that belongs to another deployment than the process's (or records none);
    the message is one sentence naming both prefixes and the fix."""


def ownership_problem(recorded: str | None, prefix: str, who: str) -> str | None:
    """Why `who`, configured with topic prefix `prefix`, must not use a database whose
    recorded deployment is `recorded` (None: none recorded); None when it may."""
    if recorded == prefix:
        return None
    if recorded is None:
        return (
            f"{who} cannot use this database: it records no deployment yet; run "
            f"`tickwheel db migrate` with TICKWHEEL_TOPIC_PREFIX={prefix} to record it as "
            f"deployment {prefix}'s"
        )
    return (
        f"{who} cannot use this database: it belongs to deployment {recorded!r} and this "
        f"process is configured for deployment {prefix!r} (TICKWHEEL_TOPIC_PREFIX); give "
        f"{prefix} a database of its own (TICKWHEEL_DSN), set TICKWHEEL_TOPIC_PREFIX={recorded}, "
        f"or stop {recorded}'s processes and run `{RENAME_COMMAND} --from {recorded} --to "
        f"{prefix}` to hand this database to {prefix}"
    )


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
