"""Jenkins-style `H` fields: a per-job spread that is stable across processes and versions.

`H` in a cron field stands for one value chosen by hashing the job identity ("tenant/job_id"),
so that a thousand jobs written `H H * * *` spread over the day instead of all firing at
midnight, and each job keeps its own slot run after run. The forms are those of Jenkins:

    H          one value in the field's hash range
    H(a-b)     one value in a..b
    H/n        every n-th value, starting at a hashed offset below n
    H(a-b)/n   every n-th value of a..b, starting at a hashed offset below a+n

The hash is SHA-256 of the key and the field name (never the built-in `hash()`, which is salted
per process), so the slot depends only on the job and the field: editing another field of the
expression does not move it.
"""

from __future__ import annotations

import hashlib
import re

from tickwheel.schedule.errors import ScheduleError

HASH_TOKEN = re.compile(r"^[hH](?:\((\d{1,4})-(\d{1,4})\))?(?:/(\d{1,4}))?$")
RANDOM_TOKEN = re.compile(r"^[rR](?:$|[(/])")


def stable_hash(key: str, salt: str) -> int:
    """A 64-bit integer from `key` and `salt`, identical on every machine and Python version."""
    digest = hashlib.sha256(f"{key}\x00{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def is_hash_token(token: str) -> bool:
    """Whether a comma-separated item of a cron field is an `H` form (well-formed or not)."""
    return token[:1] in ("h", "H")


def expand_hash_token(
    token: str,
    *,
    key: str,
    salt: str,
    field_name: str,
    field_low: int,
    field_high: int,
    hash_low: int,
    hash_high: int,
) -> list[int]:
    """The concrete values an `H` item stands for, for the job `key`.

    `field_low..field_high` bound explicit ranges `H(a-b)`; a bare `H` or `H/n` draws from
    `hash_low..hash_high`, which is narrower than the field for day-of-month (1-28, so that the
    job fires in every month) and for day-of-week (0-6, where 7 would only repeat Sunday).
    """
    match = HASH_TOKEN.match(token)
    if match is None:
        raise ScheduleError(
            "schedule",
            f"schedule: the {field_name} item {token!r} is not a valid H form; "
            "use H, H(a-b), H/n or H(a-b)/n.",
        )
    begin, end, step_text = match.groups()
    if begin is not None and end is not None:
        low, high = int(begin), int(end)
        if not field_low <= low <= high <= field_high:
            raise ScheduleError(
                "schedule",
                f"schedule: the {field_name} item {token!r} needs a range a-b with "
                f"{field_low} <= a <= b <= {field_high}.",
            )
    else:
        low, high = hash_low, hash_high
    span = high - low + 1
    hashed = stable_hash(key, salt)
    if step_text is None:
        return [low + hashed % span]
    step = int(step_text)
    if step < 1:
        raise ScheduleError(
            "schedule", f"schedule: the {field_name} item {token!r} needs a step n >= 1."
        )
    start = low + hashed % min(step, span)
    return list(range(start, high + 1, step))
