"""The registry HTTP API's contract (docs/API.md) against a real Postgres.

Each test talks to `create_app` through httpx's ASGI transport, with a real asyncpg pool on the
module's database and tenants of uuid-unique names, so tests never see each other's jobs.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from tickwheel.registry_api.cursors import encode_cursor
from tickwheel.registry_api.document import Limits
from tickwheel.registry_api.http import create_app
from tickwheel.registry_api.state import Op
from tickwheel.registry_api.store import Applied, RegistryStore

pytestmark = pytest.mark.integration

SHARDS = 64
PAYLOAD_LIMIT = 2048  # bytes; small, so "over the limit" stays a small request
ALLOWED_TARGET = "https://hooks.example.test/tickwheel/"
ISO_UTC_MS = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"
REGISTRY_FIELDS = {"next_run_at", "status", "version", "created_at", "updated_at"}


def cron_job(job_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": job_id, "schedule": "*/5 * * * *", "handler": "billing.send_invoice", **fields}


def once_job(job_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": job_id, "at": "2031-03-01T09:00:00+01:00", "handler": "reports.build", **fields}


@dataclass
class Api:
    """One app, one store and a way to make tenants and clients for them."""

    store: RegistryStore
    pool: asyncpg.Pool
    app: Any
    transport: httpx.ASGITransport

    def client(self, key: str | None = None, **headers: str) -> httpx.AsyncClient:
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        return httpx.AsyncClient(
            transport=self.transport, base_url="http://registry.test", headers=headers
        )

    async def tenant(self) -> tuple[str, httpx.AsyncClient]:
        """A new tenant's name and a client carrying its key."""
        name = f"t-{uuid.uuid4().hex[:12]}"
        return name, self.client(await self.store.create_tenant(name))


MakeApi = Callable[..., Awaitable[Api]]


@pytest.fixture
async def pool(db_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    created = await asyncpg.create_pool(db_dsn, min_size=1, max_size=4)
    yield created
    await created.close()


@pytest.fixture
def make_api(pool: asyncpg.Pool) -> MakeApi:
    async def make(limits: Limits | None = None, store: RegistryStore | None = None) -> Api:
        store = store or RegistryStore(pool, SHARDS)
        app = create_app(store, limits or Limits(payload_limit_bytes=PAYLOAD_LIMIT, shards=SHARDS))
        return Api(store, pool, app, httpx.ASGITransport(app=app))

    return make


@pytest.fixture
async def api(make_api: MakeApi) -> Api:
    return await make_api()


@pytest.fixture
async def client(api: Api) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh tenant."""
    _, tenant_client = await api.tenant()
    async with tenant_client:
        yield tenant_client


def field_errors(response: httpx.Response) -> dict[str, str]:
    """{field: message} of a 422, after checking the one error shape."""
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) == {"error", "detail"}
    assert body["error"] in ("invalid_job", "invalid_request")
    assert body["detail"], "a 422 names at least one field"
    for item in body["detail"]:
        assert set(item) == {"field", "message"}
        assert isinstance(item["message"], str) and item["message"]
        assert "Traceback" not in item["message"]
    return {item["field"]: item["message"] for item in body["detail"]}


def assert_error(response: httpx.Response, status: int, error: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail"}
    assert body["error"] == error
    assert isinstance(body["detail"], str) and body["detail"].strip()
    return str(body["detail"])


# --- POST /v1/jobs ------------------------------------------------------------------------------


async def test_post_creates_a_job_with_defaults_filled(client: httpx.AsyncClient) -> None:
    """A new job answers 201 with its Location, every default, and the registry fields."""
    response = await client.post("/v1/jobs", json=cron_job("invoice-42"))
    assert response.status_code == 201, response.text
    assert response.headers["location"] == "/v1/jobs/invoice-42"
    job = response.json()
    assert job["id"] == "invoice-42"
    assert job["timezone"] == "UTC"
    assert job["payload"] == {}
    assert job["priority"] == "normal"
    assert job["max_attempts"] == 5
    assert job["backoff"] == {"base_ms": 10_000, "cap_ms": 600_000}
    assert job["timeout_ms"] == 300_000
    assert job["misfire"] == {"policy": "run_once", "grace_ms": 60_000, "max_catchup": 10}
    assert job["overlap"] == "allow"
    assert job["dst"] == {"gap": "shift", "overlap": "first"}
    assert job["at"] is None and job["target"] is None
    assert job["status"] == "active"
    assert job["version"] == 1
    for name in ("next_run_at", "created_at", "updated_at"):
        assert job[name].endswith("Z")
        dt.datetime.fromisoformat(job[name])
    next_run = dt.datetime.fromisoformat(job["next_run_at"])
    assert next_run > dt.datetime.now(dt.UTC)
    assert next_run.minute % 5 == 0 and next_run.second == 0


async def test_same_body_twice_is_idempotent(client: httpx.AsyncClient) -> None:
    """POSTing the same body again answers 200 with the same job and version."""
    first = await client.post("/v1/jobs", json=cron_job("same"))
    again = await client.post("/v1/jobs", json=cron_job("same"))
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    assert "location" not in again.headers


async def test_defaults_spelled_out_are_the_same_body(client: httpx.AsyncClient) -> None:
    """A body that spells out the defaults is the same job as one that leaves them out."""
    first = await client.post("/v1/jobs", json=cron_job("explicit"))
    explicit = cron_job(
        "explicit",
        timezone="UTC",
        priority="normal",
        payload={},
        backoff={"base_ms": 10_000, "cap_ms": 600_000},
    )
    again = await client.post("/v1/jobs", json=explicit)
    assert again.status_code == 200
    assert again.json()["version"] == first.json()["version"] == 1


async def test_changed_body_bumps_the_version(client: httpx.AsyncClient) -> None:
    """A changed body answers 200 with the change and version + 1; created_at stays."""
    first = (await client.post("/v1/jobs", json=cron_job("chg"))).json()
    changed = await client.post("/v1/jobs", json=cron_job("chg", payload={"n": 1}, priority="high"))
    assert changed.status_code == 200
    job = changed.json()
    assert job["version"] == first["version"] + 1
    assert job["payload"] == {"n": 1} and job["priority"] == "high"
    assert job["created_at"] == first["created_at"]
    assert job["updated_at"] >= first["updated_at"]


async def test_one_off_job_runs_at_its_instant_in_utc(client: httpx.AsyncClient) -> None:
    """A one-off job's next_run_at is its `at`, converted to UTC with milliseconds."""
    response = await client.post("/v1/jobs", json=once_job("once"))
    assert response.status_code == 201
    assert response.json()["next_run_at"] == "2031-03-01T08:00:00.000Z"


async def test_cron_job_in_a_zone_runs_at_local_wall_time(client: httpx.AsyncClient) -> None:
    """A weekday 09:00 Berlin schedule answers a next_run_at of 08:00 or 07:00 UTC."""
    job = cron_job("berlin", schedule="0 9 * * MON-FRI", timezone="Europe/Berlin")
    next_run = dt.datetime.fromisoformat(
        (await client.post("/v1/jobs", json=job)).json()["next_run_at"]
    )
    assert next_run.weekday() < 5
    assert (next_run.hour, next_run.minute) in ((7, 0), (8, 0))


async def test_day_field_rule_decides_next_run_at(client: httpx.AsyncClient) -> None:
    """`0 9 */2 * 1-5` (day of month begins with `*`: AND) is next due on an odd weekday."""
    job = cron_job("odd-weekdays", schedule="0 9 */2 * 1-5")
    next_run = dt.datetime.fromisoformat(
        (await client.post("/v1/jobs", json=job)).json()["next_run_at"]
    )
    assert next_run.weekday() < 5
    assert next_run.day % 2 == 1
    assert (next_run.hour, next_run.minute) == (9, 0)


async def test_target_in_the_allowlist_is_accepted(make_api: MakeApi) -> None:
    """With an operator allowlist, a target below an allowed prefix is accepted, others not."""
    api = await make_api(
        Limits(payload_limit_bytes=PAYLOAD_LIMIT, shards=SHARDS, target_allowlist=(ALLOWED_TARGET,))
    )
    _, client = await api.tenant()
    async with client:
        target = {
            "url": ALLOWED_TARGET + "invoices",
            "method": "PUT",
            "headers": {"X-Team": "billing"},
        }
        ok = await client.post("/v1/jobs", json=cron_job("hook", handler=None, target=target))
        assert ok.status_code == 201, ok.text
        assert ok.json()["target"] == target
        elsewhere = {"url": "https://evil.example.test/tickwheel/invoices"}
        refused = await client.post(
            "/v1/jobs", json=cron_job("hook2", handler=None, target=elsewhere)
        )
        assert "allowlist" in field_errors(refused)["target.url"]


async def test_an_idempotency_key_template_reaches_the_runs_target(make_api: MakeApi) -> None:
    """the document keeps the template as written; the job's row gives runs the rule with the
    job's zone (what workers render the key from); a bad template is a 422 naming the field"""
    api = await make_api(
        Limits(payload_limit_bytes=PAYLOAD_LIMIT, shards=SHARDS, target_allowlist=(ALLOWED_TARGET,))
    )
    tenant, client = await api.tenant()
    async with client:
        job = cron_job("weekly", handler=None, target={"url": ALLOWED_TARGET + "report"},
                       timezone="Asia/Tokyo",
                       idempotency_key_template="report-{scheduled:%G-W%V}")  # fmt: skip
        ok = await client.post("/v1/jobs", json=job)
        assert ok.status_code == 201, ok.text
        assert ok.json()["idempotency_key_template"] == "report-{scheduled:%G-W%V}"
        stored = await api.pool.fetchval(
            "SELECT target FROM jobs WHERE tenant = $1 AND job_id = 'weekly'", tenant
        )
        assert orjson.loads(stored)["idempotency_key"] == {
            "template": "report-{scheduled:%G-W%V}",
            "timezone": "Asia/Tokyo",
        }
        bad_job = {**job, "id": "bad", "idempotency_key_template": "r-{week}"}
        bad = await client.post("/v1/jobs", json=bad_job)
        assert "unknown placeholder" in field_errors(bad)["idempotency_key_template"]


async def test_a_pause_with_a_note_shows_who_and_why_until_the_resume(
    client: httpx.AsyncClient,
) -> None:
    """POST …/pause {"note"}: the job shows the note (by the tenant and its key's prefix) on
    GET and in the list; a pause without a body still pauses; a resume drops the note; a note
    too long, of another type, or beside another field is a 422 and pauses nothing"""
    assert (await client.post("/v1/jobs", json=cron_job("noted"))).status_code == 201
    for body in ({"note": "x" * 501}, {"note": 5}, {"note": "ok", "colour": "red"}, ["note"]):
        refused = await client.post("/v1/jobs/noted/pause", json=body)
        assert refused.status_code == 422, (body, refused.text)
    assert (await client.get("/v1/jobs/noted")).json()["status"] == "active"
    paused = await client.post("/v1/jobs/noted/pause", json={"note": "billing freeze"})
    assert paused.status_code == 200, paused.text
    note = paused.json()["pause_note"]
    key = client.headers["Authorization"].removeprefix("Bearer ")
    assert note["why"] == "billing freeze" and key[:10] in note["by"]
    assert (await client.get("/v1/jobs/noted")).json()["pause_note"] == note
    listed = (await client.get("/v1/jobs")).json()["items"]
    assert [j["pause_note"] for j in listed if j["id"] == "noted"] == [note]
    resumed = await client.post("/v1/jobs/noted/resume")
    assert resumed.json()["pause_note"] is None
    plain = await client.post("/v1/jobs/noted/pause")
    assert plain.status_code == 200 and plain.json()["pause_note"] is None


# --- validation ---------------------------------------------------------------------------------

BASE = cron_job("valid")
INVALID_DOCUMENTS: list[tuple[str, dict[str, Any], str]] = [
    ("unknown field", {**BASE, "colour": "blue"}, "colour"),
    ("bad id pattern", {**BASE, "id": "no spaces/slashes"}, "id"),
    ("id too long", {**BASE, "id": "x" * 129}, "id"),
    ("missing id", {k: v for k, v in BASE.items() if k != "id"}, "id"),
    ("both schedule and at", {**BASE, "at": "2031-01-01T00:00:00Z"}, "schedule"),
    ("neither schedule nor at", {"id": "x", "handler": "a.b"}, "schedule"),
    ("both handler and target", {**BASE, "target": {"url": ALLOWED_TARGET}}, "handler"),
    ("neither handler nor target", {"id": "x", "schedule": "* * * * *"}, "handler"),
    ("bad cron", {**BASE, "schedule": "61 * * * *"}, "schedule"),
    ("cron with too few fields", {**BASE, "schedule": "* * *"}, "schedule"),
    ("cron form crontab would not run", {**BASE, "schedule": "0 0 * * MON-FRI#2"}, "schedule"),
    ("bad zone", {**BASE, "timezone": "Mars/Olympus_Mons"}, "timezone"),
    ("naive at", once_job("x", at="2031-03-01T09:00:00"), "at"),
    ("at not an instant", once_job("x", at="next tuesday"), "at"),
    ("payload over the limit", {**BASE, "payload": {"blob": "x" * PAYLOAD_LIMIT}}, "payload"),
    (
        "target without an allowlist",
        cron_job("x", handler=None, target={"url": ALLOWED_TARGET}),
        "target.url",
    ),
    ("target not http", cron_job("x", handler=None, target={"url": "ftp://h/x"}), "target.url"),
    (
        "target port out of range",
        cron_job("x", handler=None, target={"url": "https://h:99999/x"}),
        "target.url",
    ),
    (
        "target method",
        cron_job("x", handler=None, target={"url": ALLOWED_TARGET, "method": "GET"}),
        "target.method",
    ),
    ("bad handler name", {**BASE, "handler": "not a name"}, "handler"),
    ("bad priority", {**BASE, "priority": "urgent"}, "priority"),
    ("max_attempts 0", {**BASE, "max_attempts": 0}, "max_attempts"),
    ("max_attempts not an integer", {**BASE, "max_attempts": "5"}, "max_attempts"),
    ("max_attempts a boolean", {**BASE, "max_attempts": True}, "max_attempts"),
    ("timeout_ms 0", {**BASE, "timeout_ms": 0}, "timeout_ms"),
    ("backoff cap below base", {**BASE, "backoff": {"base_ms": 5000, "cap_ms": 1000}}, "backoff"),
    ("negative backoff base", {**BASE, "backoff": {"base_ms": -1}}, "backoff.base_ms"),
    ("bad misfire policy", {**BASE, "misfire": {"policy": "sometimes"}}, "misfire.policy"),
    ("misfire max_catchup 0", {**BASE, "misfire": {"max_catchup": 0}}, "misfire.max_catchup"),
    ("bad overlap policy", {**BASE, "overlap": "queue"}, "overlap"),
    ("bad dst gap policy", {**BASE, "dst": {"gap": "wait"}}, "dst.gap"),
    ("bad dst overlap policy", {**BASE, "dst": {"overlap": "second"}}, "dst.overlap"),
    ("unknown nested field", {**BASE, "dst": {"gap": "shift", "fold": 1}}, "dst.fold"),
    ("NUL in the payload", {**BASE, "payload": {"note": "a\u0000b"}}, "payload.note"),
    ("integer beyond 64 bits", {**BASE, "payload": {"n": 2**70}}, "payload.n"),
    ("null payload", {**BASE, "payload": None}, "payload"),
    (
        "payload nested too deep",
        {**BASE, "payload": json.loads("[" * 100 + "]" * 100)},
        "payload" + ".0" * 64,  # the 65th array, the first level too many
    ),
]


@pytest.mark.parametrize(
    ("document", "field"),
    [(d, f) for _, d, f in INVALID_DOCUMENTS],
    ids=[name for name, _, _ in INVALID_DOCUMENTS],
)
async def test_invalid_document_is_422_naming_the_field(
    client: httpx.AsyncClient, document: dict[str, Any], field: str
) -> None:
    """Each invalid job document answers 422 with the field at fault, and stores nothing."""
    response = await client.post("/v1/jobs", json=document)
    errors = field_errors(response)
    assert response.json()["error"] == "invalid_job"
    assert any(name == field or name.startswith(field + ".") for name in errors), errors
    assert (await client.get("/v1/jobs")).json()["items"] == []


async def test_backoff_cap_below_base_names_cap_ms(client: httpx.AsyncClient) -> None:
    """The cap-below-base error says which value to change."""
    document = {**BASE, "backoff": {"base_ms": 5000, "cap_ms": 1000}}
    errors = field_errors(await client.post("/v1/jobs", json=document))
    assert errors.get("backoff.cap_ms", "").startswith("must be at least base_ms"), errors


async def test_every_problem_is_reported_at_once(client: httpx.AsyncClient) -> None:
    """A document with several bad fields gets all of them in one 422."""
    document = {**BASE, "priority": "urgent", "max_attempts": 0, "colour": "blue"}
    assert {"priority", "max_attempts", "colour"} <= set(
        field_errors(await client.post("/v1/jobs", json=document))
    )


async def test_lone_surrogate_in_the_payload_is_422(client: httpx.AsyncClient) -> None:
    """A string with a lone UTF-16 surrogate (valid JSON, not Unicode) is refused by field."""
    body = b'{"id": "s", "schedule": "* * * * *", "handler": "a.b", "payload": {"s": "\\ud800"}}'
    response = await client.post(
        "/v1/jobs", content=body, headers={"Content-Type": "application/json"}
    )
    assert "surrogate" in field_errors(response)["payload.s"]


@pytest.mark.parametrize("job_id", ["bad%00id", "has space", "x" * 129, "%F0%9F%98%80"])
async def test_malformed_id_in_the_path_is_422(client: httpx.AsyncClient, job_id: str) -> None:
    """An id in the path that no job can have answers 422 naming job_id."""
    assert "job_id" in field_errors(await client.get(f"/v1/jobs/{job_id}"))


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        (b'{"id": "x", "schedule": ', "application/json"),
        (b"not json at all", "application/json"),
        (b"\xff\xfe{}", "application/json"),
        (b"[1, 2, 3]", "application/json"),
        (b'"a string"', "application/json"),
        (b"null", "application/json"),
        (b"", "application/json"),
        (b'{"id": "x"}', "text/plain"),
        (
            b'{"id": "x", "schedule": "* * * * *", "handler": "a.b", "payload": NaN}',
            "application/json",
        ),
    ],
    ids=[
        "truncated",
        "not-json",
        "not-utf8",
        "array",
        "string",
        "null",
        "empty",
        "text-plain",
        "nan",
    ],
)
async def test_malformed_body_is_422_with_a_sentence(
    client: httpx.AsyncClient, content: bytes, content_type: str
) -> None:
    """A body that is not a JSON object answers 422 in the error shape, never a 5xx."""
    response = await client.post(
        "/v1/jobs", content=content, headers={"Content-Type": content_type}
    )
    errors = field_errors(response)
    assert response.json()["error"] == "invalid_job"
    assert all("\n" not in message for message in errors.values())


async def test_body_larger_than_the_server_accepts_is_413(client: httpx.AsyncClient) -> None:
    """A body far beyond any payload limit is refused with 413 before it is parsed."""
    blob = json.dumps(cron_job("big", payload={"blob": "x" * (2 << 20)}))
    response = await client.post(
        "/v1/jobs", content=blob, headers={"Content-Type": "application/json"}
    )
    assert_error(response, 413, "too_large")

    async def chunks() -> AsyncIterator[bytes]:
        """A body without Content-Length, so only its streamed size can give it away."""
        yield b'{"id": "big", "payload": "'
        for _ in range(64):
            yield b"x" * 65536
        yield b'"}'

    streamed = await client.post(
        "/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert_error(streamed, 413, "too_large")


# --- GET / DELETE -------------------------------------------------------------------------------


async def test_get_returns_what_post_returned(client: httpx.AsyncClient) -> None:
    """GET answers the job exactly as the POST that stored it did."""
    created = (await client.post("/v1/jobs", json=once_job("get-me"))).json()
    got = await client.get("/v1/jobs/get-me")
    assert got.status_code == 200
    assert got.json() == created


async def test_get_unknown_job_is_404(client: httpx.AsyncClient) -> None:
    """A job that was never created answers 404 in the error shape."""
    detail = assert_error(await client.get("/v1/jobs/nope"), 404, "not_found")
    assert "nope" in detail


async def test_delete_then_get_is_404_and_post_recreates(client: httpx.AsyncClient) -> None:
    """DELETE answers 204; the job is gone (GET, DELETE, list); POST again creates it anew."""
    first = (await client.post("/v1/jobs", json=cron_job("gone"))).json()
    deleted = await client.delete("/v1/jobs/gone")
    assert deleted.status_code == 204 and deleted.content == b""
    assert_error(await client.get("/v1/jobs/gone"), 404, "not_found")
    assert_error(await client.delete("/v1/jobs/gone"), 404, "not_found")
    assert (await client.get("/v1/jobs")).json()["items"] == []
    again = await client.post("/v1/jobs", json=cron_job("gone"))
    assert again.status_code == 201
    assert again.json()["status"] == "active"
    assert again.json()["version"] > first["version"]


# --- pause / resume -----------------------------------------------------------------------------


async def test_pause_and_resume_round_trip(client: httpx.AsyncClient) -> None:
    """Pause answers the paused job, twice with the same version; resume makes it active."""
    created = (await client.post("/v1/jobs", json=cron_job("pr"))).json()
    paused = await client.post("/v1/jobs/pr/pause")
    assert paused.status_code == 200
    assert paused.json()["status"] == "paused"
    assert paused.json()["version"] == created["version"] + 1
    again = await client.post("/v1/jobs/pr/pause")
    assert again.status_code == 200 and again.json()["version"] == paused.json()["version"]
    assert (await client.get("/v1/jobs/pr")).json()["status"] == "paused"
    resumed = await client.post("/v1/jobs/pr/resume")
    assert resumed.status_code == 200
    assert resumed.json()["status"] == "active"
    assert resumed.json()["version"] == paused.json()["version"] + 1
    assert resumed.json()["next_run_at"] is not None
    twice = await client.post("/v1/jobs/pr/resume")
    assert twice.status_code == 200 and twice.json()["version"] == resumed.json()["version"]


@pytest.mark.parametrize("action", ["pause", "resume"])
async def test_pause_or_resume_of_a_completed_job_is_409(api: Api, action: str) -> None:
    """A one-off job that has run (completed) cannot be paused or resumed: 409 says why."""
    tenant, client = await api.tenant()
    async with client:
        await client.post("/v1/jobs", json=once_job("done"))
        # The shard leader completes a one-off once it has fired; play its part.
        await api.pool.execute(
            "UPDATE jobs SET status = 'completed', next_run_at = NULL "
            "WHERE tenant = $1 AND job_id = $2",
            tenant,
            "done",
        )
        detail = assert_error(await client.post(f"/v1/jobs/done/{action}"), 409, "conflict")
        assert "completed" in detail
        assert (await client.get("/v1/jobs/done")).json()["status"] == "completed"


@pytest.mark.parametrize("action", ["pause", "resume"])
async def test_pause_or_resume_of_an_unknown_job_is_404(
    client: httpx.AsyncClient, action: str
) -> None:
    """Pausing or resuming a job that does not exist answers 404."""
    assert_error(await client.post(f"/v1/jobs/nope/{action}"), 404, "not_found")


# --- PATCH --------------------------------------------------------------------------------------

MERGE = "application/merge-patch+json"


async def patch(
    client: httpx.AsyncClient, job_id: str, body: Any, content_type: str = MERGE
) -> httpx.Response:
    return await client.patch(
        f"/v1/jobs/{job_id}", content=json.dumps(body), headers={"Content-Type": content_type}
    )


async def test_patch_merges_and_null_restores_the_default(client: httpx.AsyncClient) -> None:
    """PATCH merges objects key by key; null removes a key, so its default comes back."""
    await client.post("/v1/jobs", json=cron_job("p", payload={"a": 1, "b": 2}))
    merged = await patch(
        client,
        "p",
        {"priority": "high", "backoff": {"cap_ms": 1_200_000}, "payload": {"b": None, "c": 3}},
    )
    assert merged.status_code == 200, merged.text
    job = merged.json()
    assert job["priority"] == "high"
    assert job["backoff"] == {"base_ms": 10_000, "cap_ms": 1_200_000}
    assert job["payload"] == {"a": 1, "c": 3}
    assert job["version"] == 2
    restored = await patch(
        client, "p", {"priority": None, "backoff": {"cap_ms": None}}, "application/json"
    )
    assert restored.status_code == 200
    assert restored.json()["priority"] == "normal"
    assert restored.json()["backoff"] == {"base_ms": 10_000, "cap_ms": 600_000}
    assert restored.json()["version"] == 3


async def test_patch_that_changes_nothing_keeps_the_version(client: httpx.AsyncClient) -> None:
    """A PATCH whose result equals the stored job answers 200 without a new version."""
    created = (await client.post("/v1/jobs", json=cron_job("same-p"))).json()
    for body in ({}, {"priority": "normal"}, {"id": "same-p"}):
        response = await patch(client, "same-p", body)
        assert response.status_code == 200
        assert response.json()["version"] == created["version"]


async def test_patch_switches_a_cron_job_to_a_one_off(client: httpx.AsyncClient) -> None:
    """Removing `schedule` and adding `at` in one patch turns the job into a one-off."""
    await client.post("/v1/jobs", json=cron_job("switch"))
    response = await patch(client, "switch", {"schedule": None, "at": "2031-03-01T08:00:00Z"})
    assert response.status_code == 200, response.text
    assert response.json()["schedule"] is None
    assert response.json()["next_run_at"] == "2031-03-01T08:00:00.000Z"
    listed = await client.get("/v1/jobs", params={"kind": "once"})
    assert [j["id"] for j in listed.json()["items"]] == ["switch"]


async def test_patch_result_is_validated_as_a_whole(client: httpx.AsyncClient) -> None:
    """A patch whose result is not a valid job (both schedule and at) is 422; nothing changes."""
    created = (await client.post("/v1/jobs", json=cron_job("whole"))).json()
    assert "schedule" in field_errors(await patch(client, "whole", {"at": "2031-01-01T00:00:00Z"}))
    assert "max_attempts" in field_errors(await patch(client, "whole", {"max_attempts": 0}))
    assert "colour" in field_errors(await patch(client, "whole", {"colour": "blue"}))
    assert (await client.get("/v1/jobs/whole")).json() == created


@pytest.mark.parametrize("new_id", ["other", None])
async def test_patch_cannot_change_the_id(client: httpx.AsyncClient, new_id: str | None) -> None:
    """A patch that changes or removes `id` is 422 naming `id`."""
    await client.post("/v1/jobs", json=cron_job("fixed"))
    assert "id" in field_errors(await patch(client, "fixed", {"id": new_id}))
    assert (await client.get("/v1/jobs/fixed")).status_code == 200
    assert (await client.get("/v1/jobs/other")).status_code == 404


@pytest.mark.parametrize(
    "body", [[1, 2], "text", 3, None], ids=["array", "string", "number", "null"]
)
async def test_patch_body_must_be_an_object(client: httpx.AsyncClient, body: Any) -> None:
    """A merge patch that is not a JSON object is 422 for the body as a whole."""
    await client.post("/v1/jobs", json=cron_job("obj"))
    assert "" in field_errors(await patch(client, "obj", body))


async def test_patch_of_an_unknown_job_is_404(client: httpx.AsyncClient) -> None:
    """PATCH never creates: an unknown id answers 404."""
    assert_error(await patch(client, "ghost", {"priority": "high"}), 404, "not_found")


async def test_patch_redoes_the_merge_after_a_concurrent_change(
    make_api: MakeApi, pool: asyncpg.Pool
) -> None:
    """A change that lands between PATCH's read and write is kept: the merge is redone on it."""
    store = RegistryStore(pool, SHARDS)
    original_apply = store.apply
    interfered: list[bool] = []

    async def apply_after_a_rival(ops: Sequence[Op]) -> list[Applied]:
        if not interfered and ops[0].version is not None:  # PATCH's first write attempt
            interfered.append(True)
            async with api.client(key) as rival:
                assert (
                    await rival.post("/v1/jobs", json=cron_job("race", priority="low"))
                ).status_code == 200
        return await original_apply(ops)

    store.apply = apply_after_a_rival  # type: ignore[method-assign]
    api = await make_api(store=store)
    key = await store.create_tenant(f"t-{uuid.uuid4().hex[:12]}")
    async with api.client(key) as client:
        await client.post("/v1/jobs", json=cron_job("race"))
        response = await patch(client, "race", {"payload": {"patched": True}})
    assert response.status_code == 200, response.text
    job = response.json()
    assert interfered == [True]
    assert job["priority"] == "low" and job["payload"] == {"patched": True}
    assert job["version"] == 3


async def test_patch_of_a_paused_job_keeps_it_paused(client: httpx.AsyncClient) -> None:
    """Changing a paused job's payload keeps it paused."""
    await client.post("/v1/jobs", json=cron_job("pp"))
    await client.post("/v1/jobs/pp/pause")
    response = await patch(client, "pp", {"payload": {"x": 1}})
    assert response.json()["status"] == "paused"


# --- lists and cursors --------------------------------------------------------------------------


async def walk(
    client: httpx.AsyncClient, url: str, limit: int, **params: str
) -> tuple[list[dict[str, Any]], int]:
    """Every item of a list, page by page; also the number of pages."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    pages = 0
    while True:
        query = {**params, "limit": str(limit)}
        if cursor is not None:
            query["cursor"] = cursor
        response = await client.get(url, params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        assert set(body) == {"items", "next"}
        assert len(body["items"]) <= limit
        items += body["items"]
        pages += 1
        cursor = body["next"]
        if cursor is None:
            return items, pages
        assert pages < 100, "the cursor does not advance"


async def test_jobs_list_walks_every_job_once(api: Api) -> None:
    """Paging through the list yields each of the tenant's jobs exactly once, in id order."""
    _, client = await api.tenant()
    _, other = await api.tenant()
    async with client, other:
        ids = sorted(f"job-{n:03d}" for n in range(23))
        for job_id in ids:
            assert (await client.post("/v1/jobs", json=cron_job(job_id))).status_code == 201
        await other.post("/v1/jobs", json=cron_job("job-005"))
        await other.post("/v1/jobs", json=cron_job("zzz-other"))
        items, pages = await walk(client, "/v1/jobs", limit=5)
        assert [job["id"] for job in items] == ids
        assert pages == 5
        everything, one_page = await walk(client, "/v1/jobs", limit=500)
        assert [job["id"] for job in everything] == ids and one_page == 1
        defaults = (await client.get("/v1/jobs")).json()
        assert len(defaults["items"]) == 23 and defaults["next"] is None


async def test_jobs_list_filters(client: httpx.AsyncClient) -> None:
    """status, priority and kind filter the list, and combine, across pages."""
    await client.post("/v1/jobs", json=cron_job("a-cron-high", priority="high"))
    await client.post("/v1/jobs", json=cron_job("b-cron-low", priority="low"))
    await client.post("/v1/jobs", json=once_job("c-once-high", priority="high"))
    await client.post("/v1/jobs", json=once_job("d-once-normal"))
    await client.post("/v1/jobs/b-cron-low/pause")
    await client.post("/v1/jobs", json=cron_job("e-deleted"))
    await client.delete("/v1/jobs/e-deleted")

    async def ids(**params: str) -> list[str]:
        items, _ = await walk(client, "/v1/jobs", limit=1, **params)
        return [job["id"] for job in items]

    assert await ids() == ["a-cron-high", "b-cron-low", "c-once-high", "d-once-normal"]
    assert await ids(status="paused") == ["b-cron-low"]
    assert await ids(status="active") == ["a-cron-high", "c-once-high", "d-once-normal"]
    assert await ids(priority="high") == ["a-cron-high", "c-once-high"]
    assert await ids(kind="once") == ["c-once-high", "d-once-normal"]
    assert await ids(kind="cron", priority="high") == ["a-cron-high"]
    assert await ids(status="completed") == []


async def insert_runs(
    pool: asyncpg.Pool, tenant: str, job_id: str, instants: list[dt.datetime]
) -> None:
    await pool.executemany(
        "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, epoch, status,"
        " attempt, started_at, finished_at, last_error) "
        "VALUES ($1, $2, $3, 0, 'normal', 1, $4, $5, $6, $7, $8)",
        [
            (tenant, job_id, at, status, attempt, started, finished, error)
            for at, (status, attempt, started, finished, error) in (
                (at, run_columns(i, at)) for i, at in enumerate(instants)
            )
        ],
    )


def run_columns(
    i: int, at: dt.datetime
) -> tuple[str, int, dt.datetime | None, dt.datetime | None, str | None]:
    if i % 3 == 0:
        return "succeeded", 1, at, at + dt.timedelta(seconds=2), None
    if i % 3 == 1:
        return "dead", 5, at, at + dt.timedelta(seconds=1), "boom"
    return "pending", 0, None, None, None


async def test_runs_list_walks_every_run_once_newest_first(api: Api) -> None:
    """Paging through a job's runs yields each run once, newest first, with the run fields."""
    tenant, client = await api.tenant()
    async with client:
        await client.post("/v1/jobs", json=cron_job("ran"))
        await client.post("/v1/jobs", json=cron_job("other"))
        start = dt.datetime(2026, 11, 1, 9, 0, 0, 250_000, tzinfo=dt.UTC)
        instants = [start + dt.timedelta(minutes=5 * n) for n in range(23)]
        await insert_runs(api.pool, tenant, "ran", instants)
        await insert_runs(api.pool, tenant, "other", instants[:3])
        items, pages = await walk(client, "/v1/jobs/ran/runs", limit=4)
        assert pages == 6
        expected = sorted(instants, reverse=True)
        assert [dt.datetime.fromisoformat(run["scheduled_at"]) for run in items] == expected
        newest = items[0]
        at_ms = int(expected[0].timestamp() * 1000)
        assert newest["run_key"] == f"{tenant}/ran@{at_ms}"
        assert newest["scheduled_at"] == "2026-11-01T10:50:00.250Z"
        assert set(newest) == {
            "run_key",
            "scheduled_at",
            "status",
            "attempt",
            "started_at",
            "finished_at",
            "last_error",
            "origin",
        }
        assert newest["origin"] == "schedule"
        by_status = {run["status"]: run for run in items}
        assert by_status["dead"]["last_error"] == "boom" and by_status["dead"]["attempt"] == 5
        assert by_status["succeeded"]["finished_at"].endswith("Z")
        assert by_status["pending"]["started_at"] is None
        empty = await client.get("/v1/jobs/other/runs", params={"limit": "500"})
        assert len(empty.json()["items"]) == 3


async def test_runs_of_an_unknown_job_are_404(client: httpx.AsyncClient) -> None:
    """Runs of a job that does not exist answer 404, not an empty list."""
    assert_error(await client.get("/v1/jobs/nope/runs"), 404, "not_found")


@pytest.mark.parametrize(
    ("url", "params", "field"),
    [
        ("/v1/jobs", {"limit": "0"}, "limit"),
        ("/v1/jobs", {"limit": "501"}, "limit"),
        ("/v1/jobs", {"limit": "ten"}, "limit"),
        ("/v1/jobs", {"status": "deleted"}, "status"),
        ("/v1/jobs", {"priority": "urgent"}, "priority"),
        ("/v1/jobs", {"kind": "weekly"}, "kind"),
        ("/v1/jobs", {"cursor": "not a cursor!"}, "cursor"),
        ("/v1/jobs", {"cursor": "Zm9v"}, "cursor"),
        ("/v1/jobs", {"cursor": encode_cursor("r", "123")}, "cursor"),
        ("/v1/jobs", {"cursor": encode_cursor("j", "bad id/with slash")}, "cursor"),
        ("/v1/jobs", {"cursor": "a"}, "cursor"),
        ("/v1/jobs/q/runs", {"limit": "0"}, "limit"),
        ("/v1/jobs/q/runs", {"cursor": encode_cursor("j", "q")}, "cursor"),
        ("/v1/jobs/q/runs", {"cursor": encode_cursor("r", "soon")}, "cursor"),
        ("/v1/jobs/q/runs", {"cursor": "%%%"}, "cursor"),
        ("/v1/jobs/q/runs", {"cursor": encode_cursor("r", "9999999999999999")}, "cursor"),
        ("/v1/jobs/q/runs", {"cursor": encode_cursor("r", "-9999999999999999")}, "cursor"),
    ],
)
async def test_bad_list_parameters_are_422(
    client: httpx.AsyncClient, url: str, params: dict[str, str], field: str
) -> None:
    """A bad limit, filter value or cursor answers 422 naming the parameter."""
    await client.post("/v1/jobs", json=cron_job("q"))
    response = await client.get(url, params=params)
    assert field in field_errors(response)
    assert response.json()["error"] == "invalid_request"


# --- tenants and auth ---------------------------------------------------------------------------

FOREIGN_REQUESTS: list[tuple[str, str, Any]] = [
    ("GET", "/v1/jobs/{id}", None),
    ("PATCH", "/v1/jobs/{id}", {"priority": "low"}),
    ("DELETE", "/v1/jobs/{id}", None),
    ("POST", "/v1/jobs/{id}/pause", None),
    ("POST", "/v1/jobs/{id}/resume", None),
    ("GET", "/v1/jobs/{id}/runs", None),
]


@pytest.mark.parametrize(
    ("method", "url", "body"), FOREIGN_REQUESTS, ids=[f"{m} {u}" for m, u, _ in FOREIGN_REQUESTS]
)
async def test_another_tenants_job_is_404_like_a_missing_one(
    api: Api, method: str, url: str, body: Any
) -> None:
    """Another tenant's job answers exactly as a nonexistent one does, and stays untouched."""
    _, owner = await api.tenant()
    _, stranger = await api.tenant()
    async with owner, stranger:
        created = (await owner.post("/v1/jobs", json=cron_job("mine"))).json()
        foreign = await stranger.request(method, url.format(id="mine"), json=body)
        missing = await stranger.request(method, url.format(id="never-was"), json=body)
        assert foreign.status_code == missing.status_code == 404
        assert foreign.json() == {
            **missing.json(),
            "detail": missing.json()["detail"].replace("never-was", "mine"),
        }
        assert (await owner.get("/v1/jobs/mine")).json() == created


async def test_tenants_share_ids_without_seeing_each_other(api: Api) -> None:
    """Two tenants may use the same id; each sees and changes only its own job."""
    _, first = await api.tenant()
    _, second = await api.tenant()
    async with first, second:
        await first.post("/v1/jobs", json=cron_job("shared", priority="high"))
        created = await second.post("/v1/jobs", json=cron_job("shared", priority="low"))
        assert created.status_code == 201 and created.json()["version"] == 1
        assert (await first.get("/v1/jobs/shared")).json()["priority"] == "high"
        assert [j["priority"] for j in (await second.get("/v1/jobs")).json()["items"]] == ["low"]


JOB_ENDPOINTS = [
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/x"),
    ("PATCH", "/v1/jobs/x"),
    ("DELETE", "/v1/jobs/x"),
    ("POST", "/v1/jobs/x/pause"),
    ("POST", "/v1/jobs/x/resume"),
    ("GET", "/v1/jobs/x/runs"),
]


@pytest.mark.parametrize(
    ("method", "url"), JOB_ENDPOINTS, ids=[f"{m} {u}" for m, u in JOB_ENDPOINTS]
)
@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer tw_not-a-key",
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer  ",
        "tw_bare-key",
        "Bearer two words",
    ],
    ids=["missing", "unknown", "basic", "no-key", "blank-key", "no-scheme", "two-words"],
)
async def test_job_endpoints_need_a_valid_bearer_key(
    api: Api, method: str, url: str, authorization: str | None
) -> None:
    """Without a valid bearer key every job endpoint answers 401 with a Bearer challenge."""
    headers = {} if authorization is None else {"Authorization": authorization}
    async with api.client(**headers) as client:
        response = await client.request(method, url, json=cron_job("x"))
    assert_error(response, 401, "unauthorized")
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_known_keys_are_looked_up_once(make_api: MakeApi, pool: asyncpg.Pool) -> None:
    """Repeated requests with one key ask the database once; an unknown key every time."""
    store = RegistryStore(pool, SHARDS)
    asked: list[str] = []
    lookup = store.tenant_for_key

    async def counting(key: str) -> str | None:
        asked.append(key)
        return await lookup(key)

    store.tenant_for_key = counting  # type: ignore[method-assign]
    api = await make_api(store=store)
    key = await store.create_tenant(f"t-{uuid.uuid4().hex[:12]}")
    async with api.client(key) as client, api.client("tw_unknown") as stranger:
        for _ in range(5):
            assert (await client.get("/v1/jobs")).status_code == 200
            assert (await stranger.get("/v1/jobs")).status_code == 401
    assert asked.count(key) == 1
    assert asked.count("tw_unknown") == 5


# --- operations ---------------------------------------------------------------------------------


async def test_health_metrics_and_openapi_need_no_key(api: Api) -> None:
    """/healthz, /metrics and /openapi.json answer without a key."""
    async with api.client() as client:
        health = await client.get("/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok", "parts": {}}
        assert (await client.get("/metrics")).status_code == 200
        assert (await client.get("/openapi.json")).status_code == 200


async def test_healthz_is_503_when_the_database_is_gone(make_api: MakeApi, db_dsn: str) -> None:
    """With its pool closed the app answers 503 on /healthz and on job endpoints, not 500."""
    own_pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=2)
    store = RegistryStore(own_pool, SHARDS)
    key = await store.create_tenant(f"t-{uuid.uuid4().hex[:12]}")
    api = await make_api(store=store)
    async with api.client(key) as client:
        assert (await client.get("/v1/jobs")).status_code == 200  # key now cached
        await own_pool.close()
        health = await client.get("/healthz")
        assert health.status_code == 503 and health.json()["status"] == "unavailable"
        assert_error(await client.get("/v1/jobs/x"), 503, "unavailable")


async def test_metrics_count_requests_by_route_template(api: Api) -> None:
    """/metrics counts requests by route template and status, and jobs created and updated."""
    _, client = await api.tenant()
    async with client:
        await client.post("/v1/jobs", json=cron_job("m1"))
        await client.post("/v1/jobs", json=cron_job("m1", priority="high"))
        await client.get("/v1/jobs/m1")
        await client.get("/v1/jobs/unknown")
        text = (await client.get("/metrics")).text
    assert 'tickwheel_http_requests_total{method="POST",route="/v1/jobs",status="201"} 1.0' in text
    assert 'tickwheel_http_requests_total{method="POST",route="/v1/jobs",status="200"} 1.0' in text
    assert (
        'tickwheel_http_requests_total{method="GET",route="/v1/jobs/{job_id}",status="404"} 1.0'
    ) in text
    assert "tickwheel_http_request_duration_seconds_bucket" in text
    assert 'tickwheel_registry_job_changes_total{outcome="created"} 1.0' in text
    assert 'tickwheel_registry_job_changes_total{outcome="updated"} 1.0' in text
    assert "m1" not in text, "label values are templates, never raw paths"


async def test_two_apps_keep_separate_metrics(make_api: MakeApi) -> None:
    """Each app has its own metrics registry: two apps in one process do not collide."""
    first, second = await make_api(), await make_api()
    async with first.client() as a, second.client() as b:
        await a.get("/healthz")
        await a.get("/healthz")
        assert (
            'tickwheel_http_requests_total{method="GET",route="/healthz",status="200"} 2.0'
            in (await a.get("/metrics")).text
        )
        assert 'route="/healthz"' not in (await b.get("/metrics")).text


async def test_request_log_has_one_json_line_per_request_and_no_key(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """Each request logs one record with route, status and tenant, and never the API key."""
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    key = await api.store.create_tenant(tenant)
    with caplog.at_level(logging.INFO, logger="tickwheel.registry_api.http"):
        async with api.client(key) as client:
            await client.get("/v1/jobs/x")
            await client.get("/v1/jobs", params={"limit": "2"})
    records = [r for r in caplog.records if r.getMessage() == "request"]
    assert [
        (getattr(r, "route", None), getattr(r, "status", None), getattr(r, "tenant", None))
        for r in records
    ] == [("/v1/jobs/{job_id}", 404, tenant), ("/v1/jobs", 200, tenant)]
    from tickwheel.logs import JsonLines

    for record in records:
        line = JsonLines().format(record)
        assert json.loads(line)["duration_ms"] >= 0
        assert key not in line and key not in str(vars(record))


async def test_openapi_documents_auth_bodies_and_responses(api: Api) -> None:
    """The OpenAPI document names the bearer scheme, the job body and every answer code."""
    async with api.client() as client:
        spec = (await client.get("/openapi.json")).json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes == {
        name: {"type": "http", "scheme": "bearer", "description": schemes[name]["description"]}
        for name in ("ApiKey", "OperatorKey")  # OperatorKey: the operators' /v1/ops/… endpoints
    }
    assert spec["paths"]["/v1/ops/shards"]["get"]["security"] == [{"OperatorKey": []}]
    assert {"200", "401", "403"} <= set(spec["paths"]["/v1/ops/shards"]["get"]["responses"])
    post = spec["paths"]["/v1/jobs"]["post"]
    assert post["security"] == [{"ApiKey": []}]
    assert post["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/JobDocument"
    }
    assert {"200", "201", "401", "422"} <= set(post["responses"])
    codes = {
        (path, method): set(op["responses"])
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
    }
    assert {"200", "401", "404", "409", "422"} <= codes[("/v1/jobs/{job_id}", "patch")]
    assert {"200", "401", "404", "409"} <= codes[("/v1/jobs/{job_id}/pause", "post")]
    assert {"204", "401", "404"} <= codes[("/v1/jobs/{job_id}", "delete")]
    assert {"200", "401", "404", "422"} <= codes[("/v1/jobs/{job_id}/runs", "get")]
    assert "security" not in spec["paths"]["/healthz"]["get"]
    invalid = spec["components"]["schemas"]["ValidationErrorBody"]
    assert set(invalid["properties"]) == {"error", "detail"}


async def test_unknown_route_and_method_use_the_error_shape(client: httpx.AsyncClient) -> None:
    """An unknown path is a 404 and a wrong method a 405, both in the error shape."""
    assert_error(await client.get("/v2/jobs"), 404, "not_found")
    assert_error(await client.put("/v1/jobs/x", json={}), 405, "method_not_allowed")
