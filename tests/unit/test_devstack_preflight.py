"""`tickwheel dev` names a missing prerequisite in one line instead of failing obscurely."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")


def _run_dev_up(tmp_path: Path, path_dirs: list[Path]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWHEEL_")}
    env["PATH"] = os.pathsep.join(str(p) for p in path_dirs)
    env["TICKWHEEL_DEVSTACK_DIR"] = str(tmp_path / "stack")
    return subprocess.run(
        [TICKWHEEL, "dev", "up"], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_missing_java_is_one_line(tmp_path: Path) -> None:
    """without java on PATH, `dev up` exits 1 with one stderr line naming java and the fix"""
    empty = tmp_path / "bin"
    empty.mkdir()
    out = _run_dev_up(tmp_path, [empty])
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "`java` not found" in lines[0] and "install" in lines[0]


@pytest.mark.skipif(shutil.which("java") is None, reason="needs java to get past the java check")
def test_missing_mvn_is_one_line(tmp_path: Path) -> None:
    """with java but no mvn and no resolved jars, `dev up` names mvn in one line"""
    only_java = tmp_path / "bin"
    only_java.mkdir()
    (only_java / "java").symlink_to(os.path.realpath(shutil.which("java") or ""))
    out = _run_dev_up(tmp_path, [only_java])
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "`mvn` not found" in lines[0]


def test_given_services_need_no_local_tools(tmp_path: Path) -> None:
    """with all three services given by the environment, no java/mvn/Postgres is required"""
    from tickwheel.config import load_settings
    from tickwheel.stack import DevStack

    s = load_settings(dsn="postgresql://u@h/db", kafka="h:9092", zk="h:2181", devstack_dir=tmp_path)
    stack = DevStack(s, echo=lambda _l: None)
    old = os.environ["PATH"]
    os.environ["PATH"] = str(tmp_path)
    try:
        stack.preflight()  # raises StackError if it looked for any tool
    finally:
        os.environ["PATH"] = old
    assert [line.split("=", 1)[0] for line in stack.env_lines()] == [
        "export TICKWHEEL_DSN",
        "export TICKWHEEL_KAFKA",
        "export TICKWHEEL_ZK",
    ]
