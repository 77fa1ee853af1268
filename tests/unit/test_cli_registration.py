"""The command line registers every command without loading the harnesses' code, and the
harnesses' commands still run when named."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from tickwheel.cli import HARNESS_COMMANDS, harness_command, main

pytestmark = pytest.mark.unit

# In a fresh interpreter: run one command line, then name the harness modules it imported.
_LEAKS = (
    "import sys; from click.testing import CliRunner; from tickwheel.cli import main; "
    "result = CliRunner().invoke(main, {args!r}); assert result.exit_code == 0, result.output; "
    "print(sorted(m for m in sys.modules if m.startswith('tickwheel.bench')))"
)


@pytest.mark.parametrize("args", [["--help"], ["cron", "--help"], ["worker", "--help"]])
def test_no_command_but_a_harness_imports_harness_code(args: list[str]) -> None:
    """`tickwheel --help` and the other commands import no module of tickwheel.bench (whose
    handler module would register chaos.record, …)"""
    code = _LEAKS.format(args=args)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_root_help_lists_the_harness_commands() -> None:
    """bench and demo are in `tickwheel --help`, each with its line"""
    listing = CliRunner().invoke(main, ["--help"]).output
    for name, (_, _, line) in HARNESS_COMMANDS.items():
        assert name in listing and line.split(":")[0][:30] in " ".join(listing.split())


def test_harness_lines_of_the_root_help_are_the_commands_own() -> None:
    """the line `tickwheel --help` shows for bench and demo is the first line of their help"""
    for name, (_, _, line) in HARNESS_COMMANDS.items():
        own = " ".join((harness_command(name).help or "").split("\n\n")[0].split())
        assert line == own, name


def test_harness_commands_resolve_when_named() -> None:
    """`tickwheel bench --help` loads the harness and shows its commands, chaos among them"""
    result = CliRunner().invoke(main, ["bench", "--help"])
    assert result.exit_code == 0, result.output
    for command in ("hot-second", "steady", "chaos"):
        assert command in result.output
    assert "--duration" in CliRunner().invoke(main, ["demo", "--help"]).output


def test_db_retention_is_the_gc_command() -> None:
    """`tickwheel db retention` and `tickwheel gc` are one command (one implementation)"""
    db = main.commands["db"]
    assert isinstance(db, click.Group)
    assert db.commands["retention"] is main.commands["gc"]
