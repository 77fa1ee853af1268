"""The repository stands on its own: no tracked file points at anything outside the checkout."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
# Spelled in pieces so that this file does not match its own scan.
SHARED_FOLDER = "/".join(["..", "shared"])
OUTSIDE_PATH = "../" * 3 + "etc/hosts"
MARKDOWN_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# A relative path that climbs: `../x`, not part of a longer path such as `/hooks/../admin`.
CLIMBING_PATH = re.compile(r"(?<![\w/.])((?:\.\./)+[\w.-][\w./-]*)")
EXTERNAL = ("http://", "https://", "mailto:", "#")


def _tracked_text_files() -> dict[str, str]:
    """Every tracked file that is UTF-8 text, by its repository-relative path."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    texts = {}
    for name in filter(None, listed.split("\0")):
        path = REPO / name
        if not path.is_file():  # deleted in the worktree, not yet in the index
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            texts[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return texts


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a markdown file's headings (outside code fences)."""
    anchors, fenced = set(), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*)", line)):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors


def _escapes(source: str, target: str) -> bool:
    resolved = (REPO / source).parent.joinpath(target).resolve()
    return not resolved.is_relative_to(REPO)


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def test_the_scan_sees_the_repository() -> None:
    """the scan reads the tracked docs and code, so an empty listing cannot pass silently"""
    files = _tracked_text_files()
    assert {"README.md", "pyproject.toml", "tickwheel/domain.py"} <= set(files)


def test_no_tracked_file_names_the_shared_folder() -> None:
    """no tracked file refers to the shared folder beside the checkout"""
    hits = [
        f"{name}:{_line_of(text, m.start())}"
        for name, text in _tracked_text_files().items()
        for m in re.finditer(re.escape(SHARED_FOLDER), text)
    ]
    assert hits == [], f"references outside the repository: {hits}"


def test_markdown_links_stay_inside_the_repository_and_exist() -> None:
    """every relative markdown link resolves to a file (and heading) inside the checkout"""
    files = _tracked_text_files()
    bad = []
    for name, text in files.items():
        if not name.endswith(".md"):
            continue
        for m in MARKDOWN_LINK.finditer(text):
            target, _, anchor = m.group(1).partition("#")
            if not target or m.group(1).startswith(EXTERNAL):
                continue
            where = f"{name}:{_line_of(text, m.start())} → {m.group(1)}"
            path = (REPO / name).parent.joinpath(target)
            if target.startswith("/") or _escapes(name, target):
                bad.append(f"{where} (outside the repository)")
            elif not path.exists():
                bad.append(f"{where} (no such file)")
            elif anchor and anchor not in _anchors(path.read_text(encoding="utf-8")):
                bad.append(f"{where} (no such heading)")
    assert bad == [], "\n".join(bad)


def test_no_relative_path_climbs_out_of_the_repository() -> None:
    """no `../…` path in a tracked file, resolved from that file's folder, leaves the checkout"""
    bad = [
        f"{name}:{_line_of(text, m.start())} → {m.group(1)}"
        for name, text in _tracked_text_files().items()
        for m in CLIMBING_PATH.finditer(text)
        if _escapes(name, m.group(1))
    ]
    assert bad == [], "\n".join(bad)


def test_the_scans_catch_what_they_are_for(tmp_path: Path) -> None:
    """the patterns match an outside link, a climbing path and the shared folder's name"""
    sample = f"see [design]({SHARED_FOLDER}/DESIGN.md) and {OUTSIDE_PATH}"
    links = [m.group(1) for m in MARKDOWN_LINK.finditer(sample)]
    assert links == [f"{SHARED_FOLDER}/DESIGN.md"]
    assert _escapes("README.md", links[0])
    climbing = [m.group(1) for m in CLIMBING_PATH.finditer(sample)]
    assert f"{SHARED_FOLDER}/DESIGN.md" in climbing and OUTSIDE_PATH in climbing
    assert _escapes("docs/API.md", OUTSIDE_PATH)
    assert not [m.group(1) for m in CLIMBING_PATH.finditer("/hooks/../admin")]
    assert _anchors("# 5. Kafka: topics and envelopes\n```\n# not a heading\n```") == {
        "5-kafka-topics-and-envelopes"
    }


def test_design_references_name_sections_that_exist() -> None:
    """every "DESIGN §n" and "DESIGN In" cited in the tree exists in docs/DESIGN.md"""
    files = _tracked_text_files()
    design = files["docs/DESIGN.md"]
    sections = set(re.findall(r"^## (\d+)\. ", design, flags=re.MULTILINE))
    invariants = set(re.findall(r"^- \*\*(I\d+) — ", design, flags=re.MULTILINE))
    assert len(sections) >= 7 and len(invariants) >= 9
    bad = [
        f"{name}:{_line_of(text, m.start())} → {m.group(0)}"
        for name, text in files.items()
        for m in re.finditer(r"DESIGN (?:§(\d+)|(I\d+))", text)
        if (m.group(1) or m.group(2)) not in sections | invariants
    ]
    assert bad == [], "\n".join(bad)
