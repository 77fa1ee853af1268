"""`tickwheel demo`: the whole system working on the local stack, narrated, then checked.

Steps (each printed as it happens):

 1. its own database (`tickwheel_demo_<random>`, migrated) and topic prefix (`demo<random>`),
    so nothing of another deployment is dispatched by, or disturbs, the demo's processes;
 2. child processes, all given that database and prefix by environment: the registry, two
    schedulers (`demo-sched-a`, `demo-sched-b`, metrics on free ports) and two workers running
    `tickwheel.demo_handlers`;
 3. a tenant, and the registry's own steps: a job over HTTP, one through Kafka, a malformed
    registration that lands on the rejected topic;
 4. a realistic mix: per-second and per-minute cron jobs in several zones and one-off jobs
    over HTTP, more one-offs and a hot second (`--hot`, 10,000 by default) through Kafka, and
    a job whose handler fails until fixed (2 attempts, short backoff), so it dead-letters;
 5. a live view (`tickwheel status`'s screen plus executions and the ledger) for
    `--duration` seconds; without a terminal, one plain line every few seconds;
 6. failover: `kill -9` of one scheduler, and the measured gap until the survivor has taken
    over every shard (`shard_leaders` epochs);
 7. the fix (the handler's flag file) and a replay of the tenant's dead letters through
    `tickwheel.registry_api.replay`, as `tickwheel dlq replay` does;
 8. every job paused, every run left to finish, then the check of the ledger: each due
    occurrence has exactly one row that ended as expected (`lost: N`), and no run key was
    executed successfully twice by the handlers' own record (`duplicates: N`);
 9. everything it started is stopped, its database dropped and its topics deleted — unless
    `--keep`, which leaves it running and prints how to stop it.

Exit code 0 only when `lost` and `duplicates` are both 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import orjson

from tickwheel.cli_support import fail, settings
from tickwheel.config import Settings
from tickwheel.topics import Topics

# httpx, rich and the Kafka client are imported when the demo runs, so that registering the
# `demo` command keeps `tickwheel --help` and `tickwheel cron` quick to start.

READY_TIMEOUT_S = 60.0  # seconds for a child process or a registration to be ready
SETTLE_TIMEOUT_S = 60.0  # seconds for the last runs to finish after the jobs are paused
DEMO_SHARDS = 16
DEMO_ZK_SESSION_MS = 4000  # the dev ZooKeeper's minimum (2 x tickTime): a quick failover
DEMO_SWEEP_MS = 500  # leaders pick up due retries (and replays) within half a second
VIEW_INTERVAL_S = 1.0  # live view refresh with a terminal
PLAIN_INTERVAL_S = 5.0  # one plain line this often without one
FIRST_FIRE_DELAY_S = 15  # the hot second and the one-offs are this far after registration
KEEP_UP_SLACK_MS = 3000  # a job due this long before the pause but never claimed counts lost
STOP_TIMEOUT_S = 40.0  # a child's SIGTERM grace before SIGKILL


@dataclass(frozen=True)
class DemoOptions:
    duration_s: float = 60.0
    hot: int = 10_000
    keep: bool = False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for(check: Callable[[], Any], what: str, timeout_s: float = READY_TIMEOUT_S) -> Any:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"demo: {what} did not happen within {timeout_s:g} s")


def _ceil_second(ms: int) -> int:
    return math.ceil(ms / 1000) * 1000


# --- the ledger check (pure) --------------------------------------------------------------------

FINAL_OK = frozenset({"succeeded", "skipped"})  # after the fix and replay, nothing stays dead


@dataclass(frozen=True)
class Registered:
    """A job as the demo registered it: its document and its first due instant (ms)."""

    doc: dict[str, Any]
    first_ms: int | None


@dataclass
class LedgerReport:
    due: int = 0
    missing: list[str] = field(default_factory=list)  # due, no row
    unfinished: list[str] = field(default_factory=list)  # a row, not succeeded/skipped
    undispatched: list[str] = field(default_factory=list)  # due well before the pause, unclaimed
    unexecuted: list[str] = field(default_factory=list)  # succeeded, no successful execution
    duplicates: list[str] = field(default_factory=list)  # executed successfully twice or more
    unexpected: list[str] = field(default_factory=list)  # rows of no due occurrence
    outcomes: Counter[str] = field(default_factory=Counter)

    @property
    def lost(self) -> int:
        return (
            len(self.missing) + len(self.unfinished) + len(self.undispatched) + len(self.unexecuted)
        )


def check_ledger(
    due: dict[str, list[int]],
    undispatched: dict[str, list[int]],
    rows: list[tuple[str, int, str]],
    executions: list[str],
    tenant: str,
) -> LedgerReport:
    """Compare the due occurrences with the run rows and the handlers' execution record.

    `due`: job id → the instants (ms) the scheduler had to dispatch (it moved past them);
    `undispatched`: instants due well before the pause that it never reached; `rows`: (job id,
    scheduled ms, status); `executions`: the `<run_key> <attempt> <outcome>` lines.
    """
    report = LedgerReport()
    by_key = {(job, ms): status for job, ms, status in rows}
    succeeded_runs = Counter(line.split()[0] for line in executions if line.strip().endswith(" ok"))
    expected: set[tuple[str, int]] = set()
    for job, instants in due.items():
        for ms in instants:
            key = f"{tenant}/{job}@{ms}"
            expected.add((job, ms))
            report.due += 1
            status = by_key.get((job, ms))
            if status is None:
                report.missing.append(key)
                continue
            report.outcomes[status] += 1
            if status not in FINAL_OK:
                report.unfinished.append(f"{key} ({status})")
            elif status == "succeeded" and succeeded_runs[key] == 0:
                report.unexecuted.append(key)
    for job, instants in undispatched.items():
        report.undispatched.extend(f"{tenant}/{job}@{ms}" for ms in instants)
    report.unexpected = [f"{tenant}/{j}@{ms}" for j, ms, _ in rows if (j, ms) not in expected]
    report.duplicates = sorted(k for k, n in succeeded_runs.items() if n > 1)
    return report


def occurrences(
    tenant: str, doc: dict[str, Any], first_ms: int, stop_ms: int, shards: int
) -> list[int]:
    """The fire instants of a registered document in [first_ms, stop_ms)."""
    from tickwheel.registry_api.document import Limits, parse_document, validate_job

    if doc.get("at") is not None:
        return [first_ms] if first_ms < stop_ms else []
    spec = validate_job(tenant, parse_document(doc), Limits(shards=shards), first_ms - 1)
    found: list[int] = []
    at: int | None = first_ms
    while at is not None and at < stop_ms:
        found.append(at)
        at = spec.next_fire_after(at)
    return found


# --- child processes ----------------------------------------------------------------------------


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    metrics_port: int | None = None


class Children:
    """The processes the demo started; `stop` ends them (SIGTERM, then SIGKILL)."""

    def __init__(self, exe: str, env: dict[str, str], folder: Path) -> None:
        self.exe, self.env, self.folder = exe, env, folder
        self.all: dict[str, Child] = {}

    def start(self, name: str, *args: str, metrics_port: int | None = None) -> Child:
        log = self.folder / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [self.exe, *args], stdout=out, stderr=subprocess.STDOUT, env=self.env
            )
        child = Child(name, proc, log, metrics_port)
        self.all[name] = child
        return child

    def check_alive(self) -> None:
        for child in self.all.values():
            code = child.proc.poll()
            if code is not None and code != -signal.SIGKILL:
                tail = child.log.read_text(errors="replace")[-1500:]
                raise RuntimeError(f"demo: {child.name} exited with {code}; its log ends:\n{tail}")

    def stop(self) -> None:
        live = [c for c in self.all.values() if c.proc.poll() is None]
        for child in live:
            child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in live:
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()


# --- the demo -----------------------------------------------------------------------------------


class Demo:
    def __init__(self, settings: Settings, say: Callable[[str], None], opts: DemoOptions) -> None:
        self.settings, self.say, self.opts = settings, say, opts
        self.exe = str(Path(sys.executable).parent / "tickwheel")
        self.prefix = f"demo{uuid.uuid4().hex[:8]}"
        self.topics = Topics(self.prefix)
        self.tenant = f"demo-{uuid.uuid4().hex[:6]}"
        self.registered: dict[str, Registered] = {}
        self.paused: list[str] = []
        self.passed = False
        self.started = time.monotonic()
        self.failover_gap_s: float | None = None
        self.view_settings: Settings | None = None
        self.children: Children | None = None
        self.dsn = ""
        self.folder = Path()
        self.base = ""
        self.auth: dict[str, str] = {}

    # --- 1, 2: database, topics, processes ---------------------------------------------------

    def run(self, stack: contextlib.ExitStack) -> bool:
        from tickwheel import testing
        from tickwheel.config import load_settings
        from tickwheel.kafka import create_topics, delete_topics

        s = self.settings
        db, drop_database = testing.create_scratch_database(s.effective_dsn, "tickwheel_demo")
        stack.callback(drop_database)
        asyncio.run(testing.migrate(db.dsn))
        self.dsn = db.dsn
        create_topics(s.effective_kafka, self.topics.all(), s.topic_partitions, 1)
        stack.callback(delete_topics, s.effective_kafka, self.topics.all())
        self.folder = Path(tempfile.mkdtemp(prefix="tickwheel-demo-"))
        stack.callback(self._remove_folder)
        self.say(
            f"1. database {db.name} (migrated), topics {self.prefix}.*, "
            f"logs and the handlers' record in {self.folder}"
        )
        env = {
            **os.environ,
            "TICKWHEEL_DSN": db.dsn,
            "TICKWHEEL_TOPIC_PREFIX": self.prefix,
            "TICKWHEEL_SHARDS": str(DEMO_SHARDS),
            "TICKWHEEL_ZK_SESSION_TIMEOUT_MS": str(DEMO_ZK_SESSION_MS),
            "TICKWHEEL_SWEEP_INTERVAL_MS": str(DEMO_SWEEP_MS),
            "TICKWHEEL_DEMO_DIR": str(self.folder),
        }
        self.view_settings = load_settings(
            dsn=db.dsn,
            kafka=s.effective_kafka,
            zk=s.effective_zk,
            topic_prefix=self.prefix,
            shards=DEMO_SHARDS,
        )
        children = self.children = Children(self.exe, env, self.folder)
        stack.callback(self._stop_children)
        port = _free_port()
        children.start("registry", "registry", "--port", str(port))
        for name in ("demo-sched-a", "demo-sched-b"):
            children.start(name, "scheduler", "--id", name, "--metrics-port", "0")
        for name in ("demo-worker-1", "demo-worker-2"):
            wport = _free_port()
            children.start(
                name,
                "worker",
                "--handlers",
                "tickwheel.demo_handlers",
                "--id",
                name,
                "--metrics-port",
                str(wport),
                metrics_port=wport,
            )
        self.base = f"http://127.0.0.1:{port}"
        self._wait_ready()
        self.say(
            "2. started the registry, schedulers demo-sched-a and demo-sched-b, workers "
            f"demo-worker-1 and demo-worker-2 (pids {self._pids()}); all {DEMO_SHARDS} shards led"
        )
        self._registry_steps()
        self._register_mix()
        self._live(self.opts.duration_s, "live view")
        self._failover()
        self._fix_and_replay()
        report = self._settle_and_check()
        if self.opts.keep:
            stack.pop_all()  # nothing is stopped, dropped or deleted
            self._resume()
            self.say(
                f"--keep: still running (pids {self._pids()}); stop with `kill {self._pids()}`; "
                f"then the database {db.name} and topics {self.prefix}.* are yours to drop; "
                f"watch it with TICKWHEEL_DSN={db.dsn} TICKWHEEL_TOPIC_PREFIX={self.prefix} "
                f"TICKWHEEL_SHARDS={DEMO_SHARDS} tickwheel status --watch"
            )
        self.passed = report.lost == 0 and not report.duplicates
        return self.passed

    def _remove_folder(self) -> None:
        """The logs and the record go with a passed run; a failed one keeps them to read."""
        if self.passed:
            shutil.rmtree(self.folder, ignore_errors=True)
        else:
            self.say(f"the processes' logs and the handlers' record stay in {self.folder}")

    def _pids(self) -> str:
        assert self.children is not None
        return " ".join(
            str(c.proc.pid) for c in self.children.all.values() if c.proc.poll() is None
        )

    def _stop_children(self) -> None:
        if self.children is not None:
            self.say("stopping the demo's processes…")
            self.children.stop()

    def _wait_ready(self) -> None:
        import httpx

        def ready() -> bool:
            assert self.children is not None and self.view_settings is not None
            self.children.check_alive()
            if httpx.get(f"{self.base}/healthz", timeout=2).status_code != 200:
                return False
            snap = self._snapshot()
            workers = snap.workers or []
            return snap.led == DEMO_SHARDS and len(workers) == 2 and len(snap.schedulers) == 2

        _wait_for(ready, "the registry, both schedulers and both workers to be ready")

    # --- 3: the registry's own steps ---------------------------------------------------------

    def _registry_steps(self) -> None:
        import httpx

        from tickwheel.kafka import producer

        env = self.children.env if self.children else None
        out = subprocess.run(
            [self.exe, "tenant", "add", self.tenant],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        api_key = out.stdout.strip().splitlines()[-1]
        self.auth = {"Authorization": f"Bearer {api_key}"}
        self.say(f"3. created tenant {self.tenant} (API key {api_key[:10]}…)")
        job = {
            "id": "invoice-42",
            "schedule": "0 9 * * MON-FRI",
            "timezone": "Europe/Berlin",
            "handler": "demo.record",
            "payload": {"invoice": 42},
        }
        resp = self._post(job)
        self.say(
            f"4. POST /v1/jobs → {resp.status_code}: next_run_at "
            f"{resp.json().get('next_run_at')}, version {resp.json().get('version')}"
        )
        prod = producer(self.settings.effective_kafka)
        kafka_job = {"id": "nightly-report", "schedule": "H 2 * * *", "handler": "demo.record"}
        prod.produce(
            self.topics.registrations,
            key=b"nightly-report",
            value=orjson.dumps({"op": "upsert", "tenant": self.tenant, "job": kafka_job}),
        )
        bad = orjson.dumps(
            {
                "op": "upsert",
                "tenant": self.tenant,
                "job": {"id": "broken", "schedule": "every day", "handler": "x"},
            }
        )
        prod.produce(self.topics.registrations, key=b"broken", value=bad)
        prod.flush(10)
        self.say("5. produced two registrations to Kafka: one valid, one with a bad schedule")

        def landed() -> Any:
            r = httpx.get(f"{self.base}/v1/jobs/nightly-report", headers=self.auth, timeout=2)
            return r.json() if r.status_code == 200 else None

        got = _wait_for(landed, "the Kafka registration to land")
        self.registered["nightly-report"] = Registered(kafka_job, _ms_of(got["next_run_at"]))
        self.say(
            f"6. Kafka job landed: schedule {got['schedule']!r} (H resolved per job), "
            f"next_run_at {got['next_run_at']}"
        )
        reason = _find_rejection(self.settings, self.topics.rejected, bad)
        self.say(f"7. rejected onto {self.topics.rejected}: {reason}")
        listing = httpx.get(f"{self.base}/v1/jobs", headers=self.auth, timeout=5).json()
        self.say(f"8. GET /v1/jobs lists {[j['id'] for j in listing['items']]}")

    def _post(self, doc: dict[str, Any]) -> Any:
        import httpx

        resp = httpx.post(f"{self.base}/v1/jobs", json=doc, headers=self.auth, timeout=10)
        if resp.status_code != 201:
            raise RuntimeError(f"demo: POST /v1/jobs {doc['id']} → {resp.status_code} {resp.text}")
        self.registered[doc["id"]] = Registered(doc, _ms_of(resp.json()["next_run_at"]))
        return resp

    # --- 4: the mix --------------------------------------------------------------------------

    def _register_mix(self) -> None:
        from tickwheel.clock import format_ms, now_ms
        from tickwheel.kafka import producer

        record = {"handler": "demo.record"}
        crons = [
            ("heartbeat-utc", "* * * * * *", "UTC", "high"),
            ("poll-tokyo", "*/2 * * * * *", "Asia/Tokyo", "normal"),
            ("sync-new-york", "*/5 * * * * *", "America/New_York", "normal"),
            ("rollup-kolkata", "* * * * *", "Asia/Kolkata", "low"),
            ("report-berlin", "* * * * *", "Europe/Berlin", "normal"),
            ("cleanup-sydney", "30 * * * * *", "Australia/Sydney", "low"),
        ]
        for job_id, schedule, zone, priority in crons:
            self._post(
                {"id": job_id, "schedule": schedule, "timezone": zone, "priority": priority}
                | record
            )
        start = now_ms()
        hot_ms = _ceil_second(start) + FIRST_FIRE_DELAY_S * 1000
        spread = max(self.opts.duration_s * 1000 - FIRST_FIRE_DELAY_S * 1000, 5000)
        for n, offset in enumerate((0.25, 0.6)):
            at = _ceil_second(start + FIRST_FIRE_DELAY_S * 1000 + int(spread * offset))
            self._post({"id": f"reminder-{n + 1}", "at": format_ms(at)} | record)
        self._post(
            {
                "id": "flaky-export",
                "at": format_ms(_ceil_second(start) + 5000),
                "handler": "demo.flaky",
                "max_attempts": 2,
                "backoff": {"base_ms": 200, "cap_ms": 500},
            }
        )
        self.say(
            f"9. over HTTP: {len(crons)} cron jobs (per second, every 2 s, every 5 s, per "
            "minute) in UTC, Tokyo, New York, Kolkata, Berlin and Sydney; 2 one-off reminders; "
            "flaky-export, whose handler fails until fixed (max_attempts 2, backoff 200 ms)"
        )
        prod = producer(self.settings.effective_kafka, **{"linger.ms": 20})
        kafka_jobs: list[dict[str, Any]] = [
            {"id": f"welcome-email-{n}", "at": format_ms(hot_ms - 5000 + 3000 * n)} | record
            for n in range(3)
        ]
        priorities = ("high", "normal", "normal", "low")
        kafka_jobs += [
            {
                "id": f"hot-{n:05d}",
                "at": format_ms(hot_ms),
                "priority": priorities[n % len(priorities)],
                "payload": {"n": n},
            }
            | record
            for n in range(self.opts.hot)
        ]
        for doc in kafka_jobs:
            prod.produce(
                self.topics.registrations,
                key=doc["id"].encode(),
                value=orjson.dumps({"op": "upsert", "tenant": self.tenant, "job": doc}),
            )
            prod.poll(0)
            self.registered[doc["id"]] = Registered(doc, _ms_of(doc["at"]))
        prod.flush(30)
        self.say(
            f"10. through Kafka: 3 one-off emails and a hot second of {self.opts.hot} one-off "
            f"jobs, all at {format_ms(hot_ms)}"
        )

    # --- 5: the live view --------------------------------------------------------------------

    def _snapshot(self, previous: Any = None) -> Any:
        from tickwheel.registry_api.ops.status import collect

        assert self.view_settings is not None
        return asyncio.run(collect(self.view_settings, previous))

    def _executions(self) -> Counter[str]:
        """Executions by outcome, summed over the workers' metrics."""
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        total: Counter[str] = Counter()
        assert self.children is not None
        for child in self.children.all.values():
            if child.metrics_port is None or child.proc.poll() is not None:
                continue
            try:
                text = httpx.get(f"http://127.0.0.1:{child.metrics_port}/metrics", timeout=2).text
            except httpx.HTTPError:
                continue
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == "tickwheel_worker_executions_total":
                        total[sample.labels["outcome"]] += int(sample.value)
        return total

    def _run_counts(self) -> Counter[str]:
        rows = asyncio.run(_fetch(self.dsn, "demo_run_counts", self.tenant))
        return Counter({r["status"]: r["n"] for r in rows})

    def _live(self, seconds: float, title: str, until: Callable[[], bool] | None = None) -> None:
        """Show the live view for `seconds` (or until `until()` holds)."""
        deadline = time.monotonic() + seconds

        def done() -> bool:
            return time.monotonic() >= deadline or (until is not None and until())

        assert self.children is not None
        if sys.stdout.isatty():
            from rich.live import Live

            previous = None
            with Live(auto_refresh=False, transient=False) as live:
                while not done():
                    self.children.check_alive()
                    previous = self._snapshot(previous)
                    live.update(self._rich_view(previous, title), refresh=True)
                    time.sleep(VIEW_INTERVAL_S)
            return
        previous = None
        next_line = 0.0
        while not done():
            self.children.check_alive()
            if time.monotonic() >= next_line:
                previous = self._snapshot(previous)
                self.say(self._plain_line(previous))
                next_line = time.monotonic() + PLAIN_INTERVAL_S
            time.sleep(0.2)

    def _elapsed(self) -> str:
        return f"t+{time.monotonic() - self.started:.0f}s"

    def _plain_line(self, snap: Any) -> str:
        epochs = sorted({s.epoch for s in snap.shards if s.epoch is not None})
        wheel = sum(s.wheel_entries or 0 for s in snap.shards)
        lag = max((s.lag_p99_s or 0 for s in snap.schedulers), default=0)
        ex, runs = self._executions(), self._run_counts()
        return (
            f"   {self._elapsed()}: shards led {snap.led}/{len(snap.shards)} "
            f"(epochs {epochs[0] if epochs else '-'}..{epochs[-1] if epochs else '-'}), "
            f"wheels {wheel}, dispatch lag p99 ≤{lag:g}s, "
            f"backlog {sum(b.backlog for b in snap.backlog)}, "
            f"executions {dict(sorted(ex.items()))}, runs {dict(sorted(runs.items()))}, "
            f"dlq {snap.dlq_messages}"
        )

    def _rich_view(self, snap: Any, title: str) -> Any:
        from rich.table import Table

        from tickwheel.registry_api.ops.status_view import render_rich

        ex, runs = self._executions(), self._run_counts()
        t = Table(title=f"{title} — {self._elapsed()}", title_justify="left", show_edge=False)
        t.add_column("executions (workers)")
        t.add_column("runs (ledger)")
        left = [f"{k} {v}" for k, v in sorted(ex.items())]
        right = [f"{k} {v}" for k, v in sorted(runs.items())]
        for i in range(max(len(left), len(right))):
            t.add_row(left[i] if i < len(left) else "", right[i] if i < len(right) else "")
        return render_rich(snap, [t])

    # --- 6: failover ---------------------------------------------------------------------------

    def _failover(self) -> None:
        assert self.children is not None
        victim = self.children.all["demo-sched-b"]
        before = asyncio.run(_fetch(self.dsn, "ops_shard_leaders"))
        orphaned = {r["shard_id"]: r["epoch"] for r in before if r["owner"] == victim.name}
        killed_at = time.monotonic()
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        self.say(
            f"11. kill -9 {victim.name} (pid {victim.proc.pid}), which led shards "
            f"{sorted(orphaned)}"
        )

        def taken_over() -> bool:
            rows = asyncio.run(_fetch(self.dsn, "ops_shard_leaders"))
            now = {r["shard_id"]: r for r in rows}
            return all(
                now[s]["owner"] != victim.name and now[s]["epoch"] > e for s, e in orphaned.items()
            )

        self._live(READY_TIMEOUT_S, "failover", until=taken_over)
        if not taken_over():
            raise RuntimeError(f"demo: no takeover of {victim.name}'s shards within 60 s")
        self.failover_gap_s = time.monotonic() - killed_at
        self.say(
            f"12. failover: demo-sched-a took over all {len(orphaned)} shards (epochs bumped) "
            f"{self.failover_gap_s:.1f} s after the kill (ZooKeeper session "
            f"{DEMO_ZK_SESSION_MS / 1000:g} s)"
        )
        self._live(3, "after failover")

    # --- 7: fix and replay ---------------------------------------------------------------------

    def _fix_and_replay(self) -> None:
        from tickwheel.demo_handlers import FIXED_FILE
        from tickwheel.registry_api.ops.dlq import DlqFilter, read_dead_letters, select
        from tickwheel.registry_api.replay import Outcome, replay

        def status() -> Any:
            rows = asyncio.run(_fetch(self.dsn, "demo_run_status", self.tenant, "flaky-export"))
            return rows[0]["status"] if rows else None

        _wait_for(lambda: status() == "dead", "flaky-export's run to be dead")
        flt = DlqFilter(tenant=self.tenant)

        def letters() -> Any:
            found, _ = read_dead_letters(
                self.settings.effective_kafka,
                self.topics.dlq,
                timeout_s=self.settings.ops_kafka_timeout_s,
            )
            return select(found, flt)

        chosen = _wait_for(letters, "the dead letter on the DLQ topic")
        (self.folder / FIXED_FILE).touch()
        self.say(
            f"13. {len(chosen)} dead letter(s) on {self.topics.dlq} "
            f"({chosen[0].run_key}: {chosen[0].dead.error}); fixed the handler"
        )

        async def go() -> Any:
            from tickwheel import db

            conn = await db.connect(self.dsn)
            try:
                return await replay(
                    conn, [x.run_key for x in chosen], flt.to_json(), operator="tickwheel demo"
                )
            finally:
                await conn.close()

        report = asyncio.run(go())
        _wait_for(lambda: status() == "succeeded", "the replayed run to succeed")
        self.say(
            f"14. replayed {report.count(Outcome.REPLAYED)} dead run(s) (audit "
            f"#{report.audit_id}); flaky-export's run succeeded under the same run key"
        )

    # --- 8: the check --------------------------------------------------------------------------

    def _settle_and_check(self) -> LedgerReport:
        import httpx

        from tickwheel.clock import now_ms
        from tickwheel.demo_handlers import EXECUTIONS_FILE

        active = [
            r["job_id"]
            for r in asyncio.run(_fetch(self.dsn, "demo_jobs", self.tenant))
            if r["status"] == "active"
        ]
        for job_id in active:
            resp = httpx.post(f"{self.base}/v1/jobs/{job_id}/pause", headers=self.auth, timeout=10)
            if resp.status_code != 200:
                raise RuntimeError(f"demo: pausing {job_id} → {resp.status_code} {resp.text}")
        paused_ms = now_ms()
        self.paused = active
        self.say(f"15. paused the {len(active)} active jobs; waiting for the last runs")

        def settled() -> bool:
            counts = self._run_counts()
            return all(s in ("succeeded", "skipped", "dead") for s in counts)

        _wait_for(settled, "every run to finish", SETTLE_TIMEOUT_S)
        jobs = {r["job_id"]: r for r in asyncio.run(_fetch(self.dsn, "demo_jobs", self.tenant))}
        due: dict[str, list[int]] = {}
        behind: dict[str, list[int]] = {}
        for job_id, reg in self.registered.items():
            row = jobs.get(job_id)
            if reg.first_ms is None or row is None:
                continue
            stop = row["next_run_ms"] if row["next_run_ms"] is not None else paused_ms + 1
            due[job_id] = occurrences(
                self.tenant, reg.doc, reg.first_ms, min(stop, paused_ms + 1), DEMO_SHARDS
            )
            if row["next_run_ms"] is not None:
                late = occurrences(
                    self.tenant,
                    reg.doc,
                    row["next_run_ms"],
                    paused_ms - KEEP_UP_SLACK_MS,
                    DEMO_SHARDS,
                )
                if late:
                    behind[job_id] = late
        rows = [
            (r["job_id"], r["scheduled_ms"], r["status"])
            for r in asyncio.run(_fetch(self.dsn, "demo_runs", self.tenant))
        ]
        record = self.folder / EXECUTIONS_FILE
        executions = record.read_text().splitlines() if record.exists() else []
        report = check_ledger(due, behind, rows, executions, self.tenant)
        self._summary(report, executions)
        return report

    def _resume(self) -> None:
        """--keep: the jobs paused for the check go on firing."""
        import httpx

        for job_id in self.paused:
            resp = httpx.post(f"{self.base}/v1/jobs/{job_id}/resume", headers=self.auth, timeout=10)
            if resp.status_code != 200:
                raise RuntimeError(f"demo: resuming {job_id} → {resp.status_code} {resp.text}")
        self.say(f"resumed the {len(self.paused)} paused jobs")

    def _summary(self, report: LedgerReport, executions: list[str]) -> None:
        outcomes = Counter(line.rsplit(" ", 1)[-1] for line in executions)
        self.say("summary:")
        self.say(f"   jobs registered: {len(self.registered)} ({self.opts.hot} in the hot second)")
        self.say(
            f"   due occurrences: {report.due}; run rows: "
            + ", ".join(f"{k} {v}" for k, v in sorted(report.outcomes.items()))
        )
        self.say(
            f"   handler executions: {len(executions)} ("
            + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            + ")"
        )
        if self.failover_gap_s is not None:
            self.say(f"   failover gap: {self.failover_gap_s:.1f} s")
        for what, keys in (
            ("due without a row", report.missing),
            ("not finished as expected", report.unfinished),
            ("never dispatched", report.undispatched),
            ("succeeded without an execution", report.unexecuted),
            ("rows of no due occurrence", report.unexpected),
        ):
            if keys:
                self.say(f"   {what}: {len(keys)} (first: {', '.join(keys[:3])})")
        self.say(f"lost: {report.lost}")
        self.say(f"duplicates: {len(report.duplicates)}")
        self.say(f"wall time: {time.monotonic() - self.started:.0f} s")


def _ms_of(iso: str | None) -> int | None:
    from tickwheel.schedule import parse_instant

    return None if iso is None else parse_instant(iso)


async def _fetch(dsn: str, query: str, *args: Any) -> list[Any]:
    from tickwheel import db
    from tickwheel.queries import QUERIES

    conn = await db.connect(dsn)
    try:
        return list(await conn.fetch(QUERIES[query], *args))
    finally:
        await conn.close()


def _find_rejection(settings: Settings, topic: str, original: bytes) -> str:
    import base64

    from tickwheel.kafka import consumer

    cons = consumer(
        settings.effective_kafka, f"demo-{uuid.uuid4()}", **{"enable.auto.commit": False}
    )
    cons.subscribe([topic])
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = cons.poll(0.5)
            if msg is None or msg.error():
                continue
            body = orjson.loads(msg.value() or b"{}")
            if base64.b64decode(body.get("original", "")) == original:
                return str(body["reason"])
        raise RuntimeError("demo: the rejection did not appear")
    finally:
        cons.close()


@contextlib.contextmanager
def _interrupt_as_error() -> Iterator[None]:
    try:
        yield
    except KeyboardInterrupt:
        raise RuntimeError("demo: interrupted; stopped what it had started") from None


@click.command("demo")
@click.option(
    "--duration",
    type=click.FloatRange(10, 3600),
    default=60.0,
    show_default=True,
    help="Seconds of live view before the failover.",
)
@click.option(
    "--hot",
    type=click.IntRange(0, 1_000_000),
    default=10_000,
    show_default=True,
    help="One-off jobs registered for the same second.",
)
@click.option("--keep", is_flag=True, help="Leave the processes running at the end.")
def demo(duration: float, hot: int, keep: bool) -> None:
    """The whole system on the local stack: registry, schedulers, workers, failover, replay."""
    from tickwheel.core_cli import db_migrate
    from tickwheel.stack.cli import dev_up

    ctx = click.get_current_context()
    ctx.invoke(dev_up)
    ctx.invoke(db_migrate)
    runner = Demo(settings(), click.echo, DemoOptions(duration, hot, keep))
    try:
        with _interrupt_as_error(), contextlib.ExitStack() as stack:
            ok = runner.run(stack)
    except RuntimeError as exc:
        fail(str(exc))
    if not ok:
        fail("demo: the ledger check failed (see lost/duplicates above)")
