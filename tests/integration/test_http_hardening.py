"""The HTTP API's strict edges (issue 10): authentication before the body, UTF-8 JSON with
unique names, the exact nesting limit, and HTTP targets checked on the normalised URL."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from tickwheel.registry_api.document import JSON_MAX_DEPTH, Limits
from tickwheel.registry_api.http import create_app
from tickwheel.registry_api.store import RegistryStore

pytestmark = pytest.mark.integration

SHARDS = 64
ALLOWED = "https://hooks.example.test/tickwheel"


def _job(job_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": job_id, "schedule": "*/5 * * * *", "handler": "billing.send", **fields}


def _target_job(job_id: str, url: str = ALLOWED + "/run", **target: Any) -> dict[str, Any]:
    return {"id": job_id, "schedule": "*/5 * * * *", "target": {"url": url, **target}}


def _nested(levels: int, inner: Any) -> Any:
    for _ in range(levels):
        inner = [inner]
    return inner


@pytest.fixture
async def transport(db_dsn: str) -> AsyncIterator[tuple[httpx.ASGITransport, str]]:
    """The app over a real pool, and the API key of a fresh tenant."""
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=4)
    store = RegistryStore(pool, SHARDS)
    limits = Limits(target_allowlist=(ALLOWED,), shards=SHARDS)
    key = await store.create_tenant(f"h-{uuid.uuid4().hex[:12]}")
    yield httpx.ASGITransport(app=create_app(store, limits)), key
    await pool.close()


@pytest.fixture
async def client(
    transport: tuple[httpx.ASGITransport, str],
) -> AsyncIterator[httpx.AsyncClient]:
    app, key = transport
    async with httpx.AsyncClient(
        transport=app, base_url="http://registry.test", headers={"Authorization": f"Bearer {key}"}
    ) as authorised:
        yield authorised


def _fields(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "invalid_job"
    return {item["field"]: item["message"] for item in body["detail"]}


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/jobs"), ("PATCH", "/v1/jobs/some-job")])
@pytest.mark.parametrize("authorization", [None, "Bearer tw_not-a-key", "Basic abc"])
async def test_a_body_is_not_read_before_authentication(
    transport: tuple[httpx.ASGITransport, str],
    method: str,
    path: str,
    authorization: str | None,
) -> None:
    """malformed, UTF-16 or duplicate-key bodies from an unauthenticated client answer 401"""
    app, _ = transport
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    async with httpx.AsyncClient(transport=app, base_url="http://registry.test") as anonymous:
        for body in (b"{not json", '{"id": "x"}'.encode("utf-16"), b'{"id": "a", "id": "b"}'):
            response = await anonymous.request(method, path, content=body, headers=headers)
            assert response.status_code == 401, response.text
            assert response.json()["error"] == "unauthorized"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (json.dumps(_job("utf16")).encode("utf-16"), "UTF-16"),
        (json.dumps(_job("utf16le")).encode("utf-16-le"), "UTF-16 or UTF-32"),
        (json.dumps(_job("utf32")).encode("utf-32"), "UTF-32"),
        (json.dumps(_job("latin")).encode() + b"\xff", "not UTF-8"),
        (b'{"id": "dup", "id": "dup2", "schedule": "* * * * *", "handler": "a.b"}', "twice"),
        (b'{"id": "nan", "schedule": "* * * * *", "handler": "a.b", "payload": NaN}', "NaN"),
    ],
)
async def test_bodies_that_are_not_utf8_json_with_unique_names_are_422(
    client: httpx.AsyncClient, body: bytes, words: str
) -> None:
    """UTF-16/32, invalid UTF-8, duplicate names and NaN are refused as the body, storing nothing"""
    response = await client.post(
        "/v1/jobs", content=body, headers={"Content-Type": "application/json"}
    )
    assert words in _fields(response)[""]
    assert (await client.get("/v1/jobs")).json()["items"] == []


@pytest.mark.parametrize("inner", [[], 1], ids=["empty", "scalar"])
async def test_payload_nesting_limit_is_exact_over_http(
    client: httpx.AsyncClient, inner: Any
) -> None:
    """64 levels of payload are stored, 65 are refused, whatever the innermost value; PATCH
    counts the same way as POST"""
    extra = 1 if isinstance(inner, list) else 0
    deepest = _nested(JSON_MAX_DEPTH - extra, inner)
    too_deep = _nested(JSON_MAX_DEPTH + 1 - extra, inner)
    created = await client.post("/v1/jobs", json=_job("deep", payload=deepest))
    assert created.status_code == 201, created.text
    refused = _fields(await client.post("/v1/jobs", json=_job("deeper", payload=too_deep)))
    assert list(refused) == ["payload" + ".0" * JSON_MAX_DEPTH]
    patched = await client.patch("/v1/jobs/deep", json={"payload": deepest, "priority": "low"})
    assert patched.status_code == 200, patched.text
    refused = _fields(await client.patch("/v1/jobs/deep", json={"payload": too_deep}))
    assert list(refused) == ["payload" + ".0" * JSON_MAX_DEPTH]


ENDLESS = "9" * 4301  # one digit past the interpreter's limit on integer conversion


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        (
            "POST",
            "/v1/jobs",
            '{"id": "n", "schedule": "* * * * *", "handler": "a.b", "payload": {"n": %s}}',
            "payload.n",
        ),
        (
            "POST",
            "/v1/jobs",
            '{"id": "n", "schedule": "* * * * *", "max_attempts": %s}',
            "max_attempts",
        ),
        ("PATCH", "/v1/jobs/known", '{"payload": [0, %s]}', "payload.1"),
        ("POST", "/v1/jobs/known/backfill", '{"from": %s, "to": "2026-01-01T00:00:00Z"}', "from"),
    ],
    ids=["post-payload", "post-field", "patch", "backfill"],
)
async def test_an_integer_of_4301_digits_is_a_422_naming_its_field(
    client: httpx.AsyncClient, method: str, path: str, body: str, field: str
) -> None:
    """issue 28 finding 5: 4,301 digits anywhere in a body answers 422 naming the field (a 500
    with the interpreter's 'Exceeds the limit (4300 digits)' before), and changes nothing"""
    known = await client.post("/v1/jobs", json=_job("known"))
    assert known.status_code == 201, known.text
    response = await client.request(
        method, path, content=body % ENDLESS, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    problems = {item["field"]: item["message"] for item in response.json()["detail"]}
    assert "4,301 digits" in problems[field], problems
    stored = (await client.get("/v1/jobs")).json()["items"]
    assert [job["id"] for job in stored] == ["known"]
    assert stored[0]["payload"] == {}


@pytest.mark.parametrize(
    ("document", "field", "words"),
    [
        (
            _target_job("creds", "https://user:pw@hooks.example.test/tickwheel/x"),
            "target.url",
            "credentials",
        ),
        (_target_job("trav", ALLOWED + "/..%2fadmin"), "target.url", "encoded '/'"),
        (_target_job("trav2", ALLOWED + "/%2e%2e/admin"), "target.url", "'..'"),
        (_target_job("trav3", ALLOWED + "/..;/admin"), "target.url", "'..'"),
        (_target_job("crlf", ALLOWED + "/x\r\nHost: evil"), "target.url", "control characters"),
        (_target_job("host", headers={"Host": "admin.internal"}), "target.headers.Host", "may not"),
        (_target_job("hdr", headers={"X-A": "1\r\nX-B: 2"}), "target.headers.X-A", "no CR, LF"),
        (_target_job("name", headers={"X A": "1"}), "target.headers.X A", "header name"),
        (
            _target_job("many", headers={f"X-{i}": "v" for i in range(33)}),
            "target.headers",
            "at most 32",
        ),
        (_target_job("huge", headers={"X-Big": "v" * 9000}), "target.headers", "at most 8192"),
    ],
    ids=lambda v: v if isinstance(v, str) and " " not in v else None,
)
async def test_unsafe_targets_are_refused_naming_the_field(
    client: httpx.AsyncClient, document: dict[str, Any], field: str, words: str
) -> None:
    """credentials, encoded traversal, CR/LF, Host and hop-by-hop headers, too many or too large
    headers: 422 on the field, nothing stored"""
    problems = _fields(await client.post("/v1/jobs", json=document))
    assert words in problems[field], problems
    assert (await client.get("/v1/jobs")).json()["items"] == []


async def test_target_url_is_stored_and_echoed_normalised(client: httpx.AsyncClient) -> None:
    """the URL stored (and compared with the allowlist) is the normalised one"""
    document = _target_job("norm", "HTTPS://Hooks.Example.TEST:443/tickwheel/run")
    created = await client.post("/v1/jobs", json=document)
    assert created.status_code == 201, created.text
    assert created.json()["target"]["url"] == "https://hooks.example.test/tickwheel/run"
    again = await client.post("/v1/jobs", json=document)
    assert (again.status_code, again.json()["version"]) == (200, 1)


@pytest.mark.parametrize(
    "key", ["tab\tinside", "k" * 256, "caf\u00e9"], ids=["control", "256-chars", "latin-1"]
)
async def test_an_idempotency_key_out_of_form_is_a_422_and_starts_nothing(
    client: httpx.AsyncClient, key: str
) -> None:
    """issue 28 (low): the Idempotency-Key follows the one rule of every path (1 to 255
    printable ASCII characters): a control character, 256 characters or a non-ASCII one is a
    422 naming the header, and no run is started"""
    assert (await client.post("/v1/jobs", json=_job("idem"))).status_code == 201
    response = await client.post(
        "/v1/jobs/idem/trigger", headers={"Idempotency-Key": key.encode("latin-1")}
    )
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["field"] == "Idempotency-Key"
    assert "1 to 255 printable ASCII characters" in problem["message"]
    assert (await client.get("/v1/jobs/idem/runs")).json()["items"] == []


@pytest.mark.parametrize(
    ("path", "location"),
    [
        ("/v1/jobs/", "/v1/jobs"),
        ("/v1/jobs/?limit=5&cursor=x", "/v1/jobs?limit=5&cursor=x"),
        ("/v1/jobs/some.job/", "/v1/jobs/some.job"),
        ("/healthz/", "/healthz"),
    ],
)
async def test_the_trailing_slash_redirect_names_no_host(
    client: httpx.AsyncClient, path: str, location: str
) -> None:
    """issue 28 (low): the redirect of a trailing slash is the path alone, whatever Host the
    request named (it was built from the Host header: http://evil.example/v1/jobs)"""
    response = await client.get(path, headers={"Host": "evil.example"})
    assert response.status_code == 307
    assert response.headers["location"] == location


async def test_a_path_no_route_has_either_way_is_a_404(client: httpx.AsyncClient) -> None:
    """no route with or without the slash: the API's 404, no redirect"""
    for path in ("/v1/nothing/", "//evil.example/", "/v2/jobs"):
        response = await client.get(path, headers={"Host": "evil.example"})
        assert response.status_code == 404, (path, response.headers)
        assert "location" not in response.headers


async def test_the_api_docs_are_served_from_the_registry_alone(client: httpx.AsyncClient) -> None:
    """issue 28 (low): /docs names only paths of the registry (no CDN), each of which it
    serves, under a CSP allowing scripts from this origin only; /redoc (a CDN page) is gone"""
    import re

    page = await client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self';" in page.headers["content-security-policy"]
    links = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert links and not any("//" in link for link in links), links
    for link in links:
        asset = await client.get(f"/{link}")
        assert asset.status_code == 200, link
        assert asset.headers["content-type"].startswith(("text/javascript", "text/css"))
    bundle = await client.get("/docs/swagger-ui-bundle.js")
    assert b"SwaggerUIBundle" in bundle.content
    assert (await client.get("/docs/../pyproject.toml")).status_code == 404
    assert (await client.get("/docs/redoc.standalone.js")).status_code == 404
    assert (await client.get("/redoc")).status_code == 404
