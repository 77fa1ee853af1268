"""Exclusion calendars on the real stack (issue 50, D-286): the tenants' API, a running
scheduler recording excluded occurrences as skipped with the calendar and its rule, an edit
reaching a running leader and one that starts after it, and a delete refused while jobs name
the calendar.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from tickwheel.clock import now_ms
from tickwheel.registry_api import calendars
from tickwheel.registry_api.document import Limits
from tickwheel.registry_api.http import create_app
from tickwheel.registry_api.store import RegistryStore

from .conftest import SchedEnv, running_scheduler, upsert_op, wait_for

pytestmark = pytest.mark.integration

SHARDS = 64


@pytest.fixture
async def pool(db_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    created = await asyncpg.create_pool(db_dsn, min_size=1, max_size=4)
    yield created
    await created.close()


@pytest.fixture
async def api(pool: asyncpg.Pool) -> AsyncIterator[tuple[RegistryStore, httpx.ASGITransport]]:
    store = RegistryStore(pool, SHARDS)
    app = create_app(store, Limits(shards=SHARDS))
    yield store, httpx.ASGITransport(app=app)


async def _tenant(
    api: tuple[RegistryStore, httpx.ASGITransport],
) -> tuple[str, httpx.AsyncClient]:
    store, transport = api
    name = f"t-{uuid.uuid4().hex[:12]}"
    key = await store.create_tenant(name)
    client = httpx.AsyncClient(
        transport=transport,
        base_url="http://registry.test",
        headers={"Authorization": f"Bearer {key}"},
    )
    return name, client


def _fields(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    return {d["field"]: d["message"] for d in response.json()["detail"]}


HOLIDAYS = {"timezone": "Europe/Berlin", "dates": ["2026-12-25", "2026-12-26"]}


async def test_a_tenant_creates_reads_lists_replaces_and_deletes_a_calendar(api: Any) -> None:
    """PUT creates (201) then replaces (version on) or leaves unchanged; GET and the list show
    what is stored with defaults filled in; another tenant sees none of it; DELETE removes it"""
    _, client = await _tenant(api)
    _, other = await _tenant(api)
    async with client, other:
        created = await client.put("/v1/calendars/holidays", json=HOLIDAYS)
        assert created.status_code == 201, created.text
        body = created.json()
        assert body["name"] == "holidays" and body["version"] == 1
        assert body["dates"] == HOLIDAYS["dates"] and body["weekdays"] == []
        assert body["timezone"] == "Europe/Berlin"
        same = await client.put("/v1/calendars/holidays", json=HOLIDAYS)
        assert same.status_code == 200 and same.json()["version"] == 1
        changed = await client.put("/v1/calendars/holidays", json={**HOLIDAYS, "weekdays": ["sun"]})
        assert changed.status_code == 200 and changed.json()["version"] == 2
        got = await client.get("/v1/calendars/holidays")
        assert got.json()["weekdays"] == ["sun"]
        listed = await client.get("/v1/calendars")
        assert [c["name"] for c in listed.json()["items"]] == ["holidays"]
        assert (await other.get("/v1/calendars/holidays")).status_code == 404
        assert (await other.get("/v1/calendars")).json() == {"items": []}
        assert (await other.delete("/v1/calendars/holidays")).status_code == 404
        assert (await client.delete("/v1/calendars/holidays")).status_code == 204
        assert (await client.get("/v1/calendars/holidays")).status_code == 404
        assert (await client.delete("/v1/calendars/holidays")).status_code == 404
        again = await client.put("/v1/calendars/holidays", json=HOLIDAYS)
        assert again.status_code == 201 and again.json()["version"] == 4


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"dates": ["2026-12-25", "2026-02-30"]}, "dates.1"),
        ({"dates": [f"2026-01-{d:02d}" for d in range(1, 29)] * 400}, "dates"),
        ({"weekdays": ["sunday"]}, "weekdays.0"),
        ({"daily": [{"start": "12:00", "end": "25:00"}]}, "daily.0.end"),
        ({"daily": [{"start": "12:00", "end": "12:00"}]}, "daily.0.end"),
        ({"cron": ["0 H * * *"]}, "cron.0"),
        ({"cron": ["0 0 31 2 *"]}, "cron.0"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"dates": [], "holidays": []}, "holidays"),
    ],
)
async def test_a_bad_calendar_is_refused_naming_the_field(
    api: Any, doc: dict[str, Any], field: str
) -> None:
    """422 naming the field at fault, and nothing stored"""
    _, client = await _tenant(api)
    async with client:
        answer = await client.put("/v1/calendars/bad", json=doc)
        assert field in _fields(answer), answer.text
        assert (await client.get("/v1/calendars/bad")).status_code == 404


async def test_a_job_names_only_calendars_its_tenant_has(api: Any) -> None:
    """an unknown calendar is a 422 naming calendars.N; a one-off cannot name one; a
    calendar of another tenant is unknown to this one"""
    _, client = await _tenant(api)
    _, other = await _tenant(api)
    async with client, other:
        assert (await other.put("/v1/calendars/theirs", json={})).status_code == 201
        assert (await client.put("/v1/calendars/mine", json={})).status_code == 201
        job = {"id": "j", "schedule": "0 9 * * *", "handler": "demo.echo"}
        unknown = await client.post("/v1/jobs", json={**job, "calendars": ["mine", "theirs"]})
        assert "no calendar named 'theirs'" in _fields(unknown)["calendars.1"]
        assert (await client.get("/v1/jobs/j")).status_code == 404
        once = {"id": "o", "at": "2031-01-01T00:00:00Z", "handler": "demo.echo"}
        assert "calendars" in _fields(
            await client.post("/v1/jobs", json={**once, "calendars": ["mine"]})
        )
        twice = await client.post("/v1/jobs", json={**job, "calendars": ["mine", "mine"]})
        assert "calendars" in _fields(twice)
        made = await client.post("/v1/jobs", json={**job, "calendars": ["mine"]})
        assert made.status_code == 201 and made.json()["calendars"] == ["mine"]


async def test_a_calendar_jobs_name_is_not_deleted_unless_forced(api: Any) -> None:
    """409 listing the jobs that name it; a deleted job no longer counts; force deletes it
    anyway"""
    _, client = await _tenant(api)
    async with client:
        await client.put("/v1/calendars/c", json={"weekdays": ["sat"]})
        for job_id in ("a", "b"):
            doc = {
                "id": job_id,
                "schedule": "0 9 * * *",
                "handler": "demo.echo",
                "calendars": ["c"],
            }
            assert (await client.post("/v1/jobs", json=doc)).status_code == 201
        refused = await client.delete("/v1/calendars/c")
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"] == "calendar_in_use"
        assert refused.json()["jobs"] == ["a", "b"]
        assert (await client.delete("/v1/jobs/a")).status_code == 204
        assert (await client.delete("/v1/calendars/c")).json()["jobs"] == ["b"]
        assert (await client.get("/v1/calendars/c")).status_code == 200
        assert (await client.delete("/v1/calendars/c?force=true")).status_code == 204
        assert (await client.get("/v1/calendars/c")).status_code == 404
        # the job still names it, and runs as if it excluded nothing
        assert (await client.get("/v1/jobs/b")).json()["calendars"] == ["c"]
        preview = (await client.get("/v1/jobs/b/preview?count=7")).json()
        assert preview["calendars"] == [{"name": "c", "exists": False}]
        assert all(o["excluded"] is None for o in preview["occurrences"])


async def test_the_preview_names_the_calendar_and_rule_excluding_an_occurrence(api: Any) -> None:
    """of a week of daily occurrences, the Saturday is marked excluded with the calendar and
    rule; the others are not"""
    _, client = await _tenant(api)
    async with client:
        await client.put("/v1/calendars/weekend", json={"weekdays": ["sat"]})
        job = {"id": "p", "schedule": "0 9 * * *", "handler": "demo.echo"}
        await client.post("/v1/jobs", json={**job, "calendars": ["weekend"]})
        preview = (await client.get("/v1/jobs/p/preview?count=7")).json()
        assert preview["calendars"] == [{"name": "weekend", "exists": True}]
        marked = {
            dt.datetime.fromisoformat(o["at"]).weekday(): o["excluded"]
            for o in preview["occurrences"]
        }
        assert marked.pop(5) == "calendar weekend: weekday sat (UTC)"
        assert set(marked.values()) == {None} and len(marked) == 6
        saturday = [o for o in preview["occurrences"] if o["excluded"]]
        assert saturday[0]["reasons"][-1]["rule"] == "calendars"


async def _put(sched: SchedEnv, name: str, doc: dict[str, Any]) -> None:
    pool = await asyncpg.create_pool(sched.dsn, min_size=1, max_size=2)
    try:
        result = await calendars.put(pool, sched.tenant, name, calendars.check_calendar(name, doc))
        assert result.outcome.value in ("created", "updated"), result
    finally:
        await pool.close()


def _day_ms(day: dt.date, hour: int) -> int:
    return int(dt.datetime(day.year, day.month, day.day, hour, tzinfo=dt.UTC).timestamp() * 1000)


async def test_a_holiday_skips_exactly_that_days_run(sched: SchedEnv) -> None:
    """a daily job catching up four missed days (misfire run_all) runs three of them: the
    holiday's occurrence is recorded skipped, naming the calendar and the date"""
    today = dt.datetime.now(dt.UTC).date()
    days = [today - dt.timedelta(days=n) for n in (4, 3, 2, 1)]
    holiday = days[2]
    await _put(sched, "holidays", {"dates": [holiday.isoformat()]})
    await sched.register(
        {"id": "daily", "schedule": "0 9 * * *", "handler": "demo.echo",
         "calendars": ["holidays"],
         "misfire": {"policy": "run_all", "grace_ms": 0, "max_catchup": 10}}
    )  # fmt: skip
    await sched.fetch(
        "UPDATE jobs SET next_run_at = 'epoch'::timestamptz + $3::bigint * interval '1 ms'"
        " WHERE tenant = $1 AND job_id = $2",
        sched.tenant,
        "daily",
        _day_ms(days[0], 9),
    )
    async with running_scheduler(sched, "a"):
        await wait_for(lambda: _count(sched, "daily", len(days)), 30, what="the catch-up")
    runs = {r["ms"]: r for r in await sched.runs("daily")}
    for day in days:
        row = runs[_day_ms(day, 9)]
        if day == holiday:
            assert row["status"] == "skipped"
            assert row["skip_reason"] == f"calendar holidays: date {holiday.isoformat()} (UTC)"
        else:
            assert row["status"] != "skipped", row
            assert row["skip_reason"] is None


async def _count(sched: SchedEnv, job_id: str, at_least: int) -> bool:
    return len(await sched.runs(job_id)) >= at_least


async def test_a_calendar_edit_reaches_a_running_leader_and_a_later_one(sched: SchedEnv) -> None:
    """an every-second job naming a calendar that first excludes nothing: after the calendar
    is changed to exclude the even seconds, a running leader skips them within the poll's
    second, naming the rule; a leader started after a further edit decides by that one"""
    await _put(sched, "gate", {"dates": ["2001-01-01"]})
    await sched.register(
        {"id": "tick", "schedule": "* * * * * *", "handler": "demo.echo", "calendars": ["gate"]}
    )
    async with running_scheduler(sched, "a"):
        await wait_for(lambda: _count(sched, "tick", 3), 30, what="runs before the edit")
        assert all(r["status"] != "skipped" for r in await sched.runs("tick"))
        await _put(sched, "gate", {"cron": ["*/2 * * * * *"]})
        edited = now_ms()
        await wait_for(lambda: now_ms() > edited + 5000, 10)
    after = [r for r in await sched.runs("tick") if r["ms"] >= edited + 2000]
    assert len(after) >= 2
    for r in after:
        even = r["ms"] // 1000 % 2 == 0
        assert (r["status"] == "skipped") == even, (r["ms"], r["status"])
        if even:
            assert r["skip_reason"] == "calendar gate: cron '*/2 * * * * *' (UTC)"
    # edited while no leader runs: the next one reads it before it leads the shard
    await _put(sched, "gate", {"daily": [{"start": "00:00", "end": "24:00"}], "weekdays": []})
    stopped = now_ms()
    async with running_scheduler(sched, "b"):

        async def three_more() -> bool:
            return len([r for r in await sched.runs("tick") if r["ms"] > stopped]) >= 3

        await wait_for(three_more, 30, what="runs of the next leader")
    later = [r for r in await sched.runs("tick") if r["ms"] > stopped]
    assert later and all(r["status"] == "skipped" for r in later)
    assert {r["skip_reason"] for r in later} == {"calendar gate: daily 00:00-24:00 (UTC)"}


async def test_a_kafka_registration_stays_a_replay_after_an_http_write(api: Any) -> None:
    """put_calendar applied from (partition 2, offset 100), then the tenant replaces the
    calendar over HTTP: the registration redelivered changes nothing, and neither does a
    redelivered delete"""
    store, _ = api
    tenant, client = await _tenant(api)
    async with client:
        doc = calendars.check_calendar("h", {"dates": ["2026-12-25"]})
        first = await calendars.put(store.pool, tenant, "h", doc, source=(2, 100))
        assert first.outcome.value == "created"
        newer = {"dates": ["2026-12-25", "2026-12-26"]}
        assert (await client.put("/v1/calendars/h", json=newer)).json()["version"] == 2
        again = await calendars.put(store.pool, tenant, "h", doc, source=(2, 100))
        assert again.outcome.value == "replay"
        gone = await calendars.delete(store.pool, tenant, "h", source=(2, 99))
        assert gone.outcome.value == "replay"
        stored = (await client.get("/v1/calendars/h")).json()
        assert stored["dates"] == newer["dates"] and stored["version"] == 2


async def test_racing_creations_never_pass_the_tenants_limit(api: Any) -> None:
    """a tenant at 99 calendars, ten creations at once: exactly one is created"""
    store, _ = api
    tenant, client = await _tenant(api)
    await client.aclose()
    empty = calendars.check_calendar("x", {})
    for i in range(calendars.MAX_TENANT_CALENDARS - 1):
        await calendars.put(store.pool, tenant, f"c{i}", empty)
    results = await asyncio.gather(
        *(calendars.put(store.pool, tenant, f"new{i}", empty) for i in range(10))
    )
    outcomes = sorted(r.outcome.value for r in results)
    assert outcomes == ["created"] + ["over_limit"] * 9, outcomes
    assert len(await calendars.list_all(store.pool, tenant)) == calendars.MAX_TENANT_CALENDARS


async def test_a_job_naming_a_force_deleted_calendar_is_still_unchanged_when_sent_again(
    api: Any,
) -> None:
    """the same document again is unchanged (200), not refused; a changed one is refused
    naming the calendar"""
    _, client = await _tenant(api)
    async with client:
        await client.put("/v1/calendars/gone", json={})
        job = {"id": "j", "schedule": "0 9 * * *", "handler": "demo.echo", "calendars": ["gone"]}
        assert (await client.post("/v1/jobs", json=job)).status_code == 201
        assert (await client.delete("/v1/calendars/gone?force=true")).status_code == 204
        same = await client.post("/v1/jobs", json=job)
        assert same.status_code == 200 and same.json()["version"] == 1
        changed = await client.post("/v1/jobs", json={**job, "priority": "high"})
        assert "no calendar named 'gone'" in _fields(changed)["calendars.0"]


async def test_a_delete_racing_a_job_that_names_the_calendar_sees_the_job(api: Any) -> None:
    """a job batch naming the calendar is inside its transaction (the calendar share-locked)
    when the delete starts: the delete waits for it, then finds the job and is refused"""
    store, _ = api
    tenant, client = await _tenant(api)
    await client.aclose()
    await calendars.put(store.pool, tenant, "c", calendars.check_calendar("c", {}))
    inside, release = asyncio.Event(), asyncio.Event()

    async def hold(_conn: Any, _results: Any) -> None:
        inside.set()
        await release.wait()

    doc = {"id": "j", "schedule": "0 9 * * *", "handler": "demo.echo", "calendars": ["c"]}
    writing = asyncio.create_task(store.apply([upsert_op(tenant, doc, SHARDS)], within=hold))
    await asyncio.wait_for(inside.wait(), 10)
    deleting = asyncio.create_task(calendars.delete(store.pool, tenant, "c"))
    await asyncio.sleep(0.5)
    assert not deleting.done(), "the delete waits for the batch that names the calendar"
    release.set()
    [applied] = await writing
    assert applied.outcome.value == "created"
    result = await asyncio.wait_for(deleting, 10)
    assert result.outcome.value == "in_use" and result.jobs == ("j",)
