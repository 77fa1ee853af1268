"""The jobs view of the operators' page (issue 51): jobs across tenants paged and filtered on
the server, paused and resumed from the page through the CLI's path and audited, behind
operator keys and a CSRF token, every value shown as text — against a real `tickwheel
registry` subprocess, in a real headless Chromium over its DevTools protocol."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import tickwheel
from tickwheel.registry_api.ops.jobs import jobs_page

from .conftest import SchedEnv, wait_for
from .test_status_page import (
    PAGE_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    DevTools,
    _cli,
    _free_port,
    _get,
    headless_chromium,
    keep_artifact,
)

pytestmark = pytest.mark.integration

SCREEN = (1440, 900)  # a laptop's browser window
# The checkout whose code this test runs: the registry subprocess loads the same (see _registry).
CODE_ROOT = Path(tickwheel.__file__).resolve().parents[1]
# Starts `tickwheel ARGV…` on CODE_ROOT's code: an editable install maps the package to the
# checkout it was installed from, which in a git worktree is not the one under test.
LAUNCHER = """
import sys
root = sys.argv[1]
for name, module in list(sys.modules.items()):
    if name.startswith("__editable___tickwheel") and hasattr(module, "MAPPING"):
        old = module.MAPPING["tickwheel"].rsplit("/tickwheel", 1)[0] + "/"
        module.MAPPING.update({k: v.replace(old, root + "/", 1) for k, v in module.MAPPING.items()})
        module.NAMESPACES.update(
            {k: [p.replace(old, root + "/", 1) for p in v] for k, v in module.NAMESPACES.items()}
        )
sys.argv = ["tickwheel", *sys.argv[2:]]
from tickwheel.cli import main
main()
"""
SCENERY = [
    {"id": "invoice-42", "schedule": "0 9 * * MON-FRI", "timezone": "Europe/Berlin"},
    {"id": "nightly-report", "schedule": "30 2 * * *", "timezone": "America/New_York"},
    {"id": "reminder:7f3a", "at": "2030-01-15T08:00:00+01:00", "timezone": "Europe/Paris"},
    {"id": "sync.crm", "schedule": "*/15 * * * *"},
    {"id": "weekly.digest", "schedule": "0 7 * * MON", "timezone": "Asia/Tokyo"},
]
SCENERY = [{**doc, "handler": "test.record"} for doc in SCENERY]
XSS_ID = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


@dataclass
class Registry:
    base: str
    operator: str  # the operator key's name
    operator_key: str
    tenant_key: str
    sched: SchedEnv


def _registry(sched: SchedEnv) -> str:
    """A `tickwheel registry --no-intake` subprocess on CODE_ROOT's code; its base URL once
    /healthz answers."""
    port = _free_port()
    log = Path(f"/tmp/tw-sched-{sched.topics.prefix}-registry.log")
    sched.logs["registry"] = log
    argv = ["registry", "--port", str(port), "--no-intake"]
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, str(CODE_ROOT), *argv],
            env={**os.environ, **sched.env},
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    sched.procs.append(proc)
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, log.read_text(errors="replace")
        try:
            return _get(f"{base}/healthz")[0] == 200
        except OSError:
            return False

    asyncio.run(wait_for(healthy, STARTUP_TIMEOUT_S, what="the registry's /healthz"))
    return base


def _until(check: Any, what: str, timeout_s: float = PAGE_TIMEOUT_S) -> Any:
    """Poll the synchronous `check` until it returns something truthy; return it."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _post(url: str, key: str | None, token: str | None = None, body: Any = None) -> tuple[int, Any]:
    """POST `body` as JSON (None: an empty body) with the key and the CSRF token given."""
    data = b"" if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, method="POST", data=data)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    if token is not None:
        request.add_header("X-CSRF-Token", token)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def _job(sched: SchedEnv, job_id: str) -> asyncpg.Record:
    [row] = asyncio.run(
        sched.fetch(
            "SELECT status, version FROM jobs WHERE tenant = $1 AND job_id = $2",
            sched.tenant,
            job_id,
        )
    )
    return row


def _audit(sched: SchedEnv, job_id: str) -> list[asyncpg.Record]:
    return asyncio.run(
        sched.fetch(
            "SELECT operator, action, result, at FROM ops_audit"
            " WHERE tenant = $1 AND job_id = $2 ORDER BY id",
            sched.tenant,
            job_id,
        )
    )


@pytest.fixture
def registry(sched: SchedEnv) -> Registry:
    return start_registry(sched)


def start_registry(sched: SchedEnv) -> Registry:
    """Three cron jobs of the test's tenant, an operator key, a tenant key, a registry."""
    name = f"ops-{uuid.uuid4().hex[:8]}"
    added = _cli(sched, "operator-key", "add", name)
    assert added.returncode == 0, added.stderr
    tenant = _cli(sched, "tenant", "add", f"{sched.tenant}-api")
    assert tenant.returncode == 0, tenant.stderr
    asyncio.run(
        sched.register(
            *(
                {"id": job_id, "schedule": "*/5 * * * *", "handler": "test.record"}
                for job_id in ("alpha", "beta", "gamma")
            )
        )
    )
    base = _registry(sched)
    paths = _get(f"{base}/openapi.json")[1]["paths"]
    assert "/v1/ops/jobs" in paths, f"the registry does not run {CODE_ROOT}'s code"
    key_of = lambda done: done.stdout.strip().splitlines()[-1]  # noqa: E731
    return Registry(base, name, key_of(added), key_of(tenant), sched)


@pytest.fixture
def page(tmp_path: Path) -> Iterator[DevTools]:
    """Headless Chromium at SCREEN with one blank page, driven over its DevTools websocket."""
    with headless_chromium(tmp_path, SCREEN) as browser:
        yield browser


def _open(page: DevTools, registry: Registry) -> None:
    """Load /ui, give it the operator key, wait for its first refresh with the jobs view."""
    page.call("Network.enable")
    page.call("Page.enable")
    page.call("Page.navigate", url=f"{registry.base}/ui")
    state = lambda: page.evaluate("document.body && document.body.dataset.state")  # noqa: E731
    _until(lambda: state() == "locked", "the page")
    page.evaluate(
        f"document.getElementById('key').value = {json.dumps(registry.operator_key)};"
        "document.querySelector('#key-form button').click(); true"
    )
    _until(
        lambda: page.evaluate("Number(document.body.dataset.jobsLoads || 0) > 0"), "the jobs view"
    )


def _rows(page: DevTools) -> list[dict[str, Any]]:
    return list(
        page.evaluate(
            """[...document.querySelectorAll('#jobs tbody tr')].map((tr) => ({
                 cells: [...tr.cells].map((td) => td.textContent),
                 jobId: tr.dataset.jobId,
                 button: tr.querySelector('button') && tr.querySelector('button').textContent,
               }))"""
        )
    )


def _click(page: DevTools, job_id: str) -> None:
    clicked = page.evaluate(
        f"""(() => {{
          const tr = [...document.querySelectorAll('#jobs tbody tr')].find(
            (row) => row.dataset.jobId === {json.dumps(job_id)});
          const button = tr && tr.querySelector('button');
          if (!button) return false;
          button.click();
          return true;
        }})()"""
    )
    assert clicked, _rows(page)


def _screenshot(
    page: DevTools,
    tmp_path: Path,
    name: str,
    scroll: str = "document.getElementById('jobs-card').scrollIntoView()",
) -> Path:
    """The viewport, scrolled by the script `scroll` (default: to the jobs view), as PNG under
    tmp_path (and TICKWHEEL_ARTIFACTS)."""
    page.evaluate(f"{scroll}; true")
    shot = page.call("Page.captureScreenshot", format="png")
    path = tmp_path / name
    path.write_bytes(base64.b64decode(shot["data"]))
    keep_artifact(path)
    return path


def test_a_job_paused_and_resumed_from_the_page_changes_in_the_database(
    registry: Registry, page: DevTools, tmp_path: Path
) -> None:
    """pause then resume from the jobs view change the job's row as the CLI would, audited"""
    sched = registry.sched
    asyncio.run(sched.register(*SCENERY))  # for the screenshot: jobs as a deployment has them
    _open(page, registry)
    rows = _rows(page)
    ours = [r for r in rows if r["cells"][0] == sched.tenant]
    assert [r["jobId"] for r in ours][:3] == ["alpha", "beta", "gamma"]
    assert ours[0]["cells"][2:5] == ["*/5 * * * *", "UTC", "active"]
    assert ours[0]["button"] == "Pause"
    before = _job(sched, "beta")

    _click(page, "beta")
    _until(lambda: _job(sched, "beta")["status"] == "paused", "paused")
    assert _job(sched, "beta")["version"] == before["version"] + 1
    shown = _until(
        lambda: [r for r in _rows(page) if r["jobId"] == "beta" and r["button"] == "Resume"],
        "the paused row",
    )
    assert shown[0]["cells"][4] == "paused"
    assert f"{sched.tenant}/beta: paused" in page.evaluate(
        "document.getElementById('jobs-message').textContent"
    )
    _screenshot(page, tmp_path, "ops-jobs-view.png")

    _click(page, "beta")
    _until(lambda: _job(sched, "beta")["status"] == "active", "resumed")
    assert _job(sched, "beta")["version"] == before["version"] + 2
    assert _job(sched, "alpha")["status"] == _job(sched, "gamma")["status"] == "active"
    audit = _audit(sched, "beta")
    assert [(a["operator"], a["action"], a["result"]) for a in audit] == [
        (registry.operator, "pause", "paused"),
        (registry.operator, "resume", "resumed"),
    ]
    assert all(a["at"] is not None for a in audit)


def test_a_job_id_with_script_renders_as_text(
    registry: Registry, page: DevTools, tmp_path: Path
) -> None:
    """a job id holding HTML and script shows as text in the jobs view and runs nothing"""
    sched = registry.sched
    # The schema refuses such an id (jobs_id_form); this test's own database drops that check
    # so that the page, not the schema, is what is tested.
    asyncio.run(sched.fetch("ALTER TABLE jobs DROP CONSTRAINT jobs_id_form"))
    asyncio.run(
        sched.fetch(
            "INSERT INTO jobs (tenant, job_id, shard_id, kind, schedule, handler, document)"
            " VALUES ($1, $2, 0, 'cron', '* * * * *', '<b>h</b>', '{}')",
            sched.tenant,
            XSS_ID,
        )
    )
    _open(page, registry)
    rows = [r for r in _rows(page) if r["jobId"] == XSS_ID]
    assert len(rows) == 1 and rows[0]["cells"][1] == XSS_ID
    injected = page.evaluate(
        "[document.querySelectorAll('#jobs tbody script, #jobs tbody img, #jobs tbody b').length,"
        " typeof window.pwned]"
    )
    assert injected == [0, "undefined"]
    # Filtering by a piece of it reaches the server as text and finds it.
    page.evaluate(
        "document.getElementById('f-text').value = '<script>';"
        "document.querySelector('#jobs-filter button').click(); true"
    )
    _until(lambda: [r["jobId"] for r in _rows(page)] == [XSS_ID], "the filtered view")
    assert page.evaluate("typeof window.pwned") == "undefined"


def test_a_state_change_without_the_csrf_token_changes_nothing(registry: Registry) -> None:
    """a POST with the operator key but no or a wrong CSRF token is a 403 and leaves the job"""
    sched = registry.sched
    url = f"{registry.base}/v1/ops/jobs/{sched.tenant}/alpha/pause"
    before = _job(sched, "alpha")
    status, body = _post(url, registry.operator_key)
    assert status == 403 and body["error"] == "csrf", body
    other = _get(f"{registry.base}/v1/ops/csrf", registry.operator_key)[1]["token"]
    forged = other.split(".")[0] + "." + "0" * 64
    assert _post(url, registry.operator_key, forged)[0] == 403
    assert _job(sched, "alpha") == before and _audit(sched, "alpha") == []
    # The same request with the token of GET /v1/ops/csrf goes through.
    status, body = _post(url, registry.operator_key, other)
    assert status == 200 and body["result"] == "paused", body
    assert _job(sched, "alpha")["status"] == "paused"


def test_a_tenant_key_is_refused_on_the_jobs_endpoints(registry: Registry) -> None:
    """a tenant's key gets 403, no key 401, on the jobs view, its CSRF token and its actions"""
    sched = registry.sched
    base = f"{registry.base}/v1/ops"
    for url in (f"{base}/jobs", f"{base}/jobs?tenant={sched.tenant}", f"{base}/csrf"):
        assert _get(url)[0] == 401
        status, body = _get(url, registry.tenant_key)
        assert status == 403 and "operator key" in body["detail"], body
    token = _get(f"{base}/csrf", registry.operator_key)[1]["token"]
    action = f"{base}/jobs/{sched.tenant}/alpha/pause"
    assert _post(action, None, token)[0] == 401
    assert _post(action, registry.tenant_key, token)[0] == 403
    assert _job(sched, "alpha")["status"] == "active" and _audit(sched, "alpha") == []


def test_jobs_pages_follow_the_cursor_and_filters(registry: Registry) -> None:
    """the jobs endpoint pages in (tenant, id) order by cursor, filters on the server, and a
    page that reads its whole budget without enough hits still hands a cursor on"""
    sched = registry.sched
    base = f"{registry.base}/v1/ops/jobs"
    key = registry.operator_key
    first = _get(f"{base}?tenant={sched.tenant}&limit=2", key)[1]
    assert [j["job_id"] for j in first["items"]] == ["alpha", "beta"]
    assert first["next"] == {"tenant": sched.tenant, "job_id": "beta"}
    after = f"after_tenant={sched.tenant}&after_job=beta"
    second = _get(f"{base}?tenant={sched.tenant}&limit=2&{after}", key)[1]
    assert [j["job_id"] for j in second["items"]] == ["gamma"] and second["next"] is None
    assert [j["job_id"] for j in _get(f"{base}?q=AMM", key)[1]["items"]] == ["gamma"]
    assert _get(f"{base}?status=paused", key)[1]["items"] == []
    assert len(_get(f"{base}?handler=test.record", key)[1]["items"]) == 3
    assert _get(f"{base}?status=bogus", key)[0] == 422

    async def budgeted() -> list[dict[str, Any]]:
        pool = await asyncpg.create_pool(sched.dsn, min_size=1, max_size=1)
        try:
            pages, after_key = [], None
            while True:  # two keys read per page, one hit in three jobs
                page = await jobs_page(
                    pool,
                    after=after_key,
                    tenant=sched.tenant,
                    status=None,
                    handler=None,
                    text="gamma",
                    limit=5,
                    budget=2,
                )
                pages.append(page)
                if page["next"] is None:
                    return pages
                after_key = (page["next"]["tenant"], page["next"]["job_id"])
        finally:
            await pool.close()

    pages = asyncio.run(budgeted())
    assert [[j["job_id"] for j in p["items"]] for p in pages] == [[], ["gamma"]]
    assert pages[0]["next"] == {"tenant": sched.tenant, "job_id": "beta"}
