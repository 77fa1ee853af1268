"""The operators' page beyond the jobs list (issue 51): one job with its actions (pause with a
note, resume, trigger, backfill after its count, delete after a confirmation), one run, and
the dead letters replayed from the page — against a real `tickwheel registry` subprocess,
scheduler and worker, in a real headless Chromium; what each action did is read back from the
database. Screenshots of each view are kept (TICKWHEEL_ARTIFACTS)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg
import pytest

from tickwheel.clock import now_ms
from tickwheel.envelopes.dead_letters import DeadLetter
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.kafka.clients import producer
from tickwheel.registry_api.document import Limits, parse_document, validate_job
from tickwheel.registry_api.state import Op
from tickwheel.registry_api.store import RegistryStore

from .conftest import TEST_SHARDS, SchedEnv
from .test_ops_page import (
    SCENERY,
    SCREEN,
    Registry,
    _audit,
    _job,
    _open,
    _post,
    _registry,
    _until,
    start_registry,
)
from .test_ops_page import (
    _screenshot as screenshot,
)
from .test_status_page import DevTools, _cli, _get, headless_chromium

pytestmark = pytest.mark.integration

MINUTE_MS = 60_000
NOTE = 'CRM maintenance <b>until 14:00</b> <img src=x onerror="window.pwned=1">'


@pytest.fixture
def ops(sched: SchedEnv) -> Registry:
    """A registry subprocess with an operator key, a tenant key and three cron jobs."""
    return start_registry(sched)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    with headless_chromium(tmp_path, SCREEN) as chromium:
        yield chromium


def _token(registry: Registry) -> str:
    token: str = _get(f"{registry.base}/v1/ops/csrf", registry.operator_key)[1]["token"]
    return token


def _fetch(sched: SchedEnv, query: str, *args: Any) -> list[asyncpg.Record]:
    return asyncio.run(sched.fetch(query, *args))


def _go(page: DevTools, fragment: str, loaded: str) -> None:
    """Open the view at `#fragment` and wait for its data (`loaded`: the body's counter)."""
    before = page.evaluate(f"Number(document.body.dataset.{loaded} || 0)")
    page.evaluate(f"location.hash = {json.dumps(fragment)}; true")
    _until(
        lambda: page.evaluate(f"Number(document.body.dataset.{loaded} || 0)") > before,
        f"the view {fragment}",
    )


def _text(page: DevTools, element_id: str) -> str:
    text: str = page.evaluate(f"document.getElementById({json.dumps(element_id)}).textContent")
    return text


def _click(page: DevTools, element_id: str) -> None:
    page.evaluate(f"document.getElementById({json.dumps(element_id)}).click(); true")


def _type(page: DevTools, element_id: str, value: str) -> None:
    page.evaluate(
        f"document.getElementById({json.dumps(element_id)}).value = {json.dumps(value)}; true"
    )


def _screenshot(page: DevTools, tmp_path: Path, name: str) -> None:
    """The viewport from the top (test_ops_page's screenshot)."""
    screenshot(page, tmp_path, name, scroll="window.scrollTo(0, 0)")


def test_a_job_paused_with_a_note_from_its_view_is_paused_with_the_note(
    ops: Registry, browser: DevTools, tmp_path: Path
) -> None:
    """the job view explains the next fires; a pause with a note from it pauses the job in the
    database with the note on the pause's version, shown as text on the page, in `jobs show`
    and the audit; a resume takes the note away"""
    registry, page = ops, browser
    sched = registry.sched
    asyncio.run(sched.register(*SCENERY))
    _open(page, registry)
    _go(page, f"job/{quote(sched.tenant)}/invoice-42", "jobLoads")
    assert _text(page, "job-title") == f"{sched.tenant}/invoice-42"
    preview = page.evaluate(
        "[...document.querySelectorAll('#job-preview > li')].map((li) => li.textContent)"
    )
    assert len(preview) == 5 and all("CE" in p for p in preview), preview  # CET or CEST
    assert "Europe/Berlin" in _text(page, "job-preview-zone")

    before = _job(sched, "invoice-42")
    _type(page, "pause-note", NOTE)
    _click(page, "job-pause")
    _until(lambda: _job(sched, "invoice-42")["status"] == "paused", "paused")
    version = _job(sched, "invoice-42")["version"]
    assert version == before["version"] + 1
    [note] = _fetch(
        sched,
        "SELECT version, paused_by, reason FROM job_pause_notes WHERE tenant = $1 AND job_id = $2",
        sched.tenant,
        "invoice-42",
    )
    assert (note["version"], note["paused_by"], note["reason"]) == (
        version,
        registry.operator,
        NOTE,
    )
    shown = _until(lambda: _text(page, "job-note"), "the note on the page")
    assert shown.startswith(f"Paused by {registry.operator} at ") and shown.endswith(NOTE)
    assert page.evaluate(
        "[document.querySelectorAll('#job-note *').length, typeof window.pwned]"
    ) == [
        0,
        "undefined",
    ]
    [audit] = _fetch(
        sched,
        "SELECT operator, action, result, detail FROM ops_audit WHERE tenant = $1 AND job_id = $2",
        sched.tenant,
        "invoice-42",
    )
    assert tuple(audit) == (registry.operator, "pause", "paused", f"note: {NOTE}")
    _until(lambda: "paused" in _text(page, "job-audit"), "the audit on the page")
    listed = _get(
        f"{registry.base}/v1/ops/jobs?tenant={sched.tenant}&q=invoice", registry.operator_key
    )[1]["items"]
    assert [(j["job_id"], j["pause_note"]) for j in listed] == [
        ("invoice-42", {"by": registry.operator, "reason": NOTE})
    ]
    _screenshot(page, tmp_path, "ops-job-view.png")
    show = _cli(sched, "jobs", "show", f"{sched.tenant}/invoice-42")
    assert show.returncode == 0 and f"{registry.operator} at " in show.stdout, show.stdout
    assert NOTE in show.stdout

    _click(page, "job-resume")
    _until(lambda: _job(sched, "invoice-42")["status"] == "active", "resumed")
    _until(lambda: page.evaluate("document.getElementById('job-note').hidden"), "the note gone")
    show = _cli(sched, "jobs", "show", f"{sched.tenant}/invoice-42", "--json")
    assert json.loads(show.stdout)["pause_note"] is None


def test_trigger_backfill_and_delete_from_the_job_view(
    ops: Registry, browser: DevTools, tmp_path: Path
) -> None:
    """trigger now makes one trigger run; a backfill is counted first and creates nothing until
    confirmed, then exactly the counted runs; a delete waits for its confirmation; each is in
    the audit with the operator key's name"""
    registry, page = ops, browser
    sched = registry.sched
    _open(page, registry)
    _go(page, f"job/{quote(sched.tenant)}/alpha", "jobLoads")

    def runs(origin: str) -> list[asyncpg.Record]:
        return _fetch(
            sched,
            "SELECT scheduled_at FROM job_runs WHERE tenant = $1 AND job_id = 'alpha'"
            " AND origin = $2",
            sched.tenant,
            origin,
        )

    _click(page, "job-trigger")
    _until(lambda: len(runs("trigger")) == 1, "the triggered run")
    _until(lambda: "triggered " in _text(page, "job-message"), "the trigger's answer")
    listed = _get(
        f"{registry.base}/v1/ops/jobs?tenant={sched.tenant}&q=alpha", registry.operator_key
    )
    assert listed[1]["items"][0]["last_run"]["status"] in ("pending", "retrying"), listed

    # Every 5 minutes: [an hour ago rounded down, 30 min later) holds six occurrences.
    start = (now_ms() - 3_600_000) // (5 * MINUTE_MS) * (5 * MINUTE_MS)
    window = [
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t / 1000))
        for t in (start, start + 30 * MINUTE_MS)
    ]
    hidden = "getComputedStyle(document.getElementById('job-confirm')).display"
    assert page.evaluate(hidden) == "none"  # no confirmation box before there is a question
    _type(page, "backfill-from", window[0])
    _type(page, "backfill-to", window[1])
    _click(page, "job-backfill-count")
    asked = _until(
        lambda: (
            not page.evaluate("document.getElementById('job-confirm').hidden")
            and _text(page, "job-confirm-text")
        ),
        "the backfill's confirmation",
    )
    assert asked.startswith(f"Create 6 backfill runs of {sched.tenant}/alpha"), asked
    assert runs("backfill") == []  # counted, not created
    _click(page, "job-confirm-yes")
    _until(lambda: len(runs("backfill")) == 6, "the six backfill runs")

    _click(page, "job-delete")
    _until(lambda: "Delete " in _text(page, "job-confirm-text"), "the delete's confirmation")
    assert _job(sched, "alpha")["status"] == "active"  # not before it is confirmed
    _click(page, "job-confirm-yes")
    _until(lambda: _job(sched, "alpha")["status"] == "deleted", "deleted")
    audit = [
        (a["operator"], a["action"], a["result"].split(" ")[0]) for a in _audit(sched, "alpha")
    ]
    assert audit == [
        (registry.operator, "trigger", "triggered"),
        (registry.operator, "backfill", "created"),
        (registry.operator, "delete", "deleted"),
    ]
    [backfill] = _fetch(
        sched,
        "SELECT result, detail FROM ops_audit WHERE tenant = $1 AND action = 'backfill'",
        sched.tenant,
    )
    assert backfill["result"] == "created 6 of 6 occurrences"
    assert backfill["detail"].startswith(window[0].replace("Z", ".000Z"))


def test_a_dead_letter_replayed_from_the_page_runs_and_succeeds(
    ops: Registry, browser: DevTools, tmp_path: Path
) -> None:
    """a run that died on a broken handler is on the dead-letter view; after the fix a dry run
    says what the replay would do and changes nothing; the replay it confirms runs the run
    again under its run key, it succeeds, and the replay audit names the operator key"""
    registry, page = ops, browser
    sched = registry.sched
    log, broken = tmp_path / "executions.log", tmp_path / "broken"
    broken.touch()
    job = {
        "id": "charge",
        "schedule": "0 12 * * *",  # only the trigger below runs it
        "handler": "test.switchable",
        "max_attempts": 2,
        "backoff": {"base_ms": 100, "cap_ms": 200},
    }
    asyncio.run(sched.register(job))
    worker = sched.spawn_worker(log, TW_TEST_BROKEN=str(broken))
    sched.spawn("solo")
    token = _token(registry)
    status, triggered = _post(
        f"{registry.base}/v1/ops/jobs/{sched.tenant}/charge/trigger", registry.operator_key, token
    )
    assert status == 200, triggered
    key = triggered["run_key"]

    def run_state() -> tuple[str, int] | None:
        rows = _fetch(
            sched,
            "SELECT status, attempt FROM job_runs WHERE tenant = $1 AND job_id = 'charge'",
            sched.tenant,
        )
        return None if not rows else (rows[0]["status"], rows[0]["attempt"])

    _until(lambda: run_state() == ("dead", 2), "the run dead after its retries", 60)
    broken.unlink()  # the fix

    _open(page, registry)
    _go(page, "dlq", "dlqLoads")
    _type(page, "d-job", "charge")
    _type(page, "d-tenant", sched.tenant)
    before = page.evaluate("Number(document.body.dataset.dlqLoads)")
    page.evaluate("document.querySelector('#dlq-filter button').click(); true")
    _until(lambda: page.evaluate("Number(document.body.dataset.dlqLoads)") > before, "filtered")
    rows = page.evaluate(
        "[...document.querySelectorAll('#dlq tbody tr')]"
        ".map((tr) => [...tr.cells].map((td) => td.textContent))"
    )
    assert [r[1:3] for r in rows] == [[key, "2"]], rows
    assert "downstream is broken" in rows[0][3]
    _screenshot(page, tmp_path, "ops-dead-letters-view.png")

    _type(page, "replay-rate", "20/s")
    _click(page, "replay-dry")
    asked = _until(
        lambda: (
            not page.evaluate("document.getElementById('replay-confirm').hidden")
            and _text(page, "replay-confirm-text")
        ),
        "the replay's confirmation",
    )
    assert asked == "Replay 1 dead runs at 20/s?"
    assert "would replay 1" in _text(page, "replay-message")
    assert run_state() == ("dead", 2)  # the dry run changed nothing
    assert _fetch(sched, "SELECT id FROM replay_audit") == []
    _click(page, "replay-yes")
    _until(lambda: run_state() == ("succeeded", 3), "the replayed run succeeded", 60)
    _until(
        lambda: page.evaluate("document.body.dataset.replayDone"), "the replay's end on the page"
    )
    assert "replayed 1" in _text(page, "replay-message")
    [audit] = _fetch(sched, "SELECT id, operator, replayed, outcome FROM replay_audit")
    assert (audit["operator"], audit["replayed"], audit["outcome"]) == (
        registry.operator,
        1,
        "completed",
    )
    executed = log.read_text().split("\n")
    assert [executed.count(f"{key} {a}") for a in (1, 2, 3, 4)] == [1, 1, 1, 0]

    # The run's view, reached from its dead letter, shows the replay that touched it.
    page.evaluate("document.querySelector('#dlq tbody a').click(); true")
    _until(lambda: _text(page, "run-title") == key, "the run view")
    _until(lambda: "succeeded" in _text(page, "run-status"), "the run's status")
    replays = page.evaluate(
        "[...document.querySelectorAll('#run-replays tbody tr')]"
        ".map((tr) => [...tr.cells].map((td) => td.textContent))"
    )
    assert [(r[0], r[2], r[3]) for r in replays] == [
        (f"#{audit['id']}", registry.operator, "replayed")
    ]
    _screenshot(page, tmp_path, "ops-run-view.png")
    assert worker.poll() is None, sched.log_text("worker")


def _register_http_job(sched: SchedEnv, job_id: str) -> None:
    """An HTTP-target job with a secret header and a token in its URL's query."""
    doc = {
        "id": job_id,
        "schedule": "0 * * * *",
        "target": {
            "url": "https://api.example.com/hook?token=s3cret-query",
            "method": "POST",
            "headers": {"Authorization": "Bearer s3cret-header"},
        },
    }
    limits = Limits(shards=TEST_SHARDS, target_allowlist=("https://api.example.com/",))

    async def register() -> None:
        pool = await asyncpg.create_pool(sched.dsn, min_size=1, max_size=1)
        try:
            spec = validate_job(sched.tenant, parse_document(doc), limits, now_ms())
            await RegistryStore(pool, TEST_SHARDS).apply(
                [Op("upsert", sched.tenant, job_id, spec=spec)]
            )
        finally:
            await pool.close()

    asyncio.run(register())


def test_the_views_hide_secrets_and_refuse_bad_requests(ops: Registry) -> None:
    """a job's target shows no header value and no URL query; tenant keys get
    403 and no key 401 on every new endpoint; a POST without the CSRF token changes nothing;
    malformed input gets a 422 naming what is wrong; unknown jobs and runs a 404"""
    registry = ops
    sched = registry.sched
    base, key = f"{registry.base}/v1/ops", registry.operator_key
    _register_http_job(sched, "hook")
    status, job = _get(f"{base}/jobs/{sched.tenant}/hook", key)
    assert status == 200, job
    text = json.dumps(job)
    assert "s3cret" not in text, text
    assert job["document"]["target"]["headers"] == {"Authorization": "(hidden)"}
    assert job["document"]["target"]["url"] == "https://api.example.com/hook?(hidden)"

    views = [
        f"{base}/jobs/{sched.tenant}/alpha",
        f"{base}/runs/{sched.tenant}/alpha@1767225600000",
        f"{base}/dead-letters",
        f"{base}/replays/1",
    ]
    for url in views:
        assert _get(url)[0] == 401, url
        status, body = _get(url, registry.tenant_key)
        assert status == 403 and "operator key" in body["detail"], (url, body)
    token = _token(registry)
    posts = [
        (f"{base}/jobs/{sched.tenant}/alpha/trigger", None),
        (f"{base}/jobs/{sched.tenant}/alpha/delete", None),
        (
            f"{base}/jobs/{sched.tenant}/alpha/backfill",
            {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z"},
        ),
        (f"{base}/dead-letters/replay", {"dry_run": False}),
    ]
    for url, body in posts:
        assert _post(url, key, None, body)[0] == 403, url  # no CSRF token
        assert _post(url, registry.tenant_key, token, body)[0] == 403, url
    assert _job(sched, "alpha")["status"] == "active"
    assert (
        _fetch(sched, "SELECT count(*) AS n FROM job_runs WHERE tenant = $1", sched.tenant)[0]["n"]
        == 0
    )
    assert _fetch(sched, "SELECT count(*) AS n FROM replay_audit")[0]["n"] == 0

    assert _get(f"{base}/jobs/{sched.tenant}/nope", key)[0] == 404
    assert _get(f"{base}/runs/{sched.tenant}/alpha@1767225600000", key)[0] == 404
    assert _get(f"{base}/runs/not-a-run-key", key)[0] == 422
    assert _get(f"{base}/replays/999999", key)[0] == 404
    status, body = _get(f"{base}/dead-letters?since=yesterday", key)
    assert status == 422 and body["detail"].startswith("since:"), body
    pause = f"{base}/jobs/{sched.tenant}/alpha/pause"
    assert _post(pause, key, token, {"note": "x" * 501})[0] == 422
    assert _post(pause, key, token, {"why": "x"})[0] == 422
    status, body = _post(f"{base}/jobs/{sched.tenant}/alpha/resume", key, token, {"note": "x"})
    assert status == 422 and "pause only" in body["detail"], body
    status, body = _post(
        f"{base}/jobs/{sched.tenant}/alpha/backfill", key, token, {"from": "soon", "to": "later"}
    )
    assert status == 422 and "from" in body["detail"], body
    assert _post(f"{base}/jobs/{sched.tenant}/nope/trigger", key, token)[0] == 404
    status, body = _post(
        f"{base}/dead-letters/replay", key, token, {"rate": "fast", "dry_run": True}
    )
    assert status == 422 and body["detail"].startswith("rate:"), body
    assert _job(sched, "alpha")["status"] == "active"
    # The refused trigger of an unknown job is audited; nothing else changed anything.
    assert [(a["action"], a["result"][:8]) for a in _audit(sched, "nope")] == [
        ("trigger", "refused:")
    ]


def test_a_csrf_token_is_good_on_every_registry_of_the_deployment(ops: Registry) -> None:
    """the token one registry issued is accepted by another registry of the same database
    (the secret is the deployment's, migration 0016): a page behind a load balancer does not
    lose its token when its requests land on another registry"""
    sched = ops.sched
    other = _registry(sched)
    token = _token(ops)
    status, body = _post(
        f"{other}/v1/ops/jobs/{sched.tenant}/alpha/pause", ops.operator_key, token, {"note": "lb"}
    )
    assert status == 200 and body["result"] == "paused", body
    assert _job(sched, "alpha")["status"] == "paused"


XSS = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


def test_html_in_a_payload_and_an_error_shows_as_text(
    ops: Registry, browser: DevTools, tmp_path: Path
) -> None:
    """a payload and a run's error holding HTML and script are shown as text in the job's and
    the run's views, and nothing of them runs"""
    registry, page = ops, browser
    sched = registry.sched
    asyncio.run(
        sched.register(
            {
                "id": "html",
                "schedule": "0 * * * *",
                "handler": "test.record",
                "payload": {"note": XSS},
            }
        )
    )
    scheduled = now_ms() // 1000 * 1000
    _fetch(
        sched,
        "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, epoch, status,"
        " attempt, last_error) VALUES ($1, 'html', 'epoch'::timestamptz + $2 * interval '1 ms',"
        " 0, 'normal', 1, 'dead', 3, $3)",
        sched.tenant,
        scheduled,
        f"RuntimeError: {XSS}",
    )
    _open(page, registry)
    _go(page, f"job/{quote(sched.tenant)}/html", "jobLoads")
    assert json.dumps(XSS)[1:-1] in _text(page, "job-document")  # the JSON text of it
    assert XSS in _text(page, "job-runs")
    _go(page, f"run/{quote(f'{sched.tenant}/html@{scheduled}', safe='')}", "runLoads")
    assert f"RuntimeError: {XSS}" in _text(page, "run-fields")
    found = page.evaluate(
        "[document.querySelectorAll('main script, main img').length, typeof window.pwned]"
    )
    assert found == [0, "undefined"]


def test_a_replay_under_way_ends_interrupted_when_its_registry_stops(ops: Registry) -> None:
    """a replay from the page at 0.5/s is still pacing when its registry gets SIGTERM: the
    audit says `interrupted` with what it did (the first run replayed), not `running`"""
    registry = ops
    sched = registry.sched
    scheduled = [now_ms() // 1000 * 1000 - 60_000 - i * 1000 for i in range(2)]
    keys = []
    for ms in scheduled:
        _fetch(
            sched,
            "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, epoch,"
            " status, attempt, max_attempts, last_error, finished_at) VALUES ($1, 'alpha',"
            " 'epoch'::timestamptz + $2 * interval '1 ms', 0, 'normal', 1, 'dead', 2, 2,"
            " 'boom', now())",
            sched.tenant,
            ms,
        )
        key = f"{sched.tenant}/alpha@{ms}"
        run = RunEnvelope(key, sched.tenant, "alpha", ms, 2, 1, "normal", {}, 1000, "test.record")
        keys.append(key)
        prod = producer(sched.stack.kafka)
        prod.produce(
            sched.topics.dlq, key=b"alpha", value=DeadLetter(run, "boom", 2, now_ms()).encode()
        )
        assert prod.flush(30) == 0
    status, started = _post(
        f"{registry.base}/v1/ops/dead-letters/replay",
        registry.operator_key,
        _token(registry),
        {"tenant": sched.tenant, "rate": "0.5/s"},
    )
    assert status == 202 and started["selected"] == 2, started
    audit_id = started["audit_id"]
    _until(
        lambda: (
            _get(f"{registry.base}/v1/ops/replays/{audit_id}", registry.operator_key)[1][
                "progress"
            ]["done"]
            == 1
        ),
        "the first run replayed",
    )
    proc = sched.procs[-1]  # the registry the fixture started
    assert "registry" in proc.args
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, sched.log_text("registry")
    [audit] = _fetch(
        sched,
        "SELECT operator, outcome, selected, replayed FROM replay_audit WHERE id = $1",
        audit_id,
    )
    assert tuple(audit) == (registry.operator, "interrupted", 1, 1), sched.log_text("registry")


def test_the_dead_letter_view_filters_the_ledgers_dead_runs(ops: Registry) -> None:
    """the dead-letter view lists dead runs only, oldest death first, filtered by tenant, job,
    since and a piece of the error taken as text (a % in it is no wildcard), with the count"""
    registry, sched = ops, ops.sched
    now = now_ms() // 1000 * 1000
    rows = [  # job, scheduled, status, error, died this long ago
        ("alpha", now - 300_000, "dead", "disk 50% full", 3_600_000),
        ("alpha", now - 200_000, "dead", "disk 500 full", 60_000),
        ("beta", now - 100_000, "dead", "HTTP 503 from <b>upstream</b>", 120_000),
        ("beta", now - 50_000, "succeeded", "disk 50% full", 10_000),
    ]
    for job_id, scheduled, status, error, ago in rows:
        _fetch(
            sched,
            "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, epoch,"
            " status, attempt, max_attempts, last_error, finished_at) VALUES ($1, $2,"
            " 'epoch'::timestamptz + $3 * interval '1 ms', 0, 'normal', 1, $4, 3, 3, $5,"
            " now() - $6 * interval '1 ms')",
            sched.tenant,
            job_id,
            scheduled,
            status,
            error,
            ago,
        )
    base = f"{registry.base}/v1/ops/dead-letters?tenant={sched.tenant}"

    def keys(query: str) -> tuple[list[str], int]:
        status, body = _get(base + query, registry.operator_key)
        assert status == 200, body
        return [i["run_key"].rsplit("@", 1)[1] for i in body["items"]], body["matching"]

    oldest_first = [str(now - 300_000), str(now - 100_000), str(now - 200_000)]
    assert keys("") == (oldest_first, 3)
    assert keys("&since=30m") == (oldest_first[1:], 2)
    assert keys("&job=beta") == ([str(now - 100_000)], 1)
    assert keys("&error=50%25") == ([str(now - 300_000)], 1)  # '50%' as text
    assert keys("&error=UPSTREAM") == ([str(now - 100_000)], 1)
    assert keys("&limit=1") == (oldest_first[:1], 3)
