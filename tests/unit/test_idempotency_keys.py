"""The Idempotency-Key an HTTP target receives from the job's `idempotency_key_template`
(issue 50): the template's rules, the key in the job's zone, and the registry's checks naming
the field (the worker's request: test_worker_targets.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tickwheel.idempotency_keys import TemplateError, parse, render
from tickwheel.registry_api.document import (
    JobValidationError,
    Limits,
    parse_document,
    run_target,
    validate_job,
)

pytestmark = pytest.mark.unit

NOW = 1_800_000_000_000  # 2027-01-15T08:00:00Z, a Friday
# 2027-03-28 01:30 UTC: 03:30 in Berlin (CEST), the first hour after the clocks went forward
DST_MS = 1_806_197_400_000


@pytest.mark.parametrize(
    ("template", "ms", "zone", "key"),
    [
        ("report-{scheduled:%G-W%V}", NOW, "UTC", "report-2027-W02"),
        ("{tenant}/{job}@{scheduled:%Y%m%dT%H%M}", NOW, "Europe/Berlin", "acme/inv@20270115T0900"),
        ("{job}-{scheduled}", NOW, "Asia/Kolkata", "inv-2027-01-15T13:30:00+05:30"),
        ("day-{scheduled:%Y-%m-%d}", DST_MS, "Europe/Berlin", "day-2027-03-28"),
        ("h{scheduled:%H%%}", DST_MS, "Europe/Berlin", "h03%"),
        ("{{literal}}-{job}", NOW, "UTC", "{literal}-inv"),
    ],
)
def test_a_key_is_the_template_filled_in_the_jobs_zone(
    template: str, ms: int, zone: str, key: str
) -> None:
    assert render(template, "acme", "inv", ms, zone) == key


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ("report-{week}", "unknown placeholder {week}"),
        ("report-{scheduled:%A}", "strftime field other than"),
        ("report-{scheduled:%}", "strftime field other than"),
        ("report-{scheduled:week}", "has no strftime field"),
        ("report-{job:%Y}", "{job} takes no format"),
        ("report-{job", "that no '}' closes"),
        ("report}-{job}", "lone '}'"),
        ("report {job}", "only visible ASCII"),
        ("rapport-é-{job}", "only visible ASCII"),
        ("report", "has no placeholder"),
        ("", "must be 1 to 200 characters"),
        ("x" * 190 + "{job}" * 3, "must be 1 to 200 characters"),
    ],
)
def test_a_bad_template_says_what_is_wrong(template: str, words: str) -> None:
    with pytest.raises(TemplateError) as caught:
        parse(template)
    assert words in str(caught.value)


def test_a_key_too_long_is_refused_when_rendered() -> None:
    """a template within its own limit can still make a key past 255 characters"""
    with pytest.raises(TemplateError, match="at most 255"):
        render("x" * 150 + "-{job}", "acme", "j" * 128, NOW, "UTC")


def _doc(**fields: Any) -> dict[str, Any]:
    return {
        "id": "inv",
        "schedule": "0 9 * * MON",
        "timezone": "Europe/Berlin",
        "target": {"url": "https://hooks.acme.test/jobs/x"},
        **fields,
    }


LIMITS = Limits(target_allowlist=("https://hooks.acme.test/jobs",))


def test_the_registry_stores_the_template_and_puts_its_rule_in_the_runs_target() -> None:
    """the document keeps the template as written; the target runs carry adds the rule with
    the job's zone (a job without a template keeps its target as it was)"""
    doc = parse_document(_doc(idempotency_key_template="r-{scheduled:%G-W%V}"))
    spec = validate_job("acme", doc, LIMITS, NOW)
    assert spec.stored_document["idempotency_key_template"] == "r-{scheduled:%G-W%V}"
    target = run_target(spec.document)
    assert target is not None
    rule = {"template": "r-{scheduled:%G-W%V}", "timezone": "Europe/Berlin"}
    assert target["idempotency_key"] == rule
    plain = validate_job("acme", parse_document(_doc()), LIMITS, NOW)
    plain_target = run_target(plain.document)
    assert plain_target is not None and "idempotency_key" not in plain_target
    assert "idempotency_key_template" not in plain.stored_document


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"idempotency_key_template": "r-{week}"}, "unknown placeholder {week}"),
        ({"idempotency_key_template": "x" * 95 + "{scheduled}" * 9}, "at most 255"),
        (
            {"idempotency_key_template": "r-{job}", "target": None, "handler": "h.run"},
            "applies to an HTTP target only",
        ),
        ({"idempotency_key_template": "r-\n{job}"}, "only visible ASCII"),
    ],
)
def test_a_bad_template_is_a_422_naming_the_field(fields: dict[str, Any], words: str) -> None:
    doc = _doc(**fields)
    if doc.get("target") is None:
        doc.pop("target")
    with pytest.raises(JobValidationError) as caught:
        validate_job("acme", parse_document(doc), LIMITS, NOW)
    problems = {p.field: p.message for p in caught.value.problems}
    assert words in problems["idempotency_key_template"], problems
