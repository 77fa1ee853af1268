"""docs/prometheus/alerts.yml: valid rules (`promtool check rules`), each alert tested to fire
and to stay silent on synthetic series (`promtool test rules`), each with a runbook that exists.

promtool comes with Debian's `prometheus` package (.ci/run installs it). Without it these tests
skip on a developer's machine and fail in CI (CI=true), so CI can never pass them unrun."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

DOCS = Path(__file__).resolve().parents[2] / "docs"
RULES = DOCS / "prometheus" / "alerts.yml"
RULE_TESTS = DOCS / "prometheus" / "alerts.test.yml"


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing: .ci/run must install Debian's prometheus package")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_promtool(), *args],
        cwd=RULES.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_checks_the_rules() -> None:
    """`promtool check rules alerts.yml` accepts every rule."""
    done = _run("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in done.stdout


def test_promtool_unit_tests_pass() -> None:
    """`promtool test rules alerts.test.yml`: every expected alert fires with its labels and
    annotations, and no unexpected one does."""
    done = _run("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_tests_can_fail(tmp_path: Path) -> None:
    """The same tests against rules whose thresholds never trip fail: they test something."""
    blunted = re.sub(r"> (0\.05|0|1|2|1000)\b", "> 1e12", RULES.read_text())
    (tmp_path / "alerts.yml").write_text(blunted)
    (tmp_path / "alerts.test.yml").write_text(RULE_TESTS.read_text())
    done = subprocess.run(
        [_promtool(), "test", "rules", "alerts.test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "FAILED" in done.stdout + done.stderr


def test_every_alert_is_tested_firing_and_silent() -> None:
    """Each alert has a test case where it fires and one where it stays silent."""
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    cases = [case for test in tests for case in test["alert_rule_test"]]
    for alert in _alerts():
        name = alert["alert"]
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case["exp_alerts"] for case in mine), f"{name} is never tested firing"
        assert any(not case["exp_alerts"] for case in mine), f"{name} is never tested silent"


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_every_alert_links_a_runbook_that_exists() -> None:
    """Each alert's runbook_url names a section of docs/OPERATIONS.md, and has a summary."""
    anchors = _anchors((DOCS / "OPERATIONS.md").read_text())
    for alert in _alerts():
        url = alert["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == "docs/OPERATIONS.md", url
        assert anchor in anchors, f"{alert['alert']}: no section #{anchor} in OPERATIONS.md"
        assert alert["annotations"]["summary"]
