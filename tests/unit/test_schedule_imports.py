"""`tickwheel.schedule` stays pure schedule semantics: it imports nothing of the domain, the
wire, the messages or the client (explain.py included); the domain imports it. (That no ground
module imports an area is tests/unit/test_layout.py's.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2] / "tickwheel"


def _imports(package: str) -> dict[str, set[str]]:
    """Module file → every module it imports (absolute names)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[str(path.relative_to(ROOT.parent))] = names
    return found


# What imports the schedule package, directly or not: importing any of it would be a cycle.
ABOVE = ("tickwheel.domain", "tickwheel.wire", "tickwheel.envelopes", "tickwheel.client")


def test_the_schedule_package_imports_nothing_of_the_domain() -> None:
    """No module of tickwheel/schedule/ imports the domain, the wire, envelopes or the client."""
    found = {
        module: sorted(n for n in names if n.startswith(ABOVE))
        for module, names in _imports("schedule").items()
    }
    assert {m: n for m, n in found.items() if n} == {}
