"""A zone of the harness's own that falls back during a round, and which runs its DST jobs may
have: the `dst_failover` fault's ground truth.

A real fall-back hour comes once or twice a year and lasts an hour; a round lasts seconds. The
harness therefore writes TZif files (RFC 8536) of its own, `ChaosFold/R<n>`, into a folder that
every process it starts reads zones from first (`PYTHONTZPATH`): UTC+`fold_s` until the round's
instant `at_ms`, UTC from then on, so the wall times `[at, at + fold_s)` happen twice — a
fall-back of `fold_s` seconds instead of 3,600, the same rule (DESIGN §6) on a shorter fold.
Zone names are read once per process (`known_zone_names`), so each round's file exists, as
plain UTC, before the processes start, and gets its fold just before its round registers jobs.

The allowed occurrences come from this module, not from `tickwheel.schedule`: an oracle that
shares the scheduler's code would share its bugs (the broken build `dst_overlap_ignored`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ZONE_FOLDER = "ChaosFold"
MS = 1000


def zone_name(round_no: int) -> str:
    return f"{ZONE_FOLDER}/R{round_no}"


def tzif(transitions: list[tuple[int, int]], first_offset_s: int, footer: str) -> bytes:
    """A version-2 TZif file: `first_offset_s` before the first transition, then each
    (UTC second, offset after) in order; `footer` is the POSIX TZ rule after the last. Every
    type is standard time: readers take the first standard type for the instants before the
    first transition (zoneinfo does), and nothing here depends on the flag."""
    types: list[int] = [first_offset_s]
    for _at, offset in transitions:
        if offset not in types:
            types.append(offset)
    indices = bytes(types.index(offset) for _at, offset in transitions)
    names = [b"FLD\0" if offset else b"UTC\0" for offset in types]
    ttinfos = b"".join(struct.pack("!iBB", offset, 0, 4 * n) for n, offset in enumerate(types))

    def block(time_format: str) -> bytes:
        # isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt
        counts = (0, 0, 0, len(transitions), len(types), 4 * len(types))
        header = struct.pack("!4sc15x6I", b"TZif", b"2", *counts)
        times = b"".join(struct.pack(time_format, at) for at, _ in transitions)
        return header + times + indices + ttinfos + b"".join(names)

    return block("!i") + block("!q") + f"\n{footer}\n".encode()


def utc_zone() -> bytes:
    """A zone that is UTC at every instant: a round's placeholder until it gets its fold."""
    return tzif([], 0, "UTC0")


def fold_zone(at_ms: int, fold_s: int) -> bytes:
    """UTC+`fold_s` before `at_ms` (a whole second), UTC from it on."""
    return tzif([(at_ms // MS, 0)], fold_s, "UTC0")


@dataclass(frozen=True)
class Fold:
    """The fall-back of a round's zone: at `at_ms` the wall clock goes back `fold_s`."""

    at_ms: int
    fold_s: int

    def wall_ms(self, instant_ms: int) -> int:
        return instant_ms + (self.fold_s * MS if instant_ms < self.at_ms else 0)

    def copy(self, instant_ms: int) -> str | None:
        """Which copy of a repeated wall time `instant_ms` shows: "first", "second" or None."""
        if self.at_ms - self.fold_s * MS <= instant_ms < self.at_ms:
            return "first"
        if self.at_ms <= instant_ms < self.at_ms + self.fold_s * MS:
            return "second"
        return None


def allowed_fires(
    fold: Fold, hour: int, minute: int, overlap: str, instants: Iterable[int]
) -> list[int]:
    """Of `instants` (whole seconds, UTC ms), those at which the schedule `* minute hour * * *`
    in the fold's zone fires under `dst.overlap` `overlap` (DESIGN §6: `first` fires in the
    first copy of a repeated wall time only, `last` in the second, `both` in both)."""
    out = []
    for instant in instants:
        wall_s = fold.wall_ms(instant) // MS
        if (wall_s // 3600) % 24 != hour or (wall_s // 60) % 60 != minute:
            continue
        copy = fold.copy(instant)
        if (copy == "second" and overlap == "first") or (copy == "first" and overlap == "last"):
            continue
        out.append(instant)
    return out


def write_zone(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(".tmp")
    temp.write_bytes(data)
    temp.replace(path)  # a process never reads half a file
    return path
