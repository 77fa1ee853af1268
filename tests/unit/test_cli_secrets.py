"""No password of a DSN reaches a command's output, whatever the DSN's form, and a DSN no
client can use is a bad setting (exit 2), never a traceback (issue 28, finding 7 and a low
finding). The services sit at closed ports, as when they are down."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tickwheel.cli import main

pytestmark = pytest.mark.unit

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")
SECRET = "Sekrit-4711"
CLOSED = "127.0.0.1:1"
# Each form a password can take in a DSN, every one pointing at a closed port.
REACHABLE_FORMS = {
    "userinfo": f"postgresql://app:{SECRET}@{CLOSED}/tickwheel",
    "query": f"postgresql://app@{CLOSED}/tickwheel?password={SECRET}",
    "query-sslpassword": f"postgresql://app@{CLOSED}/tickwheel?sslpassword={SECRET}",
    "multi-host": f"postgresql://app:{SECRET}@{CLOSED},127.0.0.1:2/tickwheel",
}
UNUSABLE_FORMS = {
    "keyword-value": f"host=127.0.0.1 port=1 user=app password={SECRET} dbname=tickwheel",
    "bad-port": f"postgresql://app:{SECRET}@127.0.0.1:notaport/tickwheel",
    "bad-ipv6": f"postgresql://app:{SECRET}@[::1/tickwheel",
    # Readable as a URL, refused by the Postgres client itself when it connects.
    "bad-parameter": f"postgresql://app:{SECRET}@{CLOSED}/tickwheel?sslmode=sometimes",
}
COMMANDS = [
    ["runs", "ls"],
    ["jobs", "ls"],
    ["dlq", "audit"],
    ["tenant", "add", "acme"],
    ["operator-key", "add", "ops"],
    ["db", "migrate"],
    ["gc"],
]


def _env(dsn: str) -> dict[str, str]:
    return {
        "TICKWHEEL_DSN": dsn,
        "TICKWHEEL_KAFKA": CLOSED,
        "TICKWHEEL_ZK": CLOSED,
        "TICKWHEEL_OPS_KAFKA_TIMEOUT_S": "0.5",
        "TICKWHEEL_CONFIG": "",
    }


@pytest.mark.parametrize("form", [*REACHABLE_FORMS, *UNUSABLE_FORMS])
@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_no_command_prints_a_dsn_password(form: str, args: list[str]) -> None:
    """issue 28 finding 7: runs ls, jobs ls, dlq audit, tenant add, operator-key add, db
    migrate, status (text and --json) and gc, with Postgres down, print the DSN redacted in
    every form; a DSN no client can use exits 2 (bad setting), an unreachable one 1, neither
    with a traceback"""
    _check(args, form, 2 if form in UNUSABLE_FORMS else 1)


@pytest.mark.parametrize(
    ("args", "form"),
    [
        (["status"], "query"),
        (["status", "--json"], "multi-host"),
        (["status", "--json"], "bad-parameter"),
        (["status"], "keyword-value"),
    ],
)
def test_status_prints_no_dsn_password(args: list[str], form: str) -> None:
    """issue 28 finding 7: `tickwheel status` and `--json` name Postgres with its DSN
    redacted; a source that cannot be read is exit 1 (its contract), a DSN the settings refuse
    exit 2 (few cases: each waits about 5 s for ZooKeeper to refuse)"""
    _check(args, form, 2 if form in UNUSABLE_FORMS and form != "bad-parameter" else 1)


def _check(args: list[str], form: str, code: int) -> None:
    dsn = {**REACHABLE_FORMS, **UNUSABLE_FORMS}[form]
    result = CliRunner().invoke(main, args, env=_env(dsn))
    assert SECRET not in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == code, result.output


@pytest.mark.parametrize("form", ["query", "multi-host", "keyword-value", "bad-parameter"])
@pytest.mark.parametrize(
    "args",
    [["registry", "--no-intake", "--port", "0"], ["worker", "--handlers", "json"], ["scheduler"]],
    ids=lambda a: a[0],
)
def test_a_process_that_cannot_start_prints_no_dsn_password(form: str, args: list[str]) -> None:
    """issue 28 finding 7: the start-up error of the registry, a worker and a scheduler (the
    real command, Postgres down) redacts the DSN in every form, in one line"""
    dsn = {**REACHABLE_FORMS, **UNUSABLE_FORMS}[form]
    done = subprocess.run(
        [TICKWHEEL, *args],
        env={**os.environ, **_env(dsn)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = done.stdout + done.stderr
    assert SECRET not in output
    assert "Traceback" not in output
    assert done.returncode == (2 if form in UNUSABLE_FORMS else 1), output
    assert done.stderr.strip().startswith("tickwheel: "), output
