"""A wheel built from the tracked files builds quietly, ships every file, and runs on its own.

Marked `unit` because it needs no service; it does spawn pip (a few seconds in all). It
downloads nothing: the build uses this environment's setuptools (`--no-build-isolation`, hence
`setuptools` in the dev extras), and the scratch environment borrows this one's installed
dependencies through a `.pth` line while tickwheel itself comes only from the wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import tickwheel

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
# Source folder → where its files land in the wheel (pyproject.toml's package-dir).
PACKAGE_FOLDERS = {
    "tickwheel": "tickwheel",
    "wheel": "tickwheel/wheel",
    "shards": "tickwheel/shards",
    "workers": "tickwheel/workers",
    "registry_api": "tickwheel/registry_api",
    "bench": "tickwheel/bench",
}
PIP = (sys.executable, "-m", "pip", "--disable-pip-version-check")
PIP_TIMEOUT_S = 120


@dataclass(frozen=True)
class Built:
    wheel: Path
    output: str  # everything pip and the build backend printed


def _tracked() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (REPO / name).is_file()]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The wheel of a copy of the tracked files: what a fresh clone would build."""
    root = tmp_path_factory.mktemp("wheel-build")
    source, dist = root / "source", root / "dist"
    for name in _tracked():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    out = subprocess.run(
        [
            *PIP,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(dist),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = dist.glob("tickwheel-*.whl")
    return Built(wheel, out.stdout + out.stderr)


def test_wheel_build_prints_no_setuptools_warning(built: Built) -> None:
    """building the wheel draws no warning from setuptools (no 'Package would be ignored')"""
    assert "would be ignored" not in built.output
    assert "Warning" not in built.output, built.output


def test_wheel_ships_every_tracked_package_file(built: Built) -> None:
    """every tracked file of the package folders (SQL and poms included) is in the wheel"""
    with zipfile.ZipFile(built.wheel) as archive:
        shipped = set(archive.namelist())
    expected = set()
    for name in _tracked():
        folder, _, rest = name.partition("/")
        if folder in PACKAGE_FOLDERS and rest:
            expected.add(f"{PACKAGE_FOLDERS[folder]}/{rest}")
    assert "tickwheel/sql/migrations/0001_init.sql" in expected
    assert expected - shipped == set()
    assert {name.split("/", 1)[0] for name in shipped} == {
        "tickwheel",
        f"tickwheel-{tickwheel.__version__}.dist-info",
    }


def test_installed_wheel_runs_without_the_source_tree(built: Built, tmp_path: Path) -> None:
    """the installed wheel runs `tickwheel --version` and `tickwheel cron next` from elsewhere"""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # Dependencies from this environment. A directory named in a .pth file is only appended
    # to sys.path: its own .pth files (our editable install's finder) are not run.
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    Path(site, "borrowed-dependencies.pth").write_text("\n".join(ours) + "\n")
    subprocess.run(
        [
            *PIP,
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            str(built.wheel),
        ],
        check=True,
        timeout=PIP_TIMEOUT_S,
    )
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}

    def run(*argv: str) -> str:
        out = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    exe = str(venv / "bin" / "tickwheel")
    assert run(exe, "--version").strip() == f"tickwheel, version {tickwheel.__version__}"
    pinned = run(
        *(exe, "cron", "next", "0 9 * * *", "--tz", "UTC"),
        *("--after", "2026-01-01T00:00:00Z", "--count", "2"),
    )
    assert pinned.split() == ["2026-01-01T09:00:00Z", "2026-01-02T09:00:00Z"]
    where = run(
        str(python),
        "-c",
        "import tickwheel, tickwheel.db, tickwheel.wheel; "
        "print(tickwheel.__file__); print(tickwheel.wheel.__file__); "
        "print(len(tickwheel.db.migrations()))",
    ).split()
    assert all(Path(p).is_relative_to(site) for p in where[:2]), where
    assert int(where[2]) == len(list((REPO / "tickwheel/sql/migrations").glob("*.sql")))
