"""The test-only broken builds (tickwheel/broken.py): off unless named, each wired at one place."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tickwheel import broken
from tickwheel.queries import QUERIES

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
# Where each variant's hook lives (the table of tickwheel/broken.py's docstring).
HOMES = {
    broken.EPOCH_FENCE: "shards/store.py",
    broken.OFFSETS_BEFORE_RESULTS: "workers/fetch.py",
    broken.DST_OVERLAP_IGNORED: "tickwheel/schedule/cron.py",
    broken.CLAIM_IGNORES_LEASE: "workers/store.py",
    broken.SUSPECT_IGNORED: "workers/fetch.py",
    broken.RELEASE_UNMARKED: "workers/holdings.py",
    broken.CLAIM_IGNORES_VERSION: "shards/store.py",
}
CONSTANTS = {
    broken.EPOCH_FENCE: "EPOCH_FENCE",
    broken.OFFSETS_BEFORE_RESULTS: "OFFSETS_BEFORE_RESULTS",
    broken.DST_OVERLAP_IGNORED: "DST_OVERLAP_IGNORED",
    broken.CLAIM_IGNORES_LEASE: "CLAIM_IGNORES_LEASE",
    broken.SUSPECT_IGNORED: "SUSPECT_IGNORED",
    broken.RELEASE_UNMARKED: "RELEASE_UNMARKED",
    broken.CLAIM_IGNORES_VERSION: "CLAIM_IGNORES_VERSION",
}


def _armed_in_child(value: str | None, code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != broken.ENV}
    if value is not None:
        env[broken.ENV] = value
    out = subprocess.run(
        [sys.executable, "-c", f"from tickwheel import broken\n{code}"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_each_variant_has_exactly_one_hook_in_its_home_and_none_elsewhere() -> None:
    """every variant is switched at one statement of the module its docstring names"""
    assert set(HOMES) == broken.VARIANTS
    sources = [
        *REPO.glob("tickwheel/**/*.py"),
        *REPO.glob("shards/*.py"),
        *REPO.glob("workers/*.py"),
    ]
    sources += [*REPO.glob("wheel/*.py"), *REPO.glob("registry_api/**/*.py")]
    for variant, home in HOMES.items():
        needle = f"broken.{CONSTANTS[variant]}"
        found = {
            str(p.relative_to(REPO)): p.read_text().count(needle)
            for p in sources
            if p.name != "broken.py" and needle in p.read_text()
        }
        assert found == {home: 1}, (variant, found)


def test_no_variant_is_armed_unless_the_variable_names_it() -> None:
    """without TICKWHEEL_BROKEN every hook is off; with it, only the named variant"""
    check = "print(sorted(v for v in broken.VARIANTS if broken.on(v)))"
    assert _armed_in_child(None, check) == "[]"
    assert _armed_in_child("", check) == "[]"
    assert _armed_in_child(" epoch_fence ,", check) == "['epoch_fence']"


def test_the_broken_claim_runs_its_twin_query_only_when_armed() -> None:
    """the claim's query name is the twin's exactly while claim_ignores_lease is armed"""
    ask = "print(broken.query('worker_claim', broken.CLAIM_IGNORES_LEASE))"
    assert _armed_in_child(None, ask) == "worker_claim"
    assert _armed_in_child("claim_ignores_lease", ask) == "broken_worker_claim_ignores_lease"
    assert "broken_worker_claim_ignores_lease" in QUERIES
    assert "OR r.status = 'running'" in QUERIES["broken_worker_claim_ignores_lease"]


def test_unknown_names_are_reported() -> None:
    """a name that is no variant is listed, so a harness can refuse it"""
    assert broken.unknown(broken.parse("epoch_fence,fence_epoch")) == ["fence_epoch"]
    assert broken.unknown(broken.parse(",".join(sorted(broken.VARIANTS)))) == []
