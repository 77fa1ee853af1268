"""Bad input to the operators' commands is exit 2 before any service is reached (issue 28,
lows): the services sit at closed ports, so an answer of 1 would mean the command tried to
connect before it checked what it was given."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tickwheel.cli import main

pytestmark = pytest.mark.unit

CLOSED = "127.0.0.1:1"
ENV = {
    "TICKWHEEL_DSN": f"postgresql://nobody@{CLOSED}/nothing",
    "TICKWHEEL_KAFKA": CLOSED,
    "TICKWHEEL_ZK": CLOSED,
    "TICKWHEEL_CONFIG": "",
}
BACKFILL = ["jobs", "backfill", "acme/nightly"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["jobs", "trigger", "acme/nightly", "--idempotency-key", "k" * 256], "--idempotency-key"),
        (["jobs", "trigger", "acme/nightly", "--idempotency-key", "a\tb"], "--idempotency-key"),
        (["jobs", "show", "acme/night\x00ly"], "job id must match"),
        (["jobs", "pause", "ac me/nightly"], "tenant must match"),
        (["jobs", "trigger", "nightly", "--tenant", "a\x00"], "tenant must match"),
        (["tenant", "add", "a/b"], "name: must match"),
        (["calendars", "ls", "--tenant", "a\x00"], "tenant must match"),
        (["calendars", "show", ".hidden", "--tenant", "acme"], "'.hidden' is not a calendar"),
        (["calendars", "rm", "a/b", "--tenant", "acme"], "'a/b' is not a calendar name"),
        (["calendars", "put", "h", "--tenant", "acme"], "stdin is not JSON"),
        (["tenant", "cap", "acme", "--max-running", "0"], "--max-running: must be"),
        (["tenant", "cap", "acme", "--max-running", "lots"], "--max-running: must be"),
        (["tenant", "cap", "acme", "--max-running", "1000001"], "--max-running: must be"),
        (["operator-key", "add", "no spaces!"], "name: must match"),
        (["operator-key", "revoke", "x" * 65], "name: must match"),
        ([*BACKFILL, "--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z"], "--to:"),
        ([*BACKFILL, "--from", "2999-01-01T00:00:00Z", "--to", "2999-01-02T00:00:00Z"], "future"),
    ],
)
def test_bad_input_exits_2_before_connecting(args: list[str], words: str) -> None:
    """an idempotency key out of form (no length limit before), a tenant, job id or operator
    name the ledger cannot hold, a backfill range that arithmetic refuses: exit 2 naming it,
    with every service down (several were exit 1, the connection tried first)"""
    result = CliRunner().invoke(main, args, env=ENV)
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["worker"], {"TICKWHEEL_WORKER_HIGH_RESERVED_SLOTS": "256"}, "HIGH_RESERVED_SLOTS (256)"),
        (
            ["worker", "--concurrency", "4"],
            {"TICKWHEEL_WORKER_HIGH_RESERVED_SLOTS": "8"},
            "concurrency (4)",
        ),
        (["tenant", "quota", "acme", "--max-jobs", "-1"], {}, "--max-jobs: must be an integer"),
        (["tenant", "quota", "acme", "--max-jobs", "lots"], {}, "--max-jobs"),
        (
            ["tenant", "quota", "acme", "--max-registrations-per-s", "0"],
            {},
            "from 0.001 to 1000000",
        ),
        (
            ["tenant", "quota", "acme", "--max-registrations-per-s", "1e308"],
            {},
            "from 0.001 to 1000000",
        ),
        (["tenant", "quota", "acme", "--max-jobs", "1e9"], {}, "an integer from 0 to 1000000000"),
        (["tenant", "quota", "acme", "--registrations-burst", "0"], {}, "from 1 to 1000000000"),
    ],
)
def test_limits_that_cannot_work_exit_2_before_connecting(
    args: list[str], env: dict[str, str], words: str
) -> None:
    """a worker whose high-priority reservation takes every slot (normal and low would never
    run: it started before), and a quota out of range: exit 2 in one sentence naming it"""
    result = CliRunner().invoke(main, args, env={**ENV, **env})
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert "Traceback" not in result.output
