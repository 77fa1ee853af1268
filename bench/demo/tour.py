"""The demo's steps (the package docstring lists them): the `Demo` that narrates them, starts
its processes under the harnesses' supervisor, and checks its ledger at the end."""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tickwheel.bench.demo.check import (
    DemoReport,
    Registered,
    check_ledger,
    next_after,
    occurrences,
)
from tickwheel.bench.demo.view import LiveView
from tickwheel.bench.handlers import DIR_ENV, EXECUTIONS_FILE, FIXED_FILE
from tickwheel.bench.ledger import Execution, RunRow, read_executions
from tickwheel.bench.supervisor import Supervisor, free_ports, tickwheel_command
from tickwheel.config import Settings
from tickwheel.signatures import sign
from tickwheel.topics import Topics

# httpx, rich and the Kafka client are imported when the demo runs.

READY_TIMEOUT_S = 60.0  # seconds for a child process or a registration to be ready
SETTLE_TIMEOUT_S = 60.0  # seconds for the last runs to finish after the jobs are paused
DEMO_SHARDS = 16
DEMO_ZK_SESSION_MS = 4000  # the dev ZooKeeper's minimum (2 x tickTime): a quick failover
DEMO_SWEEP_MS = 500  # leaders pick up due retries (and replays) within half a second
FIRST_FIRE_DELAY_S = 15  # the hot second and the one-offs are this far after registration
KEEP_UP_SLACK_MS = 3000  # a job due this long before the pause but never claimed counts lost
HANDLERS = "tickwheel.bench.handlers"


@dataclass(frozen=True)
class DemoOptions:
    duration_s: float = 60.0
    hot: int = 10_000
    keep: bool = False


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


# --- the demo -----------------------------------------------------------------------------------


class Demo:
    """One run of the demo: `run` goes through the steps and says whether the ledger held."""

    def __init__(self, settings: Settings, say: Callable[[str], None], opts: DemoOptions) -> None:
        self.settings, self.say, self.opts = settings, say, opts
        self.prefix = f"demo{uuid.uuid4().hex[:8]}"
        self.topics = Topics(self.prefix)
        self.tenant = f"demo-{uuid.uuid4().hex[:6]}"
        self.registered: dict[str, Registered] = {}
        self.paused: list[str] = []
        self.passed = False
        self.started = time.monotonic()
        self.failover_gap_s: float | None = None
        self.view: LiveView | None = None
        self.children: Supervisor | None = None
        self.dsn = ""
        self.folder = Path()
        self.base = ""
        self.auth: dict[str, str] = {}
        self.api_key = ""  # the tenant's, which signs its Kafka registrations

    # --- 1, 2: database, topics, processes ---------------------------------------------------

    def run(self, stack: contextlib.ExitStack) -> bool:
        from tickwheel import testing
        from tickwheel.config import load_settings
        from tickwheel.kafka.admin import create_topics, delete_topics

        s = self.settings
        db, drop_database = testing.create_scratch_database(s.effective_dsn, "tickwheel_demo")
        stack.callback(drop_database)
        asyncio.run(testing.migrate(db.dsn, deployment=self.prefix))
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
            "TICKWHEEL_DSN": db.dsn,
            "TICKWHEEL_TOPIC_PREFIX": self.prefix,
            "TICKWHEEL_SHARDS": str(DEMO_SHARDS),
            "TICKWHEEL_ZK_SESSION_TIMEOUT_MS": str(DEMO_ZK_SESSION_MS),
            "TICKWHEEL_SWEEP_INTERVAL_MS": str(DEMO_SWEEP_MS),
            DIR_ENV: str(self.folder),
        }
        children = self.children = Supervisor(env, self.folder)
        self.view = LiveView(
            load_settings(
                dsn=db.dsn,
                kafka=s.effective_kafka,
                zk=s.effective_zk,
                topic_prefix=self.prefix,
                shards=DEMO_SHARDS,
            ),
            children,
            self._fetch,
            self.tenant,
            self.say,
            self.started,
        )
        stack.callback(self._stop_children)
        port, *worker_ports = free_ports(3)
        children.start("registry", ["registry", "--port", str(port)])
        for name in ("demo-sched-a", "demo-sched-b"):
            children.start(name, ["scheduler", "--id", name, "--metrics-port", "0"])
        for name, wport in zip(("demo-worker-1", "demo-worker-2"), worker_ports, strict=True):
            children.start(
                name,
                ["worker", "--handlers", HANDLERS, "--id", name, "--metrics-port", str(wport)],
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
        self.view.show(self.opts.duration_s, "live view")
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

    async def _fetch(self, query: str, *args: Any) -> list[Any]:
        """The rows of the named query on the demo's database."""
        from tickwheel import db
        from tickwheel.queries import QUERIES

        conn = await db.connect(self.dsn)
        try:
            return list(await conn.fetch(QUERIES[query], *args))
        finally:
            await conn.close()

    def _remove_folder(self) -> None:
        """The logs and the record go with a passed run; a failed one keeps them to read."""
        if self.passed:
            shutil.rmtree(self.folder, ignore_errors=True)
        else:
            self.say(f"the processes' logs and the handlers' record stay in {self.folder}")

    def _pids(self) -> str:
        assert self.children is not None
        return " ".join(str(pid) for pid in self.children.pids())

    def _stop_children(self) -> None:
        if self.children is not None:
            self.say("stopping the demo's processes…")
            self.children.stop()

    def _wait_ready(self) -> None:
        import httpx

        def ready() -> bool:
            assert self.children is not None and self.view is not None
            self.children.check()
            if httpx.get(f"{self.base}/healthz", timeout=2).status_code != 200:
                return False
            snap = self.view.snapshot()
            workers = snap.workers or []
            return snap.led == DEMO_SHARDS and len(workers) == 2 and len(snap.schedulers) == 2

        _wait_for(ready, "the registry, both schedulers and both workers to be ready")

    # --- 3: the registry's own steps ---------------------------------------------------------

    def _registry_steps(self) -> None:
        import httpx

        from tickwheel.kafka.clients import producer

        env = self.children.env if self.children else None
        out = subprocess.run(
            [*tickwheel_command(), "tenant", "add", self.tenant],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        api_key = out.stdout.strip().splitlines()[-1]
        self.auth = {"Authorization": f"Bearer {api_key}"}
        self.api_key = api_key
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
        upsert = {"op": "upsert", "tenant": self.tenant, "job": kafka_job}
        self._produce(prod, b"nightly-report", upsert)
        bad = orjson.dumps(
            {
                "op": "upsert",
                "tenant": self.tenant,
                "job": {"id": "broken", "schedule": "every day", "handler": "x"},
            }
        )
        self._produce_value(prod, b"broken", bad)
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

    def _produce(self, prod: Any, key: bytes, body: dict[str, Any]) -> None:
        self._produce_value(prod, key, orjson.dumps(body))

    def _produce_value(self, prod: Any, key: bytes, value: bytes) -> None:
        """One registration, signed with the tenant's key (form 2) as a service signs it: the
        registry takes only signed ones by default."""
        topic = self.topics.registrations
        prod.produce(topic, key=key, value=value, headers=[sign(value, self.api_key, topic=topic)])

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
        from tickwheel.kafka.clients import producer

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
            self._produce(
                prod, doc["id"].encode(), {"op": "upsert", "tenant": self.tenant, "job": doc}
            )
            prod.poll(0)
            self.registered[doc["id"]] = Registered(doc, _ms_of(doc["at"]))
        prod.flush(30)
        self.say(
            f"10. through Kafka: 3 one-off emails and a hot second of {self.opts.hot} one-off "
            f"jobs, all at {format_ms(hot_ms)}"
        )

    # --- 6: failover ---------------------------------------------------------------------------

    def _failover(self) -> None:
        assert self.children is not None and self.view is not None
        victim = "demo-sched-b"
        before = asyncio.run(self._fetch("ops_shard_leaders"))
        orphaned = {r["shard_id"]: r["epoch"] for r in before if r["owner"] == victim}
        killed_at = time.monotonic()
        pid = self.children.kill(victim).pid
        self.say(f"11. kill -9 {victim} (pid {pid}), which led shards {sorted(orphaned)}")

        def taken_over() -> bool:
            rows = asyncio.run(self._fetch("ops_shard_leaders"))
            now = {r["shard_id"]: r for r in rows}
            return all(
                now[s]["owner"] != victim and now[s]["epoch"] > e for s, e in orphaned.items()
            )

        self.view.show(READY_TIMEOUT_S, "failover", until=taken_over)
        if not taken_over():
            raise RuntimeError(f"demo: no takeover of {victim}'s shards within 60 s")
        self.failover_gap_s = time.monotonic() - killed_at
        self.say(
            f"12. failover: demo-sched-a took over all {len(orphaned)} shards (epochs bumped) "
            f"{self.failover_gap_s:.1f} s after the kill (ZooKeeper session "
            f"{DEMO_ZK_SESSION_MS / 1000:g} s)"
        )
        self.view.show(3, "after failover")

    # --- 7: fix and replay ---------------------------------------------------------------------

    def _fix_and_replay(self) -> None:
        from tickwheel.registry_api.ops.dlq import DlqFilter, read_dead_letters, select
        from tickwheel.registry_api.replay import Outcome, replay

        def status() -> Any:
            rows = asyncio.run(self._fetch("demo_run_status", self.tenant, "flaky-export"))
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

    def _settle_and_check(self) -> DemoReport:
        import httpx

        from tickwheel.clock import now_ms

        # A one-off whose run exists is done, though it reads `active` until its leader writes
        # its position (D-269): only the jobs that may still fire are paused.
        ran = {r["job_id"] for r in asyncio.run(self._fetch("bench_ledger_runs", self.tenant))}
        active = [
            r["job_id"]
            for r in asyncio.run(self._fetch("demo_jobs", self.tenant))
            if r["status"] == "active" and not (r["job_id"] in ran and self._one_off(r["job_id"]))
        ]
        paused = []
        for job_id in active:
            resp = httpx.post(f"{self.base}/v1/jobs/{job_id}/pause", headers=self.auth, timeout=10)
            if resp.status_code == 409 and "is completed" in resp.text:
                # A one-off whose run was claimed reads `active` until its leader writes its
                # position (D-269); written meanwhile, there is nothing left to pause.
                continue
            if resp.status_code != 200:
                raise RuntimeError(f"demo: pausing {job_id} → {resp.status_code} {resp.text}")
            paused.append(job_id)
        paused_ms = now_ms()
        self.paused = active = paused
        self.say(f"15. paused the {len(active)} active jobs; waiting for the last runs")

        assert self.view is not None
        view = self.view

        def settled() -> bool:
            counts = view.run_counts()
            return all(s in ("succeeded", "skipped", "dead") for s in counts)

        _wait_for(settled, "every run to finish", SETTLE_TIMEOUT_S)
        jobs = {r["job_id"]: r for r in asyncio.run(self._fetch("demo_jobs", self.tenant))}
        rows = [
            RunRow(self.tenant, **dict(r))
            for r in asyncio.run(self._fetch("bench_ledger_runs", self.tenant))
        ]
        latest: dict[str, int] = {}
        for run in rows:
            latest[run.job_id] = max(latest.get(run.job_id, run.scheduled_ms), run.scheduled_ms)
        due: dict[str, list[int]] = {}
        behind: dict[str, list[int]] = {}
        for job_id, reg in self.registered.items():
            row = jobs.get(job_id)
            if reg.first_ms is None or row is None:
                continue
            position = row["next_run_ms"]
            if position is not None and latest.get(job_id, -1) >= position:
                # Its leader claimed past the row's position, which it writes in batches
                # (D-269) and not at all once the job is paused: the schedule stands after
                # the latest run.
                position = next_after(self.tenant, reg.doc, latest[job_id], DEMO_SHARDS)
                position = paused_ms + 1 if position is None else position
            row = {**dict(row), "next_run_ms": position}
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
        executions = read_executions(self.folder / EXECUTIONS_FILE)
        report = check_ledger(due, behind, rows, executions, self.tenant)
        self._summary(report, executions)
        return report

    def _one_off(self, job_id: str) -> bool:
        reg = self.registered.get(job_id)
        return reg is not None and reg.doc.get("at") is not None

    def _resume(self) -> None:
        """--keep: the jobs paused for the check go on firing."""
        import httpx

        for job_id in self.paused:
            resp = httpx.post(f"{self.base}/v1/jobs/{job_id}/resume", headers=self.auth, timeout=10)
            if resp.status_code != 200:
                raise RuntimeError(f"demo: resuming {job_id} → {resp.status_code} {resp.text}")
        self.say(f"resumed the {len(self.paused)} paused jobs")

    def _summary(self, report: DemoReport, executions: list[Execution]) -> None:
        verdict = report.verdict
        outcomes = Counter(e.event for e in executions if e.returned)
        self.say("summary:")
        self.say(f"   jobs registered: {len(self.registered)} ({self.opts.hot} in the hot second)")
        self.say(
            f"   due occurrences: {verdict.expected}; run rows: "
            + ", ".join(f"{k} {v}" for k, v in sorted(verdict.outcomes.items()))
        )
        self.say(
            f"   handler executions: {sum(outcomes.values())} ("
            + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            + ")"
        )
        if self.failover_gap_s is not None:
            self.say(f"   failover gap: {self.failover_gap_s:.1f} s")
        for what, keys in (
            ("due without a row", verdict.missing),
            ("not finished as expected", verdict.unfinished),
            ("never dispatched", report.undispatched),
            ("succeeded without an execution", verdict.unexecuted),
            ("rows of no due occurrence", verdict.unexpected),
        ):
            if keys:
                self.say(f"   {what}: {len(keys)} (first: {', '.join(keys[:3])})")
        self.say(f"lost: {report.lost}")
        self.say(f"duplicates: {len(report.duplicates)}")
        self.say(f"wall time: {time.monotonic() - self.started:.0f} s")


def _ms_of(iso: str | None) -> int | None:
    from tickwheel.schedule import parse_instant

    return None if iso is None else parse_instant(iso)


def _find_rejection(settings: Settings, topic: str, original: bytes) -> str:
    import base64

    from tickwheel.kafka.clients import consumer

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
