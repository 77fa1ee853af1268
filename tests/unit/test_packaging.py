"""The distribution installs one import name, `tickwheel`, and shadows nothing."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def _top_level_names() -> set[str]:
    dist = md.distribution("tickwheel")
    names = set()
    for path in dist.files or []:
        first = path.parts[0]
        if first.endswith((".dist-info", ".pth")) or first.startswith("__editable__"):
            continue
        if first in {"..", "bin", "__pycache__"}:
            continue
        names.add(first.removesuffix(".py"))
    top_level = dist.read_text("top_level.txt")
    if top_level:
        names |= set(top_level.split())
    return names


def test_only_tickwheel_is_a_top_level_import_name() -> None:
    """the installed distribution declares no top-level import name but `tickwheel`"""
    assert _top_level_names() == {"tickwheel"}


def test_design_card_folders_are_tickwheel_subpackages() -> None:
    """wheel/, shards/, workers/, registry_api/, bench/ import as tickwheel.* from their own
    folders"""
    import tickwheel.bench
    import tickwheel.registry_api
    import tickwheel.shards
    import tickwheel.wheel
    import tickwheel.workers

    for module, folder in [
        (tickwheel.wheel, "wheel"),
        (tickwheel.shards, "shards"),
        (tickwheel.workers, "workers"),
        (tickwheel.registry_api, "registry_api"),
        (tickwheel.bench, "bench"),
    ]:
        assert Path(module.__file__ or "").resolve().parent == REPO / folder


def test_pypi_wheel_is_not_shadowed(tmp_path: Path) -> None:
    """`import wheel` in an installed environment gets PyPI's wheel, not our wheel/ folder"""
    probe = "import wheel, tickwheel.wheel; print(wheel.__file__); print(tickwheel.wheel.__file__)"
    out = subprocess.run(
        [sys.executable, "-P", "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    pypi_wheel, ours = out.stdout.split()
    assert "site-packages" in pypi_wheel
    assert not Path(pypi_wheel).resolve().is_relative_to(REPO / "wheel")
    assert Path(ours).resolve() == REPO / "wheel" / "__init__.py"


def test_console_script_is_installed() -> None:
    """the `tickwheel` console script runs and reports the package version"""
    import tickwheel

    exe = Path(sys.executable).parent / "tickwheel"
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    assert tickwheel.__version__ in out.stdout
