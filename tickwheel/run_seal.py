"""Sealed run envelopes: a leader vouches for what an envelope carries, so a worker need not
read the job's row again to know what to run.

A shard leader builds each envelope from the job's row as its claim read it, in the transaction
that created the run (I1), and adds a header `seal`: a keyed BLAKE2b MAC of the message value
under the cluster's run-seal key (`cluster_secrets`, made by migration 0013, read by schedulers
and workers at start). A worker whose key opens the seal runs the envelope's handler or target,
payload and timeout; its claim is then the run row's UPDATE alone (`worker_claim_sealed`). A
delivery without a valid seal — produced by anything but a leader of this deployment, or under
another key — is claimed as before (`worker_claim`), and what runs is the job's row as stored
now: a producer that can write to the run topics but cannot read the key runs nothing of its
own.

Only the value is sealed. The worker reads a run's identity, attempt and content from the value
alone; the `run_key` and `epoch` headers are for consumers that do not parse it. Replaying a
sealed envelope replays what a leader sent: its claim is fenced by attempt and status (I4) like
any delivery.

Pure: no I/O; the key is bytes handed in.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Any

SEAL_HEADER = "seal"
KEY_BYTES = 32
SEAL_BYTES = 16
_PERSON = b"tickwheel-run"  # domain separation: this key seals run envelopes and nothing else


class RunSeal:
    """Seals and opens run messages under one key (the BLAKE2b state keyed once and copied per
    message: a leader seals, and a worker opens, every run of a hot second)."""

    __slots__ = ("_keyed",)

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a run-seal key has {KEY_BYTES} bytes, not {len(key)}")
        self._keyed = hashlib.blake2b(digest_size=SEAL_BYTES, key=key, person=_PERSON)

    def seal(self, value: bytes) -> bytes:
        """The seal of a run message's value."""
        h = self._keyed.copy()
        h.update(value)
        return h.digest()

    def opens(self, value: bytes, headers: Sequence[tuple[str, Any]] | None) -> bool:
        """Whether the message's `seal` header is the seal of `value` (False without the header,
        or with several: a forger's extra header must not choose)."""
        if not headers:
            return False
        found = [v for k, v in headers if k == SEAL_HEADER]
        if len(found) != 1 or not isinstance(found[0], bytes):
            return False
        return hmac.compare_digest(found[0], self.seal(value))
