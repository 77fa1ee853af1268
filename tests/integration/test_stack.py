"""The stack is real: Apache Kafka and ZooKeeper JVMs from the Maven jars, Postgres, all healthy."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from kazoo.client import KazooClient

from tickwheel.kafka.clients import consumer, producer
from tickwheel.stack import Addresses, DevStack
from tickwheel.stack.procs import cmdline, read_pid
from tickwheel.topics import Topics

pytestmark = pytest.mark.integration

TICKWHEEL = str(Path(sys.executable).parent / "tickwheel")


def test_status_reports_three_healthy_services(stack: Addresses) -> None:
    """`tickwheel dev status` exits 0 listing postgres, zookeeper and kafka as healthy"""
    out = subprocess.run(
        [TICKWHEEL, "dev", "status"], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {line.split()[0]: line.split()[1] for line in out.stdout.splitlines()}
    assert rows == {"postgres": "healthy", "zookeeper": "healthy", "kafka": "healthy"}


def test_jvms_are_apache_kafka_and_zookeeper_from_maven_jars(stack: Addresses) -> None:
    """the managed JVMs run kafka.Kafka and ZooKeeperServerMain off the resolved jars"""
    from tickwheel.config import load_settings

    dev = DevStack(load_settings(), echo=lambda _l: None)
    if not (dev.manages("kafka") and dev.manages("zookeeper")):
        # Given by the environment: `dev` must start none of them and say where they come from.
        given = [st for st in dev.status(round_trip=False) if not dev.manages(st.name)]
        assert given and all(st.detail == "given by the environment" for st in given), given
        return
    kafka_cmd = cmdline(read_pid(dev.run / "kafka.pid") or -1)
    zk_cmd = cmdline(read_pid(dev.run / "zookeeper.pid") or -1)
    assert " kafka.Kafka " in kafka_cmd and "jars/kafka/*" in kafka_cmd
    assert "org.apache.zookeeper.server.ZooKeeperServerMain" in zk_cmd
    jars = {p.name for p in (dev.root / "jars" / "kafka").iterdir()}
    assert any(j.startswith("kafka_2.13-4.") for j in jars)
    assert any(
        p.name.startswith("zookeeper-3.9.") for p in (dev.root / "jars" / "zookeeper").iterdir()
    )


@pytest.mark.foreign_messages("runs.high")  # a bare token, no envelope
def test_high_priority_run_topic_round_trip(stack: Addresses, topics: Topics) -> None:
    """a message produced with confluent-kafka to runs.high is consumed back with its headers"""
    token = uuid.uuid4().hex.encode()
    prod = producer(stack.kafka)
    prod.produce(
        topics.runs("high"),
        key=b"job-1",
        value=token,
        partition=1,
        headers=[("run_key", b"acme/job-1@1")],
    )
    assert prod.flush(30) == 0
    cons = consumer(stack.kafka, f"g-{uuid.uuid4()}", **{"enable.auto.commit": False})
    try:
        cons.assign([TopicPartition(topics.runs("high"), 1, 0)])
        got = None
        for _ in range(60):
            msg = cons.poll(0.5)
            if msg is not None and not msg.error():
                got = msg
                break
        assert got is not None, "nothing consumed within 30 s"
        assert got.value() == token and got.key() == b"job-1"
        assert dict(got.headers() or []) == {"run_key": b"acme/job-1@1"}
    finally:
        cons.close()


def test_zookeeper_session_and_ephemeral_node(stack: Addresses) -> None:
    """a kazoo session can create and read an ephemeral node (what leader election needs)"""
    client = KazooClient(hosts=stack.zk, timeout=10)
    client.start(timeout=15)
    try:
        path = f"/tickwheel-test/{uuid.uuid4().hex}"
        client.create(path, b"me", ephemeral=True, makepath=True)
        assert client.get(path)[0] == b"me"
    finally:
        client.stop()
        client.close()


def test_env_prints_evalable_exports(stack: Addresses) -> None:
    """`tickwheel dev env` prints three `export TICKWHEEL_…=` lines a shell can eval"""
    out = subprocess.run(
        [
            "bash",
            "-c",
            f'eval "$({TICKWHEEL} dev env)"; echo "$TICKWHEEL_DSN|$TICKWHEEL_KAFKA|$TICKWHEEL_ZK"',
        ],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items()},
    )
    dsn, kafka, zk = out.stdout.strip().split("|")
    assert dsn.startswith("postgresql://") and ":" in kafka and ":" in zk
