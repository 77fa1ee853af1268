"""Deliberately broken builds, for one purpose: proving that the chaos checker would catch them
(docs/RELIABILITY.md, *The checker against broken builds*). A green chaos run means something
only if a red one is possible.

Each variant switches off one guarantee at one place, by a hook of one statement there, and only
while `TICKWHEEL_BROKEN` names it (a comma-separated list, read once when the process starts).
Unset — always, outside `tests/integration/test_chaos_broken.py` — every hook is a lookup in an
empty set. Nothing here imports anything of tickwheel, so any module may hold a hook.

    variant                 hook                                  what it breaks
    epoch_fence             shards/store.py `fenced`, `claim`     a leader's transaction (and
                                                                  its claim statement, fenced by
                                                                  itself) goes on whatever epoch
                                                                  and owner the shard's row
                                                                  holds (I2)
    offsets_before_results  workers/fetch.py `_receive`           a delivery's offset is marked
                                                                  done when it arrives, before
                                                                  its claim, its execution and
                                                                  its result write (I5)
    dst_overlap_ignored     tickwheel/schedule/cron.py            fixed-hour schedules fire in
                            `next_after`                          both copies of a repeated wall
                                                                  time, whatever `dst.overlap`
    claim_ignores_lease     workers/store.py `claim`              the worker's claim takes a run
                                                                  at its attempt even while it
                                                                  runs under another worker's
                                                                  live lease (I4; queries
                                                                  `broken_worker_claim_ignores_lease`
                                                                  and its sealed twin)
    suspect_ignored         workers/fetch.py `_receive`           every sealed delivery starts
                                                                  without a claim, a copy a
                                                                  leader sent again or one a
                                                                  partition's previous owner
                                                                  had too (I4)
    release_unmarked        workers/holdings.py `_release`        partitions taken away are let
                                                                  go without marking the runs
                                                                  in hand `running` (I4)
    claim_ignores_version   shards/store.py `claim_many`          a leader's claim matches each
                                                                  job at whatever version its
                                                                  row holds now, not the one its
                                                                  wheel loaded: an edited job's
                                                                  stale entry is claimed (I3)
"""

from __future__ import annotations

import os

ENV = "TICKWHEEL_BROKEN"
EPOCH_FENCE = "epoch_fence"
OFFSETS_BEFORE_RESULTS = "offsets_before_results"
DST_OVERLAP_IGNORED = "dst_overlap_ignored"
CLAIM_IGNORES_LEASE = "claim_ignores_lease"
SUSPECT_IGNORED = "suspect_ignored"
RELEASE_UNMARKED = "release_unmarked"
CLAIM_IGNORES_VERSION = "claim_ignores_version"
VARIANTS = frozenset(
    {
        EPOCH_FENCE,
        OFFSETS_BEFORE_RESULTS,
        DST_OVERLAP_IGNORED,
        CLAIM_IGNORES_LEASE,
        SUSPECT_IGNORED,
        RELEASE_UNMARKED,
        CLAIM_IGNORES_VERSION,
    }
)
# A variant whose hook swaps a query: the name of the broken twin in the same .sql file.
BROKEN_QUERIES = {
    ("worker_claim", CLAIM_IGNORES_LEASE): "broken_worker_claim_ignores_lease",
    ("worker_claim_sealed", CLAIM_IGNORES_LEASE): "broken_worker_claim_sealed_ignores_lease",
}


def parse(value: str) -> frozenset[str]:
    """The variant names of a `TICKWHEEL_BROKEN` value (blanks ignored)."""
    return frozenset(name.strip() for name in value.split(",") if name.strip())


def unknown(names: frozenset[str]) -> list[str]:
    """The names that are no variant, sorted: a harness refuses to start with any."""
    return sorted(names - VARIANTS)


_ARMED = parse(os.environ.get(ENV, ""))


def on(variant: str) -> bool:
    """Whether this process runs the broken variant `variant`."""
    return variant in _ARMED


def query(name: str, variant: str) -> str:
    """The query to run for `name`: its broken twin while `variant` is armed, else `name`."""
    return BROKEN_QUERIES[(name, variant)] if variant in _ARMED else name
