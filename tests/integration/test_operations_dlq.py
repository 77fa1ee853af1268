"""`tickwheel dlq ls|show|replay|audit` against real Postgres and Kafka.

The workers are not part of these tests: each test leaves behind what a worker would after
the attempts of a run were spent — a `dead` job_runs row and a DeadLetter on the test's
`<prefix>.runs.dlq` — and then drives the commands as an operator would.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, TopicPartition

from tickwheel.cli import main
from tickwheel.clock import now_ms
from tickwheel.envelopes.dead_letters import DeadLetter
from tickwheel.envelopes.run import RunEnvelope
from tickwheel.kafka.clients import admin_client, producer
from tickwheel.registry_api.document import Limits, parse_document, validate_job
from tickwheel.registry_api.state import Op
from tickwheel.registry_api.store import RegistryStore
from tickwheel.stack import Addresses
from tickwheel.topics import Topics

# The scene puts junk of its own on the DLQ, beside the dead letters it writes.
pytestmark = [pytest.mark.integration, pytest.mark.foreign_messages("runs.dlq")]

SHARDS = 4
HOUR_MS = 3_600_000
TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")


class Scene:
    """One test's tenant, database and topics, and the CLI pointed at them."""

    def __init__(self, stack: Addresses, dsn: str, topics: Topics) -> None:
        self.stack, self.dsn, self.topics = stack, dsn, topics
        self.tenant = f"t{uuid.uuid4().hex[:8]}"
        self.now = now_ms()
        asyncio.run(self._tenant())

    async def _tenant(self) -> None:
        pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=1)
        try:
            await RegistryStore(pool, SHARDS).create_tenant(self.tenant)
        finally:
            await pool.close()

    def cli(self, *args: str) -> Result:
        env = {
            "TICKWHEEL_DSN": self.dsn,
            "TICKWHEEL_KAFKA": self.stack.kafka,
            "TICKWHEEL_TOPIC_PREFIX": self.topics.prefix,
            "TICKWHEEL_SHARDS": str(SHARDS),
            "USER": "ops-tester",
        }
        return CliRunner().invoke(main, list(args), env=env)

    def json(self, *args: str) -> Any:
        result = self.cli(*args, "--json")
        assert result.exit_code == 0, result.output
        return orjson.loads(result.stdout)

    def jobs(self, *job_ids: str, max_attempts: int = 5) -> None:
        async def go() -> None:
            pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=1)
            try:
                ops = []
                for job_id in job_ids:
                    doc = parse_document(
                        {
                            "id": job_id,
                            "schedule": "0 3 * * *",
                            "handler": "h.run",
                            "max_attempts": max_attempts,
                        }
                    )
                    spec = validate_job(self.tenant, doc, Limits(shards=SHARDS), self.now)
                    ops.append(Op("upsert", self.tenant, job_id, spec=spec))
                await RegistryStore(pool, SHARDS).apply(ops)
            finally:
                await pool.close()

        asyncio.run(go())

    def run_row(self, job_id: str, scheduled: int, status: str, attempt: int = 3) -> str:
        """A job_runs row as the workers leave it; returns its run key."""

        async def go() -> None:
            conn = await asyncpg.connect(self.dsn)
            try:
                await conn.execute(
                    "INSERT INTO job_runs (tenant, job_id, scheduled_at, shard_id, priority,"
                    " status, attempt, epoch, max_attempts, last_error, finished_at)"
                    " VALUES ($1, $2, 'epoch'::timestamptz + $3 * interval '1 millisecond',"
                    " 0, 'normal', $4, $5, 1, $5, 'boom', now())",
                    self.tenant,
                    job_id,
                    scheduled,
                    status,
                    attempt,
                )
            finally:
                await conn.close()

        asyncio.run(go())
        return f"{self.tenant}/{job_id}@{scheduled}"

    def letter(self, job_id: str, scheduled: int, error: str, dead_at: int) -> DeadLetter:
        run = RunEnvelope(
            f"{self.tenant}/{job_id}@{scheduled}",
            self.tenant,
            job_id,
            scheduled,
            3,
            1,
            "normal",
            {"n": scheduled},
            1000,
            handler="h.run",
        )
        return DeadLetter(run, error, 3, dead_at)

    def publish(self, letters: list[DeadLetter], raw: Sequence[bytes] = ()) -> None:
        """Produce dead letters (stamped with their dead_at, as a worker would) and raw bytes."""
        prod = producer(self.stack.kafka)
        for item in letters:
            body = orjson.loads(item.encode())
            body["worker"] = "worker-7"  # a field the workers may add: must be tolerated
            prod.produce(
                self.topics.dlq,
                key=item.run.job_id,
                value=orjson.dumps(body),
                timestamp=item.dead_at,
            )
        for value in raw:
            prod.produce(self.topics.dlq, key=b"junk", value=value)
        assert prod.flush(30) == 0

    def rows(self) -> dict[str, dict[str, Any]]:
        """Every run row of the tenant, by run key."""

        async def go() -> list[asyncpg.Record]:
            conn = await asyncpg.connect(self.dsn)
            try:
                return await conn.fetch(
                    "SELECT job_id, (extract(epoch FROM scheduled_at) * 1000)::bigint AS ms,"
                    " status, attempt, max_attempts, origin, retry_at, lease_until"
                    " FROM job_runs WHERE tenant = $1",
                    self.tenant,
                )
            finally:
                await conn.close()

        return {f"{self.tenant}/{r['job_id']}@{r['ms']}": dict(r) for r in asyncio.run(go())}


@pytest.fixture
def scene(stack: Addresses, db_dsn: str, topics: Topics) -> Scene:
    return Scene(stack, db_dsn, topics)


def _keys(listing: dict[str, Any]) -> list[str]:
    return [item["run_key"] for item in listing["items"]]


def test_ls_filters_select_what_they_say(scene: Scene) -> None:
    """--since, --job, --tenant, --error and --limit each narrow the listing as documented"""
    t = scene.now - 10 * HOUR_MS
    old = scene.letter("a", t, "Timeout calling billing", dead_at=scene.now - 48 * HOUR_MS)
    a2 = scene.letter("a", t + 1, "connection refused", dead_at=scene.now - 2 * HOUR_MS)
    b1 = scene.letter("b", t + 2, "TIMEOUT again", dead_at=scene.now - HOUR_MS)
    scene.publish([old, a2, b1], raw=[b"not json", b'{"v": 1}'])

    listing = scene.json("dlq", "ls")
    assert _keys(listing) == [old.run.run_key, a2.run.run_key, b1.run.run_key]
    assert len(listing["malformed"]) == 2
    assert listing["items"][0]["attempts"] == 3
    assert _keys(scene.json("dlq", "ls", "--since", "1d")) == [a2.run.run_key, b1.run.run_key]
    assert _keys(scene.json("dlq", "ls", "--job", "a")) == [old.run.run_key, a2.run.run_key]
    assert _keys(scene.json("dlq", "ls", "--error", "timeout")) == [
        old.run.run_key,
        b1.run.run_key,
    ]
    assert _keys(scene.json("dlq", "ls", "--limit", "1")) == [old.run.run_key]
    assert _keys(scene.json("dlq", "ls", "--tenant", "someone-else")) == []
    assert len(_keys(scene.json("dlq", "ls", "--tenant", scene.tenant))) == 3

    table = scene.cli("dlq", "ls", "--job", "b")
    assert table.exit_code == 0
    assert table.stdout.splitlines()[0].split() == ["DEAD", "AT", "RUN", "KEY", "ATTEMPTS", "ERROR"]
    assert b1.run.run_key in table.stdout and "TIMEOUT again" in table.stdout
    assert "2 message(s)" in table.stderr and "not dead letters" in table.stderr


def _committed(kafka: str, group: str, topic: str) -> list[int]:
    reader = Consumer({"bootstrap.servers": kafka, "group.id": group, "log_level": 0})
    try:
        parts = reader.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)
        return [tp.offset for tp in parts]
    finally:
        reader.close()


def test_ls_moves_no_consumer_group(scene: Scene) -> None:
    """reading the DLQ creates no consumer group and leaves a group's committed offsets alone"""
    scene.publish([scene.letter("a", scene.now - i, "boom", scene.now) for i in range(1, 5)])
    group = f"ops-watch-{uuid.uuid4().hex[:8]}"
    watcher = Consumer({"bootstrap.servers": scene.stack.kafka, "group.id": group})
    watcher.commit(
        offsets=[TopicPartition(scene.topics.dlq, 0, 1), TopicPartition(scene.topics.dlq, 1, 0)],
        asynchronous=False,
    )
    watcher.close()
    admin = admin_client(scene.stack.kafka)
    before = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    committed = _committed(scene.stack.kafka, group, scene.topics.dlq)

    assert len(scene.json("dlq", "ls")["items"]) == 4
    assert scene.cli("dlq", "replay", "--dry-run").exit_code == 0

    after = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    assert group in before
    assert not {g for g in after - before if g.startswith("tickwheel-dlq")}
    assert _committed(scene.stack.kafka, group, scene.topics.dlq) == committed == [1, 0]


def test_show_prints_envelope_error_and_history(scene: Scene) -> None:
    """dlq show: every dead letter of the run, its envelope, and its job_runs row"""
    scene.jobs("a")
    t = scene.now - HOUR_MS
    key = scene.run_row("a", t, "dead")
    first = scene.letter("a", t, "first death", dead_at=scene.now - 50_000)
    second = scene.letter("a", t, "second death", dead_at=scene.now - 10_000)
    scene.publish([second, first])

    shown = scene.json("dlq", "show", key)
    assert [x["error"] for x in shown["letters"]] == ["first death", "second death"]
    assert shown["letters"][-1]["envelope"]["payload"] == {"n": t}
    assert shown["run"]["status"] == "dead" and shown["run"]["attempt"] == 3
    assert shown["run"]["job_status"] == "active" and shown["run"]["replays"] == []

    text = scene.cli("dlq", "show", key)
    assert text.exit_code == 0
    assert "dead letters on" in text.stdout and "second death" in text.stdout
    assert '"handler": "h.run"' in text.stdout and "status        dead" in text.stdout

    unknown = scene.cli("dlq", "show", f"{scene.tenant}/nope@1")
    assert unknown.exit_code == 2
    assert unknown.stderr.strip().splitlines() == [
        f"tickwheel: run key {scene.tenant}/nope@1 is neither on {scene.topics.dlq} nor in job_runs"
    ]


def test_replay_moves_exactly_the_selected_dead_runs_and_is_idempotent(scene: Scene) -> None:
    """a filtered replay makes exactly its dead runs retrying with a fresh budget; a second
    does nothing more; a dry run changes nothing; a deleted job's run is refused; the audit
    lists both replays"""
    scene.jobs("a", "b", max_attempts=4)
    scene.jobs("gone")
    t = scene.now - 5 * HOUR_MS
    a1 = scene.run_row("a", t, "dead", attempt=3)
    a2 = scene.run_row("a", t + 1000, "dead", attempt=1)
    a_ok = scene.run_row("a", t + 2000, "succeeded")  # replayed by hand earlier, succeeded
    b1 = scene.run_row("b", t, "dead")
    g1 = scene.run_row("gone", t, "dead")
    dead_at = scene.now - HOUR_MS
    scene.publish(
        [
            scene.letter("a", t, "timeout", dead_at),
            scene.letter("a", t + 1000, "timeout", dead_at + 1),
            scene.letter("a", t + 2000, "timeout", dead_at + 2),
            scene.letter("b", t, "timeout", dead_at + 3),
            scene.letter("gone", t, "timeout", dead_at + 4),
        ]
    )
    start = scene.rows()
    # The audit is the database's, shared by this module's tests: look at what comes after.
    audited_before = {e["id"] for e in scene.json("dlq", "audit")["items"]}

    def audit_entries() -> list[dict[str, Any]]:
        return [e for e in scene.json("dlq", "audit")["items"] if e["id"] not in audited_before]

    dry = scene.json("dlq", "replay", "--job", "a", "--dry-run", "--attempts", "2")
    assert dry["dry_run"] is True and dry["audit_id"] is None
    assert (dry["replayed"], dry["skipped"], dry["refused"]) == (2, 1, 0)
    assert scene.rows() == start
    assert audit_entries() == []

    first = scene.json("dlq", "replay", "--job", "a", "--attempts", "2", "--rate", "50/s")
    outcomes = {r["run_key"]: (r["outcome"], r["reason"]) for r in first["runs"]}
    assert outcomes == {
        a1: ("replayed", None),
        a2: ("replayed", None),
        a_ok: ("skipped", "succeeded since"),
    }
    rows = scene.rows()
    for key, attempt in ((a1, 3), (a2, 1)):
        row = rows[key]
        assert (row["status"], row["attempt"], row["max_attempts"], row["origin"]) == (
            "retrying",
            attempt,
            attempt + 2,
            "replay",
        )
        due = row["retry_at"]
        assert abs(due - dt.datetime.now(dt.UTC)) < dt.timedelta(seconds=60)
    assert {k: v for k, v in rows.items() if k not in (a1, a2)} == {
        k: v for k, v in start.items() if k not in (a1, a2)
    }

    second = scene.json("dlq", "replay", "--job", "a", "--attempts", "2")
    assert second["replayed"] == 0 and second["skipped"] == 3
    assert {r["run_key"]: r["reason"] for r in second["runs"]} == {
        a1: "already replayed, now retrying",
        a2: "already replayed, now retrying",
        a_ok: "succeeded since",
    }
    assert scene.rows() == rows

    removed = scene.cli("jobs", "rm", f"{scene.tenant}/gone")
    assert removed.exit_code == 0, removed.output
    third = scene.cli("dlq", "replay", "--tenant", scene.tenant)
    assert third.exit_code == 0, third.output
    assert "refused" in third.stdout and "its job was deleted" in third.stdout
    after = scene.rows()
    assert after[g1]["status"] == "dead"
    assert (after[b1]["status"], after[b1]["max_attempts"]) == ("retrying", 3 + 4)  # job's own

    audit = audit_entries()
    assert [(e["replayed"], e["skipped"], e["refused"], e["outcome"]) for e in audit] == [
        (1, 3, 1, "completed"),
        (0, 3, 0, "completed"),
        (2, 1, 0, "completed"),
    ]
    assert audit[2]["filters"]["job"] == "a" and audit[2]["attempts"] == 2
    assert audit[2]["rate_per_s"] == 50.0 and audit[0]["attempts"] is None
    assert {e["operator"] for e in audit} == {"ops-tester"}
    assert all(e["finished_at"] is not None for e in audit)

    history = scene.json("runs", "show", a1)["replays"]
    assert [(h["audit_id"], h["outcome"]) for h in history] == [
        (audit[2]["id"], "replayed"),
        (audit[1]["id"], "skipped"),
        (audit[0]["id"], "skipped"),
    ]
    text = scene.cli("dlq", "audit")
    assert text.exit_code == 0 and "ops-tester" in text.stdout and "job=a" in text.stdout


def test_unreachable_kafka_is_one_line_and_exit_1(scene: Scene) -> None:
    """a broker that does not answer: exit 1 within the short timeout, one line naming it"""
    env = {
        "TICKWHEEL_DSN": scene.dsn,
        "TICKWHEEL_TOPIC_PREFIX": scene.topics.prefix,  # the database's deployment (D-048)
        "TICKWHEEL_KAFKA": "127.0.0.1:1",
        "TICKWHEEL_OPS_KAFKA_TIMEOUT_S": "1.5",
    }
    for args in (["dlq", "ls"], ["dlq", "replay"], ["dlq", "show", f"{scene.tenant}/a@1"]):
        result = CliRunner().invoke(main, args, env=env)
        assert result.exit_code == 1, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Kafka at 127.0.0.1:1 did not answer within 1.5 s" in lines[0]


def test_missing_topic_and_unreachable_postgres_are_one_line(scene: Scene) -> None:
    """no DLQ topic under the prefix, or no Postgres: exit 1 with one line saying which"""
    env = {"TICKWHEEL_KAFKA": scene.stack.kafka, "TICKWHEEL_TOPIC_PREFIX": "no-such-prefix-x"}
    result = CliRunner().invoke(main, ["dlq", "ls"], env=env)
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"tickwheel: topic no-such-prefix-x.runs.dlq does not exist on Kafka at "
        f"{scene.stack.kafka} (wrong TICKWHEEL_TOPIC_PREFIX, or run `tickwheel topics create`)"
    ]
    env = {"TICKWHEEL_DSN": "postgresql://tickwheel@127.0.0.1:1/none"}
    for args in (["dlq", "audit"], ["runs", "ls"], ["jobs", "pause", "a/b"], ["gc"]):
        result = CliRunner().invoke(main, args, env=env)
        assert result.exit_code == 1, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "cannot connect to Postgres at" in lines[0]


def test_an_interrupted_replay_records_what_it_did(scene: Scene) -> None:
    """Ctrl-C between chunks: exit 130, the runs done so far replayed and audited as such"""
    scene.jobs("a")
    t = scene.now - HOUR_MS
    keys = [scene.run_row("a", t + i, "dead") for i in range(3)]
    scene.publish([scene.letter("a", t + i, "boom", scene.now - 1000 + i) for i in range(3)])
    env = {
        **os.environ,
        "TICKWHEEL_DSN": scene.dsn,
        "TICKWHEEL_KAFKA": scene.stack.kafka,
        "TICKWHEEL_TOPIC_PREFIX": scene.topics.prefix,
    }
    # One replay per 20 s: after the first, the command waits; interrupt it there. The
    # command gets Ctrl-C's default handling whatever this process was started with: a suite
    # started in the background (`cmd &`) runs with SIGINT ignored, which its children
    # inherit, so the command never saw the signal (it finished, or ran past the timeout).
    proc = subprocess.Popen(
        [TICKWHEEL, "dlq", "replay", "--rate", "0.05/s", "--tenant", scene.tenant],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 30
        while sum(r["status"] == "retrying" for r in scene.rows().values()) < 1:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:  # a failure above leaves no process and no open pipe behind
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    assert err.strip().splitlines() == [
        "tickwheel: replay interrupted; `tickwheel dlq audit` has what it did"
    ]
    assert [scene.rows()[k]["status"] for k in keys] == ["retrying", "dead", "dead"]
    audit = scene.json("dlq", "audit")["items"]
    [entry] = [e for e in audit if e["filters"]["tenant"] == scene.tenant]
    assert (entry["outcome"], entry["selected"], entry["replayed"]) == ("interrupted", 1, 1)

    rest = scene.json("dlq", "replay", "--tenant", scene.tenant)
    assert [r["outcome"] for r in rest["runs"]] == ["skipped", "replayed", "replayed"]
