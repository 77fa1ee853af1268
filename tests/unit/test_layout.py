"""The floors of the layout (DESIGN §1, docs/ARCHITECTURE.md): the ground imports no area, the
areas import neither each other nor the harnesses, and the command line names the harnesses
without importing them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
AREAS = {"wheel": "wheel", "shards": "shards", "workers": "workers", "registry_api": "registry_api"}
HARNESSES = "bench"
# The ground's two documented exceptions: the composition root, the lazy handler re-export.
GROUND_MAY_IMPORT_AREAS = {"tickwheel/cli.py", "tickwheel/__init__.py"}
# The wheel is the leaders' data structure (DESIGN §1: a TimingWheel per shard), not a peer.
USES = {"shards": {"wheel"}}


def _imports(path: Path) -> set[str]:
    """Every `tickwheel.<part>` a module imports (at any depth: lazy imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "tickwheel" and len(parts) > 1:
                found.add(parts[1])
    return found


def _modules(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def test_the_scan_sees_the_folders() -> None:
    """every floor has modules, so an empty scan cannot pass"""
    for folder in ["tickwheel", HARNESSES, *AREAS.values()]:
        assert _modules(folder), folder


def test_the_ground_imports_no_area_and_no_harness() -> None:
    """no module of tickwheel/ imports wheel, shards, workers, registry_api or bench, but the
    CLI's composition root and the lazy handler re-export (which import areas only)"""
    found = []
    for path in _modules("tickwheel"):
        name = str(path.relative_to(REPO))
        above = _imports(path) & {*AREAS, HARNESSES}
        if name in GROUND_MAY_IMPORT_AREAS:
            above &= {HARNESSES}
        if above:
            found.append(f"{name}: {sorted(above)}")
    assert found == []


def test_areas_import_no_other_area_and_no_harness() -> None:
    """wheel/, shards/, workers/, registry_api/ each import only themselves and the ground
    (and shards/ the wheel it keeps per shard)"""
    found = []
    for area, folder in AREAS.items():
        for path in _modules(folder):
            others = _imports(path) & ({*AREAS, HARNESSES} - {area} - USES.get(area, set()))
            if others:
                found.append(f"{path.relative_to(REPO)}: {sorted(others)}")
    assert found == []
