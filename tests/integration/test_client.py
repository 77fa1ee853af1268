"""`tickwheel.client` against the real stack: a `tickwheel registry` process (HTTP and intake) on
the test's database and topics, with a scheduler and a worker where runs must happen.

A service written against the client registers, edits and triggers jobs and follows their runs
with no hand-built JSON body; the registrar learns what became of each registration from the
topics and the intake's committed offsets alone."""

from __future__ import annotations

import asyncio
import re
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import orjson
import pytest
from confluent_kafka import KafkaException

from tickwheel.client import (
    AsyncClient,
    CalendarDocument,
    CalendarInUse,
    Client,
    InvalidRequest,
    JobDocument,
    Misfire,
    NotFound,
)
from tickwheel.client.registrar import Outcome, Registrar
from tickwheel.kafka.admin import create_topics, delete_topics
from tickwheel.registry_api.store import RegistryStore
from tickwheel.testing import read_topic
from tickwheel.topics import Topics
from tickwheel.wire.schemas import validator

from .conftest import SchedEnv

pytestmark = pytest.mark.integration

HANDLERS = Path(__file__).parent  # client_doc_handlers.py: the handler names of docs/CLIENT.md


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Deployment:
    """A registry (and, on demand, a scheduler and a worker) for one test, and a tenant's key."""

    env: SchedEnv
    url: str
    tenant: str
    api_key: str

    def start_runners(self, log: Path) -> None:
        """A scheduler and a worker that runs the handlers of client_doc_handlers.py."""
        self.env.spawn("s1")
        log.touch()
        self.env.spawn_command(
            "worker",
            ["worker", "--handlers", "client_doc_handlers", "--id", "w1"],
            TW_DOC_LOG=str(log),
            PYTHONPATH=str(HANDLERS),
            TICKWHEEL_KAFKA_SESSION_TIMEOUT_MS="6000",
        )


async def _tenant_key(dsn: str, tenant: str) -> str:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
    try:
        return await RegistryStore(pool, 8).create_tenant(tenant)
    finally:
        await pool.close()


def start_registry(sched: SchedEnv, **extra_env: str) -> Deployment:
    port = free_port()
    tenant = f"c{uuid.uuid4().hex[:10]}"
    key = asyncio.run(_tenant_key(sched.dsn, tenant))
    proc = sched.spawn_command("registry", ["registry", "--port", str(port)], **extra_env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert proc.poll() is None, sched.log_text("registry")
        assert time.monotonic() < deadline, "the registry did not become healthy"
        time.sleep(0.2)
    return Deployment(sched, url, tenant, key)


@pytest.fixture
def deployment(sched: SchedEnv) -> Deployment:
    """A registry as deployed by default: it takes only signed Kafka registrations."""
    return start_registry(sched)


def _registrations_follow_their_schema(d: Deployment) -> int:
    """Every registration the registrar produced is valid by registration.schema.json."""
    check = validator("registration")
    values = [
        orjson.loads(m.value() or b"")
        for m in read_topic(d.env.stack.kafka, d.env.topics.registrations)
    ]
    assert [check(v) for v in values] == [[] for _ in values]
    return len(values)


# --- HTTP -----------------------------------------------------------------------------------


def test_a_service_manages_jobs_with_no_hand_built_body(deployment: Deployment) -> None:
    """create, get, patch, pause, resume, preview, list and delete through `Client`, each
    answer typed; bad input is an InvalidRequest naming its fields, a missing job NotFound."""
    with Client(deployment.url, deployment.api_key) as tw:
        created = tw.create(
            JobDocument(
                id="report", schedule="0 6 * * *", timezone="Europe/Berlin", handler="reports.build"
            )
        )
        assert (created.version, created.status, created.priority) == (1, "active", "normal")
        assert tw.create(JobDocument(id="report", schedule="0 6 * * *", timezone="Europe/Berlin",
                                     handler="reports.build")).version == 1  # fmt: skip
        patched = tw.patch("report", {"priority": "high", "misfire": {"policy": "skip"}})
        assert (patched.version, patched.priority, patched.misfire.policy) == (2, "high", "skip")
        assert tw.pause("report").status == "paused"
        assert tw.resume("report").status == "active"
        preview = tw.preview("report", count=3)
        assert [o.local[11:] for o in preview.occurrences] == ["06:00:00"] * 3
        for n in range(3):
            tw.create({"id": f"extra-{n}", "at": "2031-01-01T00:00:00Z", "handler": "a.b"})
        assert [j.id for j in tw.jobs(page_size=2)] == ["extra-0", "extra-1", "extra-2", "report"]
        assert [j.id for j in tw.jobs(kind="cron")] == ["report"]
        with pytest.raises(InvalidRequest) as bad:
            tw.create({"id": "x", "schedule": "0 9 * * MON-FRI", "handler": "a.b",
                       "priority": "urgent", "colour": "blue"})  # fmt: skip
        assert {f.field for f in bad.value.fields} == {"priority", "colour"}
        tw.delete("report")
        with pytest.raises(NotFound):
            tw.get("report")


def test_a_service_triggers_backfills_and_follows_runs(
    deployment: Deployment, tmp_path: Path
) -> None:
    """A trigger (idempotent by its key) runs on the real scheduler and worker and the run
    list shows it succeeded; a backfill answers its counts; a completed one-off is a Conflict."""
    deployment.start_runners(tmp_path / "runs.log")
    with Client(deployment.url, deployment.api_key) as tw:
        tw.create(JobDocument(id="nightly", schedule="0 3 * * *", handler="reports.build",
                              misfire=Misfire(policy="skip")))  # fmt: skip
        first = tw.trigger("nightly", idempotency_key="deploy-1")
        assert tw.trigger("nightly", idempotency_key="deploy-1").run_key == first.run_key
        deadline = time.monotonic() + 60
        while [(r.run_key, r.status) for r in tw.runs("nightly")] != [(first.run_key, "succeeded")]:
            assert time.monotonic() < deadline, list(tw.runs("nightly"))
            time.sleep(0.2)
        now = datetime.now(UTC)
        done = tw.backfill("nightly", now - timedelta(days=3), now - timedelta(hours=1))
        assert (done.occurrences, done.existing) in ((2, 0), (3, 0))
        assert done.runs == done.occurrences
    assert first.run_key in (tmp_path / "runs.log").read_text()


async def test_the_async_client_does_the_same(deployment: Deployment) -> None:
    """AsyncClient against the same registry: create, list runs (none yet), trigger, list,
    a missing job NotFound, delete."""
    async with AsyncClient(deployment.url, deployment.api_key) as tw:
        await tw.create(JobDocument(id="once", at="2030-01-01T00:00:00Z", handler="a.b"))
        assert [r async for r in tw.runs("once")] == []
        assert (await tw.trigger("once")).run_key.startswith(f"{deployment.tenant}/once@")
        assert [j.id async for j in tw.jobs()] == ["once"]
        with pytest.raises(NotFound):
            await tw.pause("missing")
        await tw.delete("once")
        with pytest.raises(NotFound):
            await tw.delete("once")


def test_a_service_manages_calendars_with_no_hand_built_body(deployment: Deployment) -> None:
    """put (created, then unchanged), get, list; a job naming the calendar; a delete refused
    with the jobs (CalendarInUse), then forced; bad input an InvalidRequest naming the field, a
    missing calendar NotFound"""
    holidays = CalendarDocument(timezone="Europe/Berlin", dates=["2026-12-25", "2026-12-26"])
    with Client(deployment.url, deployment.api_key) as tw:
        created = tw.put_calendar("holidays", holidays)
        assert (created.name, created.version, created.weekdays) == ("holidays", 1, [])
        assert tw.put_calendar("holidays", holidays).version == 1
        assert tw.put_calendar("weekends", {"weekdays": ["sat", "sun"]}).version == 1
        assert tw.get_calendar("holidays").dates == ["2026-12-25", "2026-12-26"]
        assert [c.name for c in tw.calendars()] == ["holidays", "weekends"]
        tw.create(JobDocument(id="uses", schedule="0 3 * * *", handler="a.b",
                              calendars=["holidays"]))  # fmt: skip
        with pytest.raises(CalendarInUse) as in_use:
            tw.delete_calendar("holidays")
        assert (in_use.value.jobs, in_use.value.more_jobs) == (["uses"], False)
        tw.delete_calendar("holidays", force=True)
        with pytest.raises(NotFound):
            tw.get_calendar("holidays")
        with pytest.raises(NotFound):
            tw.delete_calendar("holidays")
        with pytest.raises(InvalidRequest) as bad:
            tw.put_calendar("zoned", {"timezone": "Mars/Olympus"})
        assert [f.field for f in bad.value.fields] == ["timezone"]


async def test_the_async_client_manages_calendars_alike(deployment: Deployment) -> None:
    """AsyncClient: put, list, get, delete, and a missing calendar NotFound"""
    async with AsyncClient(deployment.url, deployment.api_key) as tw:
        await tw.put_calendar("nights", {"daily": [{"start": "22:00", "end": "06:00"}]})
        assert [c.name for c in await tw.calendars()] == ["nights"]
        assert (await tw.get_calendar("nights")).daily[0].start == "22:00"
        await tw.delete_calendar("nights")
        with pytest.raises(NotFound):
            await tw.get_calendar("nights")


# --- Kafka ----------------------------------------------------------------------------------


def test_the_registrar_puts_and_deletes_calendars(deployment: Deployment) -> None:
    """Signed calendar registrations: a put is applied (then a job naming it), a delete while
    the job names it is rejected naming the job, a forced one applied, an invalid calendar
    rejected naming the message's field; each message follows registration.schema.json"""
    outcomes: list[Outcome] = []
    env = deployment.env
    with Registrar(
        env.stack.kafka,
        deployment.tenant,
        api_key=deployment.api_key,
        prefix=env.topics.prefix,
        on_outcome=outcomes.append,
        versions=True,
    ) as registrar:
        registrar.put_calendar("holidays", CalendarDocument(dates=["2026-12-25"]))
        registrar.put_calendar("zoned", {"timezone": "Mars/Olympus"})
        assert registrar.flush(60) == 0
        # on another partition than the calendar's: sent once the calendar is applied
        registrar.upsert({"id": "uses", "schedule": "0 3 * * *", "handler": "a.b",
                          "calendars": ["holidays"]})  # fmt: skip
        assert registrar.flush(60) == 0
        registrar.delete_calendar("holidays")
        assert registrar.flush(60) == 0
        registrar.delete_calendar("holidays", force=True)
        assert registrar.flush(60) == 0
    seen = [(o.op, o.job_id, o.status, o.version) for o in outcomes]
    # the first two were in flight together: their outcomes come in either order
    assert sorted(seen[:2]) == [
        ("put_calendar", "holidays", "applied", None),
        ("put_calendar", "zoned", "rejected", None),
    ]
    assert seen[2:] == [
        ("upsert", "uses", "applied", outcomes[2].version),
        ("delete_calendar", "holidays", "rejected", None),
        ("delete_calendar", "holidays", "applied", None),
    ]
    by_name = {o.job_id: o for o in outcomes[:2]}
    assert (by_name["zoned"].reason or "").startswith("calendar.timezone"), by_name["zoned"]
    assert "'uses'" in (outcomes[3].reason or ""), outcomes[3].reason
    with Client(deployment.url, deployment.api_key) as tw:
        assert tw.calendars() == []
    assert _registrations_follow_their_schema(deployment) == 5


def test_the_registrar_reports_applied_and_rejected_with_the_reason(deployment: Deployment) -> None:
    """Signed registrations: a good upsert is applied (and readable over HTTP), a bad schedule
    and a pause of an unknown job are rejected with the registry's reasons, and an unsigned
    producer is told it is unsigned — each outcome reported once, to the callback."""
    outcomes: list[Outcome] = []
    env = deployment.env
    with Registrar(
        env.stack.kafka,
        deployment.tenant,
        api_key=deployment.api_key,
        prefix=env.topics.prefix,
        on_outcome=outcomes.append,
    ) as registrar:
        registrar.upsert(JobDocument(id="good", schedule="*/5 * * * *", handler="a.b"))
        registrar.upsert({"id": "bad", "schedule": "0 25 * * *", "handler": "a.b"})
        registrar.pause("ghost")
        assert registrar.flush(60) == 0
    by_job = {o.job_id: o for o in outcomes}
    assert len(outcomes) == 3
    assert by_job["good"].status == "applied" and by_job["good"].reason is None
    assert by_job["bad"].status == "rejected"
    assert "hour" in (by_job["bad"].reason or "")
    assert by_job["ghost"].status == "rejected" and "no such job" in (by_job["ghost"].reason or "")
    with Client(deployment.url, deployment.api_key) as tw:
        assert tw.get("good").schedule == "*/5 * * * *"
    unsigned: list[Outcome] = []
    with Registrar(env.stack.kafka, deployment.tenant, prefix=env.topics.prefix,
                   on_outcome=unsigned.append) as registrar:  # fmt: skip
        registrar.trigger("good")
        assert registrar.flush(60) == 0
    [refused] = unsigned
    assert refused.status == "rejected" and (refused.reason or "").startswith("unsigned")
    assert _registrations_follow_their_schema(deployment) == 4
    # The registry's /metrics counts what its intake settled (the intake-rejections alert);
    # a batch is counted once the intake has taken its next one, so allow it a moment.
    wanted = [
        'tickwheel_registry_intake_registrations_total{result="applied"} 1.0',
        'tickwheel_registry_intake_registrations_total{result="rejected"} 3.0',
    ]
    deadline = time.monotonic() + 15
    while not all(line in (text := httpx.get(f"{deployment.url}/metrics").text) for line in wanted):
        assert time.monotonic() < deadline, text
        time.sleep(0.2)


def test_registrar_versions_increase_and_a_stale_one_is_rejected(deployment: Deployment) -> None:
    """versions=True gives each op of a job a version above the last (the clock's ms); the
    stored job carries the newest; an explicit older version is rejected as stale."""
    outcomes: list[Outcome] = []
    env = deployment.env
    clock = iter([5_000, 5_000, 4_000]).__next__  # a clock that stalls, then steps back
    with Registrar(env.stack.kafka, deployment.tenant, api_key=deployment.api_key,
                   prefix=env.topics.prefix, on_outcome=outcomes.append, versions=True,
                   clock=clock) as registrar:  # fmt: skip
        registrar.upsert(JobDocument(id="v", schedule="0 * * * *", handler="a.b"))
        registrar.pause("v")
        registrar.resume("v")
        registrar.pause("v", version=3)
        assert registrar.flush(60) == 0
    # Reported as each becomes known (a rejection can come before an earlier one's applied).
    outcomes.sort(key=lambda o: o.offset or 0)
    assert [(o.op, o.version, o.status) for o in outcomes] == [
        ("upsert", 5_000, "applied"),
        ("pause", 5_001, "applied"),
        ("resume", 5_002, "applied"),
        ("pause", 3, "rejected"),
    ]
    assert (outcomes[-1].reason or "").startswith("stale")
    with Client(deployment.url, deployment.api_key) as tw:
        job = tw.get("v")
    assert (job.version, job.status) == (5_002, "active")


def test_a_registration_kafka_does_not_store_is_reported_failed(deployment: Deployment) -> None:
    """A deployment whose registrations topic is missing: the delivery fails and the outcome
    is `failed` with Kafka's error; one too large for the producer raises at the call, and
    neither stays pending."""
    kafka = deployment.env.stack.kafka
    topics = Topics(f"nr{uuid.uuid4().hex[:10]}")
    create_topics(kafka, [topics.rejected], partitions=1, replication=1)
    outcomes: list[Outcome] = []
    try:
        with Registrar(kafka, deployment.tenant, prefix=topics.prefix, on_outcome=outcomes.append,
                       producer_config={"message.timeout.ms": 1500}) as registrar:  # fmt: skip
            registrar.pause("nowhere")
            assert registrar.flush(30) == 0
            with pytest.raises(KafkaException, match="MSG_SIZE_TOO_LARGE"):
                registrar.upsert({"id": "big", "at": "2031-01-01T00:00:00Z", "handler": "a.b",
                                  "payload": {"blob": "x" * 2_000_000}})  # fmt: skip
            assert registrar.pending == 0
    finally:
        delete_topics(kafka, [topics.rejected])
    [failed] = outcomes
    assert (failed.status, failed.job_id, failed.partition) == ("failed", "nowhere", None)
    assert failed.reason


# --- docs/CLIENT.md -------------------------------------------------------------------------

CLIENT_MD = Path(__file__).resolve().parents[2] / "docs" / "CLIENT.md"
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
TEXT_BLOCK = re.compile(r"```text\n(.*?)```", re.S)


def test_the_client_guide_s_examples_run_as_written(
    deployment: Deployment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every Python example of docs/CLIENT.md runs, in order, against the real registry,
    scheduler and worker; what they print is what they did (the job, its succeeded run, the
    refused fields, the registrar's outcomes), and the guide's printed sample is that output."""
    deployment.start_runners(tmp_path / "runs.log")
    env = deployment.env
    for name, value in {
        "TICKWHEEL_URL": deployment.url,
        "TICKWHEEL_API_KEY": deployment.api_key,
        "TICKWHEEL_TENANT": deployment.tenant,
        "TICKWHEEL_KAFKA": env.stack.kafka,
        "TICKWHEEL_TOPIC_PREFIX": env.topics.prefix,
    }.items():
        monkeypatch.setenv(name, value)
    guide = CLIENT_MD.read_text()
    examples = PYTHON_BLOCK.findall(guide)
    assert len(examples) == 5
    for n, code in enumerate(examples, 1):
        exec(compile(code, f"docs/CLIENT.md example {n}", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "created nightly-report version 1 next " in out
    [ran] = [line for line in lines if line.startswith(f"{deployment.tenant}/nightly-report@")]
    assert ran.endswith(" succeeded attempt 1 origin trigger")
    assert "refused: priority - Input should be 'high', 'normal' or 'low'" in lines
    assert "not found: there is no job with id 'no-such-job'" in lines
    assert "calendar holidays version 1" in lines
    assert "still named by ['payroll']" in lines
    assert "calendars ['holidays']" in lines
    assert "job nightly-report 30 2 * * *" in out
    assert len([line for line in lines if line.startswith("fires ")]) == 3
    [sample] = TEXT_BLOCK.findall(guide)
    for shown in sample.splitlines():
        prefix = shown.split("…")[0]
        assert any(line.startswith(prefix) for line in lines), (shown, out)
    assert _registrations_follow_their_schema(deployment) == 3
