"""The operators' status page and its endpoints, against a running system: a `tickwheel
registry` and a `tickwheel scheduler` subprocess leading every shard and publishing runs of a
per-second job, driven in a real headless Chromium (Debian's `chromium`) over its DevTools
protocol."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from .conftest import TEST_SHARDS, TICKWHEEL, SchedEnv, wait_for

pytestmark = pytest.mark.integration

SCHEDULER_ID = "status-s1"
STARTUP_TIMEOUT_S = 30.0
PAGE_TIMEOUT_S = 30.0
CDP_TIMEOUT_S = 20.0
# The series' colours in app.js (throughput: created, published, finished, dead; lag: p50,
# p99): the charts must show lines of them, wherever lines overlap.
THROUGHPUT_RGB = [[0x25, 0x63, 0xEB], [0x0D, 0x94, 0x88], [0x93, 0x33, 0xEA], [0xC0, 0x26, 0x2D]]
LAG_RGB = [[0x0D, 0x94, 0x88], [0xD9, 0x77, 0x06]]


@dataclass
class System:
    base: str  # the registry's http://host:port
    operator_key: str
    tenant_key: str
    dead_run_key: str
    sched: SchedEnv


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cli(sched: SchedEnv, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TICKWHEEL, *argv],
        env={**os.environ, **sched.env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def keep_artifact(path: Path) -> None:
    """Copy a screenshot to TICKWHEEL_ARTIFACTS (`make test`: ./artifacts), for a person to
    look at; say where it is."""
    artifacts = os.environ.get("TICKWHEEL_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(artifacts) / path.name)
    print(f"screenshot: {path}")


def _get(url: str, key: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def _registry(sched: SchedEnv) -> str:
    """A `tickwheel registry --no-intake` subprocess on a free port, once its /healthz answers
    200; its base URL."""
    port = _free_port()
    sched.spawn_command("registry", ["registry", "--port", str(port), "--no-intake"])
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return _get(f"{base}/healthz")[0] == 200
        except OSError:
            return False

    asyncio.run(wait_for(healthy, STARTUP_TIMEOUT_S, what="the registry's /healthz"))
    return base


@pytest.fixture
def system(sched: SchedEnv) -> Iterator[System]:
    """Registry, scheduler and worker subprocesses, per-second jobs, a dead run, an operator
    key."""
    added = _cli(sched, "operator-key", "add", f"ops-{uuid.uuid4().hex[:8]}")
    assert added.returncode == 0, added.stderr
    operator_key = added.stdout.strip().splitlines()[-1]
    tenant = _cli(sched, "tenant", "add", f"{sched.tenant}-api")
    assert tenant.returncode == 0, tenant.stderr
    tenant_key = tenant.stdout.strip().splitlines()[-1]

    asyncio.run(
        sched.register(
            {"id": "every-second", "schedule": "* * * * * *", "handler": "test.record"},
            {"id": "every-other", "schedule": "*/2 * * * * *", "handler": "test.record"},
        )
    )
    dead_at = int(time.time() * 1000) // 1000 * 1000 - 60_000
    # A run as a worker leaves it after its last attempt failed (the page reads the ledger).
    asyncio.run(
        sched.fetch(
            "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority, status,"
            " attempt, epoch, finished_at, last_error)"
            " VALUES ($1, 'nightly', to_timestamp($2 / 1000.0), 0, 'normal', 'dead', 5, 1,"
            " now(), 'KeyError: region')",
            sched.tenant,
            dead_at,
        )
    )
    base = _registry(sched)
    sched.spawn(SCHEDULER_ID)
    # A worker: a run's publish instant reaches the ledger with its claim (`published_at`).
    executions = Path(f"/tmp/tw-status-{sched.topics.prefix}-executions.log")
    executions.touch()
    sched.spawn_command(
        "worker",
        ["worker", "--handlers", "worker_handlers", "--id", "w1"],
        TW_TEST_LOG=str(executions),
        PYTHONPATH=str(Path(__file__).parent),
    )
    yield System(base, operator_key, tenant_key, f"{sched.tenant}/nightly@{dead_at}", sched)


def _all_led(system: System) -> dict[str, Any] | None:
    status, body = _get(f"{system.base}/v1/ops/shards", system.operator_key)
    assert status == 200, body
    return body if body["led"] == TEST_SHARDS else None


def _published_recently(system: System) -> dict[str, Any] | None:
    status, body = _get(f"{system.base}/v1/ops/throughput?minutes=2", system.operator_key)
    assert status == 200, body
    return body if sum(b["published"] for b in body["buckets"]) >= 3 else None


def test_ops_endpoints_need_an_operator_key(system: System) -> None:
    """no key is a 401, a tenant's key a 403, a revoked operator key a 401; the operator's
    key sees every shard led by the scheduler, the runs it published and the dead run; the
    page itself is public HTML under a CSP and outside the OpenAPI document"""
    url = f"{system.base}/v1/ops/shards"
    assert _get(url)[0] == 401
    status, body = _get(url, system.tenant_key)
    assert status == 403 and "operator key" in body["detail"]
    assert _get(url, "twop_not-a-key")[0] == 401
    short_lived = f"short-{uuid.uuid4().hex[:8]}"
    revoked = _cli(system.sched, "operator-key", "add", short_lived)
    short_key = revoked.stdout.strip().splitlines()[-1]
    assert _cli(system.sched, "operator-key", "revoke", short_lived).returncode == 0
    assert _get(url, short_key)[0] == 401
    again = _cli(system.sched, "operator-key", "revoke", short_lived)
    assert again.returncode == 2 and "no active operator key" in again.stderr
    bad = _cli(system.sched, "operator-key", "add", "no spaces!")
    assert bad.returncode == 2 and bad.stderr.startswith("tickwheel: name: must match")

    body = asyncio.run(wait_for(lambda: _all_led(system), STARTUP_TIMEOUT_S, what="all led"))
    assert {item["owner"] for item in body["items"]} == {SCHEDULER_ID}
    assert all(item["epoch"] >= 1 for item in body["items"])
    rates = asyncio.run(
        wait_for(lambda: _published_recently(system), STARTUP_TIMEOUT_S, what="publishes")
    )
    assert len(rates["buckets"]) == 12 and rates["bucket_ms"] == 10_000
    lags = [b["lag_p99_ms"] for b in rates["buckets"] if b["lag_p99_ms"] is not None]
    assert lags and all(0 <= lag < 10_000 for lag in lags)
    status, dead = _get(f"{system.base}/v1/ops/dead", system.operator_key)
    assert status == 200 and system.dead_run_key in [d["run_key"] for d in dead["items"]]
    with urllib.request.urlopen(f"{system.base}/ui", timeout=10) as page:  # public, no data
        assert page.headers["Content-Type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert not any(p.startswith("/ui") for p in _get(f"{system.base}/openapi.json")[1]["paths"])


# --- Chromium over the DevTools protocol -----------------------------------------------------


def _chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        message = (
            "chromium is not installed: `apt-get install chromium` (Debian's package; "
            ".ci/run installs it)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the browser test, but {message}")
        pytest.skip(message)
    return found


class DevTools:
    """A minimal DevTools protocol client over one page target's websocket."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self.ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + CDP_TIMEOUT_S
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == ident:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")


@contextlib.contextmanager
def headless_chromium(log_dir: Path, window: tuple[int, int]) -> Iterator[DevTools]:
    """Headless Chromium with one blank page of `window` (width, height), driven over its
    DevTools websocket; its output goes to `log_dir`/chromium.log."""
    exe = _chromium()
    profile = tempfile.mkdtemp(prefix="tw-chromium-")
    port = _free_port()
    log = log_dir / "chromium.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [
                exe,
                "--headless=new",
                "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                f"--user-data-dir={profile}",
                f"--remote-debugging-port={port}",
                f"--window-size={window[0]},{window[1]}",
                "about:blank",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:

        def pages() -> list[dict[str, Any]] | None:
            assert proc.poll() is None, f"chromium exited: {log.read_text(errors='replace')}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                    found = [t for t in json.loads(r.read()) if t["type"] == "page"]
            except OSError:
                return None
            return found or None

        targets = asyncio.run(wait_for(pages, STARTUP_TIMEOUT_S, what="chromium's DevTools"))
        with connect(targets[0]["webSocketDebuggerUrl"], max_size=None) as ws:
            yield DevTools(ws)
    finally:
        proc.kill()
        proc.wait(10)
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    """Headless Chromium with one blank page, driven over its DevTools websocket."""
    with headless_chromium(tmp_path, (1200, 1700)) as page:
        yield page


def test_status_page_shows_the_running_system(
    system: System, browser: DevTools, tmp_path: Path
) -> None:
    """in Chromium, the page takes the operator key, lists every shard with its leader, draws
    the throughput and lag charts with data, lists the dead run, and never puts the key in a
    URL; a screenshot is saved"""
    asyncio.run(wait_for(lambda: _all_led(system), STARTUP_TIMEOUT_S, what="all shards led"))
    asyncio.run(wait_for(lambda: _published_recently(system), STARTUP_TIMEOUT_S, what="runs"))
    browser.call("Network.enable")
    browser.call("Page.enable")
    browser.call("Page.navigate", url=f"{system.base}/ui")
    wait_for_state = lambda: browser.evaluate("document.body && document.body.dataset.state")  # noqa: E731
    # "locked": the script ran and asks for the key (the HTML says "starting").
    asyncio.run(wait_for(lambda: wait_for_state() == "locked", PAGE_TIMEOUT_S, what="the page"))

    browser.evaluate(
        f"document.getElementById('key').value = {json.dumps(system.operator_key)};"
        "document.querySelector('#key-form button').click(); true"
    )
    state = asyncio.run(
        wait_for(
            lambda: wait_for_state() in ("ready", "error", "locked") and wait_for_state(),
            PAGE_TIMEOUT_S,
            what="the page's first refresh",
        )
    )
    assert state == "ready", browser.evaluate(
        "[document.body.dataset.state, document.getElementById('error').textContent,"
        " document.getElementById('login-error').textContent]"
    )
    seen = browser.evaluate(
        """(() => {
          const rows = [...document.querySelectorAll('#shards tbody tr')].map(
            (tr) => [...tr.cells].map((td) => td.textContent));
          function inked(id, rgb) {
            const c = document.getElementById(id);
            const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 0; i < data.length; i += 4) {
              if (Math.abs(data[i] - rgb[0]) < 24 && Math.abs(data[i + 1] - rgb[1]) < 24 &&
                  Math.abs(data[i + 2] - rgb[2]) < 24) n += 1;
            }
            return n;
          }
          return {
            rows,
            throughputPoints: Number(document.getElementById('throughput').dataset.points),
            lagPoints: Number(document.getElementById('lag').dataset.points),
            throughputInk: THROUGHPUT_RGB.reduce((n, rgb) => n + inked('throughput', rgb), 0),
            lagInk: LAG_RGB.reduce((n, rgb) => n + inked('lag', rgb), 0),
            dead: [...document.querySelectorAll('#dead tbody tr')].map(
              (tr) => tr.cells[1].textContent),
            stored: sessionStorage.getItem('tickwheel.operatorKey'),
            href: location.href,
          };
        })()""".replace("THROUGHPUT_RGB", json.dumps(THROUGHPUT_RGB)).replace(
            "LAG_RGB", json.dumps(LAG_RGB)
        )
    )
    shot = browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    path = tmp_path / "status-page.png"
    path.write_bytes(base64.b64decode(shot["data"]))
    keep_artifact(path)

    assert [row[0] for row in seen["rows"]] == [str(s) for s in range(TEST_SHARDS)]
    assert {row[1] for row in seen["rows"]} == {SCHEDULER_ID}
    assert all(len(row) == 5 for row in seen["rows"])  # …, since, oldest due job waiting
    assert seen["throughputPoints"] > 0 and seen["lagPoints"] > 0
    assert seen["throughputInk"] > 50 and seen["lagInk"] > 5, seen
    assert system.dead_run_key in seen["dead"]
    assert seen["stored"] == system.operator_key
    urls = [
        e["params"]["request"]["url"]
        for e in browser.events
        if e.get("method") == "Network.requestWillBeSent"
    ]
    assert any("/v1/ops/throughput" in url for url in urls)
    assert not any(system.operator_key in url for url in [*urls, seen["href"]])


def test_api_docs_load_in_chromium_from_the_registry_alone(
    sched: SchedEnv, browser: DevTools, tmp_path: Path
) -> None:
    """issue 28 (low): /docs draws the API with Swagger UI in Chromium, every request going to
    the registry itself (it loaded its scripts from a CDN), under its Content-Security-Policy
    without a violation; a screenshot is saved"""
    base = _registry(sched)
    browser.call("Network.enable")
    browser.call("Log.enable")
    browser.call("Page.enable")
    browser.call("Page.navigate", url=f"{base}/docs")
    title = "document.querySelector('.swagger-ui .info .title')"
    drawn = asyncio.run(
        wait_for(
            lambda: browser.evaluate(f"{title} && {title}.textContent"),
            PAGE_TIMEOUT_S,
            what="Swagger UI's title",
        )
    )
    assert drawn.startswith("tickwheel registry")
    operations = browser.evaluate("document.querySelectorAll('.opblock').length")
    assert operations >= 10
    shot = browser.call("Page.captureScreenshot", format="png")
    path = tmp_path / "api-docs.png"
    path.write_bytes(base64.b64decode(shot["data"]))
    print(f"api docs screenshot: {path}")
    urls = [
        e["params"]["request"]["url"]
        for e in browser.events
        if e.get("method") == "Network.requestWillBeSent"
    ]
    assert f"{base}/openapi.json" in urls
    assert all(url.startswith((base, "data:")) for url in urls), urls
    violations = [
        e["params"]["entry"]["text"]
        for e in browser.events
        if e.get("method") == "Log.entryAdded" and "Content Security Policy" in str(e["params"])
    ]
    assert violations == []
