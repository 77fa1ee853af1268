"""Which logical shard owns a job: a stable hash of the job identity, fixed per deployment."""

from __future__ import annotations

import hashlib

from tickwheel.domain import job_key


def shard_of(tenant: str, job_id: str, shards: int) -> int:
    """Shard of `tenant/job_id` among `shards`: the same on every process, host and Python.

    blake2b rather than `hash()` (salted per process) or crc32 (weak spread on similar ids).
    """
    if shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    digest = hashlib.blake2b(job_key(tenant, job_id).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards
