"""`GET /v1/jobs/{id}/preview?count=N` against a real Postgres: a stored job's next occurrences
with the DST and H rules that put them there, and what a claim now would do (docs/API.md)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from tickwheel.clock import format_ms, now_ms
from tickwheel.registry_api.document import Limits
from tickwheel.registry_api.http import create_app
from tickwheel.registry_api.store import RegistryStore
from tickwheel.schedule import jitter_offset, parse_cron, parse_instant
from tickwheel.wire.responses import JobPreview

pytestmark = pytest.mark.integration

SHARDS = 64


class Clock:
    """The registry's now (UTC ms): the real one until a test moves it. (A job's next_run_at
    is computed by the database's clock, which no test moves.)"""

    def __init__(self) -> None:
        self.ms = now_ms()

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
async def store(db_dsn: str) -> AsyncIterator[RegistryStore]:
    pool = await asyncpg.create_pool(db_dsn, min_size=1, max_size=2)
    yield RegistryStore(pool, SHARDS)
    await pool.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def client(store: RegistryStore, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh tenant whose name is `client.tenant`."""
    app = create_app(store, Limits(shards=SHARDS), clock=clock)
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    key = await store.create_tenant(tenant)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://registry.test",
        headers={"Authorization": f"Bearer {key}"},
    ) as made:
        made.headers["X-Test-Tenant"] = tenant
        yield made


async def _preview(client: httpx.AsyncClient, job: dict[str, Any], count: int) -> dict[str, Any]:
    created = await client.post("/v1/jobs", json=job)
    assert created.status_code == 201, created.text
    answer = await client.get(f"/v1/jobs/{job['id']}/preview", params={"count": count})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    JobPreview.model_validate(body)  # the body is what the OpenAPI document promises
    return body


async def test_a_gap_preview_names_the_shift(client: httpx.AsyncClient) -> None:
    """A Berlin job at 02:30 on March's Sundays: five occurrences always reach the last one,
    the spring-forward night, which fires at 03:00 CEST and is named dst.gap shift; the other
    Sundays are plain."""
    body = await _preview(
        client,
        {"id": "nightly", "schedule": "30 2 * 3 SUN", "timezone": "Europe/Berlin",
         "handler": "a.b"},
        5,
    )  # fmt: skip
    shifted = [o for o in body["occurrences"] if o["reasons"]]
    [gap] = shifted
    day = gap["local"][:10]
    assert (gap["local"][11:], gap["offset"], gap["abbreviation"]) == ("03:00:00", "+02:00", "CEST")
    assert gap["at"] == f"{day}T01:00:00.000Z"
    assert gap["reasons"] == [
        {
            "rule": "dst.gap shift",
            "text": f"02:30 does not exist on {day} (the clock jumps from 02:00 to 03:00): "
            "shifted 02:30 → 03:00",
        }
    ]
    assert int(day[8:]) > 31 - 7, "the gap is on the last Sunday of March"
    for plain in body["occurrences"]:
        if plain is not gap:
            assert plain["local"][11:] == "02:30:00"
    assert (body["status"], body["style"], body["dst"]) == (
        "active",
        "fixed-hour",
        {"gap": "shift", "overlap": "first"},
    )
    assert body["misfire"]["rule"] == "misfire.grace_ms"
    assert body["misfire"]["text"].startswith("not due yet (")


async def test_an_h_job_is_resolved_from_its_own_key(client: httpx.AsyncClient) -> None:
    """`H` fields resolve from `<tenant>/<id>` as the scheduler's do: the preview's instants are
    the job's next_run_at and the schedule after it, and each names its H value."""
    body = await _preview(client, {"id": "spread", "schedule": "H 4 * * *", "handler": "a.b"}, 3)
    tenant = client.headers["X-Test-Tenant"]
    assert body["key"] == f"{tenant}/spread"
    [hashed] = body["hashed"]
    [minute] = hashed["values"]
    assert (hashed["field"], hashed["item"]) == ("minute", "H")
    job = (await client.get("/v1/jobs/spread")).json()
    assert body["occurrences"][0]["at"] == job["next_run_at"]
    assert [o["at"][11:16] for o in body["occurrences"]] == [f"04:{minute:02d}"] * 3
    for occurrence in body["occurrences"]:
        assert occurrence["reasons"] == [
            {
                "rule": "H",
                "text": f"minute {minute} is 'H', picked by hashing the key '{tenant}/spread'",
            }
        ]


async def test_a_preview_never_names_another_tenants_key(
    client: httpx.AsyncClient, store: RegistryStore, clock: Clock
) -> None:
    """Another tenant's job whose H resolves to the same minute as ours is previewed first (the
    process's schedule cache then shares one evaluation between them): our preview still names
    only our own key, in the key and in every reason."""
    ours = client.headers["X-Test-Tenant"]
    theirs = f"t-{uuid.uuid4().hex[:12]}"
    their_key = await store.create_tenant(theirs)
    twin = next(
        f"twin-{i}"
        for i in range(10_000)
        if parse_cron("H 4 * * *", key=f"{theirs}/twin-{i}").resolved
        == parse_cron("H 4 * * *", key=f"{ours}/spread").resolved
    )
    app = create_app(store, Limits(shards=SHARDS), clock=clock)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://registry.test",
        headers={"Authorization": f"Bearer {their_key}"},
    ) as other:
        body = await _preview(other, {"id": twin, "schedule": "H 4 * * *", "handler": "a.b"}, 1)
        assert body["key"] == f"{theirs}/{twin}"
    body = await _preview(client, {"id": "spread", "schedule": "H 4 * * *", "handler": "a.b"}, 2)
    assert body["key"] == f"{ours}/spread"
    assert theirs not in str(body)


async def test_an_overdue_job_gets_its_misfire_plan(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    """Once the clock passes next_run_at by more than the grace, the outlook is the job's
    misfire policy: skip records every missed occurrence skipped and says where it resumes."""
    job = {"id": "late", "schedule": "0 * * * *", "handler": "a.b", "misfire": {"policy": "skip"}}
    assert (await client.post("/v1/jobs", json=job)).status_code == 201
    due = parse_instant((await client.get("/v1/jobs/late")).json()["next_run_at"], "due")
    hour = 3_600_000
    clock.ms = due + 2 * hour + hour // 2  # due, due + 1 h, due + 2 h missed
    body = (await client.get("/v1/jobs/late/preview", params={"count": 1})).json()
    assert body["occurrences"][0]["at"] == format_ms(due)
    resumes = format_ms(due + 3 * hour)
    assert body["misfire"] == {
        "rule": "misfire.policy skip",
        "text": "due 2 h 30 min ago, later than misfire.grace_ms (60000 ms): claimed now, it "
        "and every occurrence missed after it are recorded skipped (reason misfire): "
        f"3 occurrences; the schedule resumes at {resumes[:19]}Z",
        "now": format_ms(clock.ms),
        "due": format_ms(due),
        "run": [],
        "skipped": 3,
        "skipped_span": None,
        "next_run_at": resumes,
    }


async def test_paused_one_off_and_unknown_jobs(client: httpx.AsyncClient, clock: Clock) -> None:
    """A paused cron job previews what resuming now would schedule; a one-off its instant in its
    zone; an unknown job is a 404 and a count out of range a 422 naming `count`."""
    job = {"id": "paused", "schedule": "0 0 * * *", "handler": "a.b"}
    assert (await client.post("/v1/jobs", json=job)).status_code == 201
    assert (await client.post("/v1/jobs/paused/pause")).status_code == 200
    day = 86_400_000
    clock.ms += 3 * day
    body = (await client.get("/v1/jobs/paused/preview", params={"count": 1})).json()
    assert (body["status"], body["occurrences"][0]["at"]) == (
        "paused",
        format_ms((clock.ms // day + 1) * day),
    )
    once = await _preview(
        client,
        {"id": "once", "at": "2031-07-01T09:00:00+02:00", "timezone": "Europe/Berlin",
         "handler": "a.b"},
        5,
    )  # fmt: skip
    assert [(o["at"], o["local"], o["offset"]) for o in once["occurrences"]] == [
        ("2031-07-01T07:00:00.000Z", "2031-07-01T09:00:00", "+02:00")
    ]
    assert (once["schedule"], once["style"], once["dst"]) == (None, None, None)
    missing = await client.get("/v1/jobs/nope/preview")
    assert missing.status_code == 404
    bad = await client.get("/v1/jobs/paused/preview", params={"count": 0})
    assert bad.status_code == 422
    assert [d["field"] for d in bad.json()["detail"]] == ["count"]


async def test_a_windowed_job_over_http_previews_its_window_and_a_bad_one_is_a_422(
    client: httpx.AsyncClient,
) -> None:
    """an hourly job with an active window of three hours: the preview stops at end_at and
    names the window's opening and its last occurrence; a window ending before it starts, or
    on a one-off, is a 422 naming the field; a PATCH of end_at moves the preview's end"""
    hour = 3_600_000
    start = (now_ms() // hour + 2) * hour
    job = {"id": "win", "schedule": "0 * * * *", "handler": "demo.echo",
           "start_at": format_ms(start - 1), "end_at": format_ms(start + 2 * hour),
           "after_end": "delete"}  # fmt: skip
    body = await _preview(client, job, 10)
    assert [o["at"] for o in body["occurrences"]] == [format_ms(start + k * hour) for k in range(3)]
    assert [r["rule"] for r in body["occurrences"][0]["reasons"]] == ["start_at"]
    assert [r["rule"] for r in body["occurrences"][-1]["reasons"]] == ["end_at"]
    assert body["window"]["after_end"] == "delete"
    stored = (await client.get("/v1/jobs/win")).json()
    assert stored["end_at"] == job["end_at"] and stored["after_end"] == "delete"
    assert stored["next_run_at"] == format_ms(start)
    patched = await client.patch("/v1/jobs/win", json={"end_at": format_ms(start + hour)})
    assert patched.status_code == 200, patched.text
    answer = await client.get("/v1/jobs/win/preview", params={"count": 10})
    assert [o["at"] for o in answer.json()["occurrences"]] == [
        format_ms(start),
        format_ms(start + hour),
    ]
    bad = await client.post(
        "/v1/jobs", json={**job, "id": "bad", "end_at": format_ms(start - hour)}
    )
    assert bad.status_code == 422, bad.text
    assert "end_at" in bad.text and "must be after start_at" in bad.text
    once = {"id": "once", "at": format_ms(start), "handler": "demo.echo",
            "end_at": format_ms(start + hour)}  # fmt: skip
    refused = await client.post("/v1/jobs", json=once)
    assert refused.status_code == 422 and "cron schedule only" in refused.text


async def test_a_jittered_job_over_http_previews_its_offsets_and_a_bad_jitter_is_a_422(
    client: httpx.AsyncClient,
) -> None:
    """a per-minute job with jitter_ms: the job answer carries it, the preview gives each
    occurrence the leader's offset and the instant it runs at; a jitter not below the period,
    or on a one-off, is a 422 naming jitter_ms"""
    job = {"id": "spread", "schedule": "* * * * *", "handler": "demo.echo", "jitter_ms": 30_000}
    body = await _preview(client, job, 3)
    assert body["jitter_ms"] == 30_000
    key = f"{client.headers['X-Test-Tenant']}/spread"
    for occurrence in body["occurrences"]:
        at = parse_instant(occurrence["at"], "at")
        offset = jitter_offset(key, at, 30_000, at + 60_000)
        assert occurrence["jitter"] == {"offset_ms": offset, "runs_at": format_ms(at + offset)}
        assert occurrence["reasons"][-1]["rule"] == "jitter_ms"
    stored = (await client.get("/v1/jobs/spread")).json()
    assert stored["jitter_ms"] == 30_000
    too_long = await client.post("/v1/jobs", json={**job, "id": "wide", "jitter_ms": 60_000})
    assert too_long.status_code == 422, too_long.text
    assert too_long.json()["detail"][0]["field"] == "jitter_ms"
    assert "period" in too_long.text and "60000 ms" in too_long.text
    once = {"id": "once", "at": format_ms(now_ms() + 3_600_000), "handler": "demo.echo",
            "jitter_ms": 10}  # fmt: skip
    refused = await client.post("/v1/jobs", json=once)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["field"] == "jitter_ms"
    plain = await _preview(client, {"id": "plain", "schedule": "@hourly", "handler": "h.x"}, 1)
    assert plain["jitter_ms"] is None and plain["occurrences"][0]["jitter"] is None
