"""`tickwheel cron next`: UTC instants one per line; bad input exits 2 with one line on stderr."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from tickwheel.schedule.cli import cron

pytestmark = pytest.mark.unit

LINE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
TICKWHEEL = Path(sys.executable).parent / "tickwheel"  # the console script of this venv


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cron, ["next", *args])
    return result.exit_code, result.stdout, result.stderr


def test_prints_count_instants_strictly_after() -> None:
    """--count N prints N UTC instants after --after, one per line, in the fixed format."""
    code, out, err = _run("0 9 * * MON-FRI", "--tz", "Europe/Berlin",
                          "--after", "2026-03-27T08:00:00Z", "--count", "3")  # fmt: skip
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "2026-03-30T07:00:00Z",
        "2026-03-31T07:00:00Z",
        "2026-04-01T07:00:00Z",
    ]


def test_after_is_exclusive() -> None:
    """An --after that is itself a fire time is not printed."""
    _, out, _ = _run("0 * * * *", "--after", "2026-01-01T10:00:00Z", "--count", "1")
    assert out == "2026-01-01T11:00:00Z\n"


def test_defaults_are_utc_now_and_five() -> None:
    """Without options: five instants in UTC, all after the moment of the call."""
    before = datetime.now(UTC).replace(microsecond=0)
    code, out, _ = _run("* * * * * *")
    lines = out.splitlines()
    assert code == 0
    assert len(lines) == 5
    assert all(LINE.match(line) for line in lines)
    assert datetime.strptime(lines[0], "%Y-%m-%dT%H:%M:%S%z") > before


def test_key_and_dst_policies_are_passed_through() -> None:
    """--key resolves H; --dst-overlap both fires twice in Berlin's repeated hour."""
    code, out, _ = _run("H 2 * * *", "--key", "acme/nightly", "--tz", "Europe/Berlin",
                        "--after", "2024-10-26T12:00:00Z", "--count", "2",
                        "--dst-overlap", "both")  # fmt: skip
    assert code == 0
    assert out.splitlines() == ["2024-10-27T00:15:00Z", "2024-10-27T01:15:00Z"]
    _, skipped, _ = _run("30 2 * * *", "--tz", "Europe/Berlin", "--dst-gap", "skip",
                         "--after", "2024-03-30T12:00:00Z", "--count", "1")  # fmt: skip
    assert skipped == "2024-04-01T00:30:00Z\n"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["0 25 * * *"], "invalid EXPR: schedule '0 25 * * *': the hour field '25'"),
        (["0 0 * *"], "invalid EXPR: schedule '0 0 * *' has 4 fields"),
        (["H * * * *"], "needs the job key"),
        (["0 0 * * *", "--tz", "Mars/Base"], "invalid --tz: timezone 'Mars/Base'"),
        (["0 0 * * *", "--after", "2026-01-01T00:00:00"], "invalid --after: after"),
        (["0 0 * * *", "--after", "yesterday"], "is not an ISO-8601 instant"),
        (["0 0 * * *", "--count", "0"], "Invalid value for '--count'"),
        (["0 0 * * *", "--count", "many"], "Invalid value for '--count'"),
        (["0 0 * * *", "--count", "100000001"], "Invalid value for '--count'"),
        (["* * * * *", "--after", "0001-01-01T00:00:00+01:00"], "must lie between the years"),
        (["0 0 * * *", "--dst-gap", "forward"], "Invalid value for '--dst-gap'"),
        (["0 0 * * *", "--dst-overlap", "twice"], "Invalid value for '--dst-overlap'"),
        ([], "Missing argument 'EXPR'"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], fragment: str) -> None:
    """Every kind of bad input: exit code 2, nothing on stdout, one 'Error:' line on stderr."""
    code, out, err = _run(*args)
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith("Error: ")
    assert fragment in err


def test_real_executable_exits_2_with_one_line_and_no_traceback() -> None:
    """The installed `tickwheel cron next` reports a bad zone as one line and exit code 2."""
    done = subprocess.run(
        [str(TICKWHEEL), "cron", "next", "0 9 * * *", "--tz", "Mars/Olympus_Mons"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
    assert "invalid --tz: timezone 'Mars/Olympus_Mons'" in done.stderr
