"""Job documents: one validation for HTTP and Kafka, every problem named by its field."""

from __future__ import annotations

from typing import Any

import pytest

from tickwheel.domain import PRIORITIES
from tickwheel.registry_api.document import (
    JSON_MAX_DEPTH,
    VERSION_MAX,
    JobDocument,
    JobValidationError,
    Limits,
    check_version,
    parse_document,
    storable_problems,
    validate_job,
)
from tickwheel.sharding import shard_of

pytestmark = pytest.mark.unit

NOW = 1_800_000_000_000
BASE: dict[str, Any] = {
    "id": "invoice-42",
    "schedule": "0 9 * * MON-FRI",
    "timezone": "Europe/Berlin",
    "handler": "billing.send_invoice",
}


DEFAULT_LIMITS = Limits()


def _problems(doc: dict[str, Any], limits: Limits = DEFAULT_LIMITS) -> dict[str, str]:
    with pytest.raises(JobValidationError) as caught:
        validate_job("acme", parse_document(doc), limits, NOW)
    return {p.field: p.message for p in caught.value.problems}


def test_defaults_are_filled_in() -> None:
    """a minimal document gets every default of DESIGN §7"""
    spec = validate_job("acme", parse_document(BASE), Limits(), NOW)
    doc = spec.stored_document
    assert doc["priority"] == "normal" and doc["max_attempts"] == 5
    assert doc["backoff"] == {"base_ms": 10_000, "cap_ms": 600_000}
    assert doc["misfire"] == {"policy": "run_once", "grace_ms": 60_000, "max_catchup": 10}
    assert doc["overlap"] == "allow" and doc["dst"] == {"gap": "shift", "overlap": "first"}
    assert spec.shard_id == shard_of("acme", "invoice-42", 64)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"colour": "red"}, "colour"),
        ({"id": "has space"}, "id"),
        ({"priority": "urgent"}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": "5"}, "max_attempts"),
        ({"backoff": {"base_ms": 10, "cap_ms": 5}}, "backoff.cap_ms"),
        ({"misfire": {"policy": "sometimes"}}, "misfire.policy"),
        ({"dst": {"gap": "wrap"}}, "dst.gap"),
        ({"overlap": "queue"}, "overlap"),
        ({"target": {"url": "https://x.test/", "extra": 1}}, "target.extra"),
        (
            {"target": {"url": "https://x.test/", "limit": {"rate_per_s": 0}}},
            "target.limit.rate_per_s",
        ),
        ({"target": {"url": "https://x.test/", "limit": {"burst": 2}}}, "target.limit.rate_per_s"),
        (
            {"target": {"url": "https://x.test/", "limit": {"rate_per_s": 5, "burst": 0}}},
            "target.limit.burst",
        ),
    ],
)
def test_shape_errors_name_the_field(change: dict[str, Any], field: str) -> None:
    """a badly shaped document names the field at fault"""
    with pytest.raises(JobValidationError) as caught:
        parse_document({**BASE, **change})
    assert field in {p.field for p in caught.value.problems}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schedule": "61 * * * *"}, "schedule"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"schedule": None, "at": "2027-01-01T09:00:00"}, "at"),
        ({"schedule": None}, "schedule"),
        ({"at": "2027-01-01T09:00:00Z"}, "schedule"),
        ({"handler": None}, "handler"),
        ({"target": {"url": "https://hooks.test/x"}}, "handler"),
    ],
)
def test_context_errors_name_the_field(change: dict[str, Any], field: str) -> None:
    """schedule, zone, instant and the exactly-one-of pairs are checked with a named field"""
    assert field in _problems({**BASE, **change})


def test_payload_limit() -> None:
    """a payload over the configured limit is refused with its size and the limit"""
    problems = _problems({**BASE, "payload": {"blob": "x" * 200}}, Limits(payload_limit_bytes=100))
    assert "limit is 100" in problems["payload"]


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://hooks.acme.test/jobs/run", True),
        ("https://hooks.acme.test/jobs", True),
        ("https://hooks.acme.test/jobsx", False),
        ("https://hooks.acme.test.evil.test/jobs/run", False),
        ("http://hooks.acme.test/jobs/run", False),
        ("https://hooks.acme.test:8443/jobs/run", False),
        ("https://other.test/", False),
    ],
)
def test_target_allowlist(url: str, allowed: bool) -> None:
    """targets must share scheme, host and port with an entry and lie below its path"""
    limits = Limits(target_allowlist=("https://hooks.acme.test/jobs",))
    doc = {**BASE, "handler": None, "target": {"url": url}}
    if allowed:
        validate_job("acme", parse_document(doc), limits, NOW)
    else:
        assert "target.url" in _problems(doc, limits)


def test_target_url_is_stored_normalised_and_headers_checked() -> None:
    """the stored URL is the normalised one; a Host header or CRLF in a value is refused"""
    limits = Limits(target_allowlist=("https://hooks.acme.test/jobs",))
    doc = {**BASE, "handler": None, "target": {"url": "HTTPS://Hooks.ACME.test:443/jobs/run"}}
    spec = validate_job("acme", parse_document(doc), limits, NOW)
    assert spec.stored_document["target"]["url"] == "https://hooks.acme.test/jobs/run"
    for headers, field in [
        ({"Host": "admin.internal"}, "target.headers.Host"),
        ({"X-A": "1\r\nX-B: 2"}, "target.headers.X-A"),
    ]:
        target = {"url": "https://hooks.acme.test/jobs/run", "headers": headers}
        assert field in _problems({**BASE, "handler": None, "target": target}, limits)
    credentials = {"url": "https://u:p@hooks.acme.test/jobs/run"}
    problems = _problems({**BASE, "handler": None, "target": credentials}, limits)
    assert "credentials" in problems["target.url"]


@pytest.mark.parametrize("version", [None, 1, 2, VERSION_MAX])
def test_versions_within_bounds_pass(version: int | None) -> None:
    """an absent version and integers from 1 to VERSION_MAX are accepted"""
    check_version(version)


@pytest.mark.parametrize("version", [0, -5, VERSION_MAX + 1, 2**63 - 1, 2**63, 10**40])
def test_versions_out_of_bounds_are_refused(version: int) -> None:
    """0, negatives and anything above VERSION_MAX are refused naming the field and range"""
    with pytest.raises(JobValidationError) as caught:
        check_version(version)
    [problem] = caught.value.problems
    assert problem.field == "version"
    assert f"from 1 to {VERSION_MAX}" in problem.message


def _nested(levels: int, inner: object) -> object:
    value = inner
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("inner", [[], {}, 1, "s", None], ids=repr)
def test_nesting_limit_is_exact_whatever_the_innermost_value(inner: object) -> None:
    """64 levels of containers pass and 65 are refused, however the innermost level ends"""
    # An empty container is itself a level: count the levels it adds.
    extra = 1 if isinstance(inner, (list, dict)) else 0
    assert storable_problems(_nested(JSON_MAX_DEPTH - extra, inner), "payload") == []
    [problem] = storable_problems(_nested(JSON_MAX_DEPTH + 1 - extra, inner), "payload")
    assert problem.field == "payload" + ".0" * JSON_MAX_DEPTH
    assert f"deeper than {JSON_MAX_DEPTH}" in problem.message


def test_one_off_in_the_past_keeps_its_instant() -> None:
    """a late one-off registration is kept (the misfire policy decides), not dropped"""
    spec = validate_job(
        "acme",
        parse_document({"id": "late", "at": "2020-01-01T00:00:00Z", "handler": "h.x"}),
        Limits(),
        NOW,
    )
    assert spec.first_run_at(NOW) == 1_577_836_800_000


def test_job_document_schema_spells_the_domain_values() -> None:
    """the job document's OpenAPI enums are the domain's values, as plain string literals"""
    schema = JobDocument.model_json_schema()
    assert schema["properties"]["priority"]["enum"] == list(PRIORITIES)
    assert schema["$defs"]["Misfire"]["properties"]["policy"]["enum"] == [
        "skip",
        "run_once",
        "run_all",
    ]


@pytest.mark.parametrize("job_id", [".", ".."])
def test_job_ids_that_are_dot_segments_are_refused(job_id: str) -> None:
    """issue 28 (low): ids '.' and '..' are refused (an HTTP client resolves them away, so
    /v1/jobs/.. could never address the job); other ids of dots are ordinary"""
    with pytest.raises(JobValidationError) as caught:
        parse_document({**BASE, "id": job_id})
    assert [(p.field, "must not be '.' or '..'" in p.message) for p in caught.value.problems] == [
        ("id", True)
    ]
    assert parse_document({**BASE, "id": "..."}).id == "..."
