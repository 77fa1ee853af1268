"""The DST round's own zone: a TZif file that falls back during a round, read by tickwheel
through PYTHONTZPATH, and the harness's independent oracle of which runs each policy allows."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zoneinfo
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tickwheel.bench.chaos.zones import (
    Fold,
    allowed_fires,
    fold_zone,
    utc_zone,
    write_zone,
    zone_name,
)
from tickwheel.clock import format_seconds

pytestmark = pytest.mark.unit

AT = 1_800_000_000_000  # a whole second; 2027-01-15T08:00:00Z
FOLD_S = 12


def test_the_zone_repeats_fold_seconds_of_wall_time_at_its_instant() -> None:
    """UTC+12 s before the instant, UTC after: the wall times of [at, at+12 s) happen twice,
    the second copy with fold=1; the placeholder is UTC throughout"""
    zone = zoneinfo.ZoneInfo.from_file(io.BytesIO(fold_zone(AT, FOLD_S)), key="X")
    before = datetime.fromtimestamp(AT / 1000 - 12, UTC).astimezone(zone)
    after = datetime.fromtimestamp(AT / 1000, UTC).astimezone(zone)
    assert before.replace(tzinfo=None) == after.replace(tzinfo=None)
    assert (before.fold, after.fold) == (0, 1)
    assert before.utcoffset() is not None and before.utcoffset().total_seconds() == FOLD_S
    plain = zoneinfo.ZoneInfo.from_file(io.BytesIO(utc_zone()), key="U")
    assert datetime(2027, 1, 15, tzinfo=plain).utcoffset().total_seconds() == 0


def test_the_oracle_keeps_one_copy_per_policy() -> None:
    """`first` keeps the first copy of each repeated wall second, `last` the second, `both`
    both; wall seconds outside the fold fire once"""
    fold = Fold(AT, FOLD_S)
    instants = range(AT - 20_000, AT + 20_000, 1000)
    first = allowed_fires(fold, 8, 0, "first", instants)
    last = allowed_fires(fold, 8, 0, "last", instants)
    both = allowed_fires(fold, 8, 0, "both", instants)
    assert len(both) == len(first) + FOLD_S == len(last) + FOLD_S
    assert AT - 1000 in first and AT - 1000 not in last
    assert AT in last and AT not in first
    assert AT + 13_000 in first and AT + 13_000 in last  # past the fold: once, in both
    assert AT - 13_000 not in both  # wall 07:59:59: another minute


@pytest.mark.parametrize("policy", ["first", "last", "both"])
def test_tickwheel_reads_the_zone_from_pythontzpath_and_agrees_with_the_oracle(
    tmp_path: Path, policy: str
) -> None:
    """`tickwheel cron next` in a child process whose PYTHONTZPATH starts with the harness's
    zone folder fires exactly where the oracle says, for each overlap policy"""
    write_zone(tmp_path, zone_name(1), fold_zone(AT, FOLD_S))
    env = {**os.environ, "PYTHONTZPATH": os.pathsep.join([str(tmp_path), *zoneinfo.TZPATH])}
    tickwheel = str(Path(sys.executable).parent / "tickwheel")
    after = AT - 30_000
    out = subprocess.run(
        [
            tickwheel,
            "cron",
            "next",
            "* 0 8 * * *",
            "--tz",
            zone_name(1),
            "--after",
            format_seconds(after),
            "--count",
            "40",
            "--dst-overlap",
            policy,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    seen = out.stdout.split()
    oracle = allowed_fires(Fold(AT, FOLD_S), 8, 0, policy, range(after + 1000, AT + 60_000, 1000))
    assert seen == [format_seconds(ms) for ms in oracle[:40]]
