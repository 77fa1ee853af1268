"""The command line fuzzed with hypothesis: any arguments to any command that returns on its
own end with exit code 0, 1, 2 or 3 and one line of explanation, never a traceback. Service
addresses point at closed ports, so the commands that need a service fail as they would when it
is down."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwheel.cli import main

pytestmark = pytest.mark.unit

# Servers and commands that start or stop services run until stopped: not fuzzed here.
LONG_RUNNING = {"dev", "demo", "registry", "scheduler", "worker", "bench", "topics"}
# Options that make a command run until Ctrl-C: left out of the draw (`status --watch`
# refreshes forever by design; drawn, it hung the suite).
UNTIL_STOPPED = {("status",): {"--watch"}}
CLOSED = "127.0.0.1:1"
ENV = {
    "TICKWHEEL_DSN": f"postgresql://nobody@{CLOSED}/nothing",
    "TICKWHEEL_KAFKA": CLOSED,
    "TICKWHEEL_ZK": CLOSED,
    "TICKWHEEL_OPS_KAFKA_TIMEOUT_S": "0.5",
    "TICKWHEEL_CONFIG": "",
}


def _leaves(group: click.Group, path: list[str]) -> list[tuple[list[str], click.Command]]:
    found = []
    for name, command in sorted(group.commands.items()):
        if not path and name in LONG_RUNNING:
            continue
        if isinstance(command, click.Group):
            found.extend(_leaves(command, [*path, name]))
        else:
            found.append(([*path, name], command))
    return found


LEAVES = _leaves(main, [])
token = st.one_of(
    st.text(max_size=12),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["--", "-", "--help", "*/5 * * * *", "2026-13-40T25:00:00Z", "\x00", "é"]),
)


@st.composite
def invocations(draw: st.DrawFn) -> list[str]:
    path, command = draw(st.sampled_from(LEAVES))
    endless = UNTIL_STOPPED.get(tuple(path), set())
    options = [o for p in command.params for o in p.opts if o.startswith("-") and o not in endless]
    words = draw(st.lists(st.one_of(token, st.sampled_from(options or ["--x"])), max_size=6))
    return [*path, *words]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=invocations())
def test_no_arguments_make_a_traceback(args: list[str]) -> None:
    """exit code 0-3, SystemExit only, no traceback on any output"""
    result = CliRunner().invoke(main, args, env=ENV)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.output,
        result.exception,
    )
    assert result.exit_code in (0, 1, 2, 3), (args, result.output)
    assert "Traceback" not in result.output


def test_no_draw_runs_until_stopped() -> None:
    """the options left out of the draw because they run until Ctrl-C still exist under
    these names (a rename would bring the hang back)"""
    for path, flags in UNTIL_STOPPED.items():
        command = dict((tuple(p), c) for p, c in LEAVES)[path]
        assert flags <= {o for p in command.params for o in p.opts}


def test_every_fuzzed_command_is_reachable() -> None:
    """the fuzzed set covers the operator commands (a rename would silently shrink it)"""
    names = {" ".join(path) for path, _ in LEAVES}
    assert {"tenant add", "tenant revoke-key", "cron next", "runs ls", "dlq ls", "gc"} <= names
