"""The local stack of `tickwheel dev`: real Postgres, Apache Kafka (KRaft) and ZooKeeper, no Docker.

Everything lives under the settings' `devstack_dir` (default `.devstack/`):

    jars/{kafka,zookeeper}/   resolved from Maven Central by the poms in tickwheel/stack/
    pg/data                   a private Postgres cluster (initdb), run as an unprivileged user
    kafka/, zookeeper/        generated configs and data directories
    logs/                     one log per service
    run/                      PID files of the JVMs we started (Postgres keeps postmaster.pid)

A service whose address is given by the environment (`TICKWHEEL_DSN`, `TICKWHEEL_KAFKA`,
`TICKWHEEL_ZK`) is never started or stopped here, only health-checked: that is how a real
deployment, or a CI with its own services, runs.

Service lifecycle, per service: absent → starting → healthy; `up` on a healthy service is a
no-op, `up` after a crash (stale PID file) starts it again, `down` stops exactly the PIDs that
`up` recorded, and only if their command line still names our config (PIDs get reused).
"""

from __future__ import annotations

import asyncio
import base64
import glob
import hashlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tickwheel.config import Settings, redact_dsn
from tickwheel.topics import Topics

JAVA_MIN_MAJOR = 17
PG_START_TIMEOUT_S = 60
KAFKA_START_TIMEOUT_S = 120
ZK_START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
HEALTH_PROBE_TIMEOUT_S = 5.0
DEV_DB = "tickwheel"
DEV_DB_USER = "tickwheel"
UNPRIVILEGED_USERS = ("postgres", "tickwheel")  # tried in order when we run as root

INSTALL_HINTS = {
    "java": "install Java 17+ (Debian/Ubuntu: apt-get install openjdk-17-jre-headless)",
    "mvn": "install Apache Maven (Debian/Ubuntu: apt-get install maven)",
    "postgres": "install the Postgres 15+ server binaries "
    "(Debian/Ubuntu: apt-get install postgresql), or set TICKWHEEL_DSN",
}


class StackError(RuntimeError):
    """A one-line, user-facing reason why the stack cannot come up."""


@dataclass(frozen=True)
class Addresses:
    """Where the three services of a running stack answer."""

    dsn: str
    kafka: str
    zk: str


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    address: str
    healthy: bool
    managed: bool  # started by `tickwheel dev` (False: given by the environment)
    detail: str


def _pom_dir() -> Path:
    return Path(str(resources.files("tickwheel") / "stack"))


# --- finding tools -------------------------------------------------------------------------


def find_pg_bin(tool: str) -> str:
    """Path of a Postgres server binary: PATH first, then Debian's /usr/lib/postgresql/*/bin."""
    found = shutil.which(tool)
    if found:
        return found
    candidates = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"),
        key=lambda p: int(re.findall(r"/postgresql/(\d+)/", p)[0]),
    )
    if candidates:
        return candidates[-1]
    raise StackError(
        f"`{tool}` not found on PATH or in /usr/lib/postgresql/*/bin; " + INSTALL_HINTS["postgres"]
    )


def find_java() -> str:
    java = shutil.which("java")
    if not java:
        raise StackError("`java` not found on PATH; " + INSTALL_HINTS["java"])
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):  # "1.8" style
        major = int(match.group(2))
    if major < JAVA_MIN_MAJOR:
        raise StackError(
            f"`java` is version {major or 'unknown'}, Kafka 4 needs 17+; " + INSTALL_HINTS["java"]
        )
    return java


def find_mvn() -> str:
    mvn = shutil.which("mvn")
    if not mvn:
        raise StackError("`mvn` not found on PATH; " + INSTALL_HINTS["mvn"])
    return mvn


# --- process bookkeeping -------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is not running.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _wait_until(check: Callable[[], bool], timeout_s: float, interval_s: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval_s)
    return check()


def _stop_pid(pid: int, marker: str) -> bool:
    """SIGTERM then SIGKILL `pid`, but only if it is still the process we started."""
    if not _pid_alive(pid) or marker not in _cmdline(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    if not _wait_until(lambda: not _pid_alive(pid), STOP_TIMEOUT_S):
        os.kill(pid, signal.SIGKILL)
        _wait_until(lambda: not _pid_alive(pid), 5)
    return True


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text[-lines:])


# --- health probes (shared with `status`) ----------------------------------------------------


def probe_postgres(dsn: str) -> str | None:
    """None when `select 1` answers, else the reason."""
    import asyncpg

    async def check() -> None:
        conn = await asyncpg.connect(dsn, timeout=HEALTH_PROBE_TIMEOUT_S)
        try:
            await conn.fetchval("select 1")
        finally:
            await conn.close()

    try:
        asyncio.run(check())
    except Exception as exc:  # any failure is "unhealthy", reported not raised
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


def probe_zookeeper(hosts: str) -> str | None:
    """None when a ZooKeeper session can be established."""
    import logging

    from kazoo.client import KazooClient

    # kazoo logs every refused connection attempt; a probe reports one reason instead.
    quiet = logging.getLogger("tickwheel.devstack.kazoo")
    quiet.propagate = False
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    client = KazooClient(
        hosts=hosts,
        timeout=HEALTH_PROBE_TIMEOUT_S,
        logger=quiet,
        connection_retry={"max_tries": 1},
        command_retry={"max_tries": 1},
    )
    try:
        client.start(timeout=HEALTH_PROBE_TIMEOUT_S)
        client.get_children("/")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    finally:
        client.stop()
        client.close()
    return None


def probe_kafka(bootstrap: str, round_trip_topic: str | None = None) -> str | None:
    """None when metadata answers (and, given a topic, a produced message is consumed back)."""
    from tickwheel.kafka import admin_client, round_trip

    try:
        md = admin_client(bootstrap, quiet=True).list_topics(timeout=HEALTH_PROBE_TIMEOUT_S)
        if not md.brokers:
            return "metadata lists no broker"
        if round_trip_topic is not None:
            round_trip(bootstrap, round_trip_topic, timeout_s=30)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


# --- the stack -----------------------------------------------------------------------------


class DevStack:
    """Start, check and stop the three local services for one settings object."""

    def __init__(self, settings: Settings, echo: Callable[[str], None] = print) -> None:
        self.s = settings
        self.echo = echo
        self.root = settings.devstack_dir.resolve()
        self.logs = self.root / "logs"
        self.run = self.root / "run"
        self.topics = Topics(settings.topic_prefix)

    # addresses ------------------------------------------------------------------------------

    @property
    def health_topic(self) -> str:
        return self.topics.health

    def manages(self, service: str) -> bool:
        given = {"postgres": self.s.dsn, "kafka": self.s.kafka, "zookeeper": self.s.zk}[service]
        return given is None

    def addresses(self) -> Addresses:
        return Addresses(self.s.effective_dsn, self.s.effective_kafka, self.s.effective_zk)

    def env_lines(self) -> list[str]:
        return [
            f"export TICKWHEEL_DSN={self.s.effective_dsn}",
            f"export TICKWHEEL_KAFKA={self.s.effective_kafka}",
            f"export TICKWHEEL_ZK={self.s.effective_zk}",
        ]

    # preflight ------------------------------------------------------------------------------

    def preflight(self) -> None:
        """Fail fast, with one line, on the first missing prerequisite."""
        if self.manages("kafka") or self.manages("zookeeper"):
            find_java()
            if not self._jars_current():
                find_mvn()
        if self.manages("postgres"):
            find_pg_bin("initdb")
            find_pg_bin("pg_ctl")

    # jars ---------------------------------------------------------------------------------------

    def _pom_digest(self) -> str:
        digest = hashlib.sha256()
        for pom in sorted(_pom_dir().rglob("pom.xml")):
            digest.update(pom.read_bytes())
        return digest.hexdigest()

    def _jars_current(self) -> bool:
        stamp = self.root / "jars" / ".pom-digest"
        return stamp.is_file() and stamp.read_text() == self._pom_digest()

    def ensure_jars(self) -> None:
        """Resolve the Kafka and ZooKeeper jars once per pom version (`mvn dependency:copy-…`)."""
        if self._jars_current():
            return
        jars = self.root / "jars"
        shutil.rmtree(jars, ignore_errors=True)
        jars.mkdir(parents=True)
        self.echo("resolving Kafka and ZooKeeper jars from Maven Central …")
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / "mvn.log", "wb") as log:
            proc = subprocess.run(
                [
                    find_mvn(),
                    "-B",
                    "-q",
                    "-f",
                    str(_pom_dir() / "pom.xml"),
                    "package",
                    f"-Ddevstack.jars={jars}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if proc.returncode != 0:
            raise StackError(
                f"mvn could not resolve the jars (see {self.logs / 'mvn.log'}): "
                + _tail(self.logs / "mvn.log", 3)
            )
        (jars / ".pom-digest").write_text(self._pom_digest())

    # postgres -------------------------------------------------------------------------------

    def _pg_user(self) -> pwd.struct_passwd | None:
        """The OS user Postgres runs as: ourselves, or an unprivileged one when we are root."""
        if os.geteuid() != 0:
            return None
        for name in UNPRIVILEGED_USERS:
            try:
                return pwd.getpwnam(name)
            except KeyError:
                continue
        argv = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
        try:
            subprocess.run([*argv, "tickwheel"], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise StackError(
                "Postgres refuses to run as root and there is no `postgres` user; creating "
                f"the user `tickwheel` failed ({exc}); create an unprivileged `postgres` user"
            ) from None
        return pwd.getpwnam("tickwheel")

    def _pg_home(self) -> Path:
        """Where the cluster lives. Under the devstack dir, unless the unprivileged user cannot
        reach it (a checkout below a 0700 home): then a private directory under /var/tmp."""
        home = self.root / "pg"
        pointer = self.root / "pg.location"
        if pointer.is_file():
            return Path(pointer.read_text().strip())
        user = self._pg_user()
        if user is not None and not self._user_can_reach(user, self.root):
            # A fresh, root-created directory with an unguessable name: /var/tmp is
            # world-writable, and a predictable name could be planted as a symlink.
            home = Path(tempfile.mkdtemp(prefix="tickwheel-pg-", dir="/var/tmp"))
        self.root.mkdir(parents=True, exist_ok=True)
        pointer.write_text(str(home))
        return home

    @staticmethod
    def _user_can_reach(user: pwd.struct_passwd, path: Path) -> bool:
        probe = subprocess.run(
            ["test", "-x", str(path)],
            user=user.pw_uid,
            group=user.pw_gid,
            extra_groups=[],
            check=False,
        )
        return probe.returncode == 0

    def _as_pg_user(self, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        user = self._pg_user()
        extra: dict[str, object] = {}
        if user is not None:
            extra = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        done: subprocess.CompletedProcess[str] = subprocess.run(
            argv, capture_output=True, text=True, check=False, **extra, **kwargs
        )  # type: ignore[call-overload]
        return done

    def _pg_data(self) -> Path:
        return self._pg_home() / "data"

    def start_postgres(self) -> None:
        home, data = self._pg_home(), self._pg_data()
        if self._pg_running():
            return
        home.mkdir(parents=True, exist_ok=True)
        user = self._pg_user()
        if user is not None:
            os.chown(home, user.pw_uid, user.pw_gid)
        if not (data / "PG_VERSION").is_file():
            shutil.rmtree(data, ignore_errors=True)
            out = self._as_pg_user(
                [
                    find_pg_bin("initdb"),
                    "-D",
                    str(data),
                    "-U",
                    DEV_DB_USER,
                    "-A",
                    "trust",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                    "--no-sync",
                ]
            )
            if out.returncode != 0:
                raise StackError("initdb failed: " + (out.stderr.strip().splitlines() or ["?"])[-1])
        log = home / "postgres.log"
        self.logs.mkdir(parents=True, exist_ok=True)
        link = self.logs / "postgres.log"
        if not link.is_symlink():
            link.unlink(missing_ok=True)
            link.symlink_to(log)
        # TCP on loopback only, no Unix socket (its path length and directory ownership are a
        # portability trap); sizes fit a 2-core laptop shared with two JVMs.
        options = (
            f"-p {self.s.dev_pg_port} -c listen_addresses=127.0.0.1 "
            "-c unix_socket_directories='' -c max_connections=300 "
            "-c shared_buffers=256MB -c max_wal_size=2GB -c timezone=UTC"
        )
        out = self._as_pg_user(
            [
                find_pg_bin("pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(log),
                "-w",
                "-t",
                str(PG_START_TIMEOUT_S),
                "-o",
                options,
                "start",
            ]
        )
        if out.returncode != 0:
            raise StackError(
                f"Postgres did not start (port {self.s.dev_pg_port} busy?): " + _tail(log, 3)
            )
        self._ensure_dev_database()

    def _ensure_dev_database(self) -> None:
        import asyncpg

        async def create() -> None:
            conn = await asyncpg.connect(
                f"postgresql://{DEV_DB_USER}@127.0.0.1:{self.s.dev_pg_port}/postgres"
            )
            try:
                exists = await conn.fetchval("select 1 from pg_database where datname = $1", DEV_DB)
                if not exists:
                    await conn.execute(f'CREATE DATABASE "{DEV_DB}"')
            finally:
                await conn.close()

        asyncio.run(create())

    def _pg_running(self) -> bool:
        data = self._pg_data()
        pid = _read_pid(data / "postmaster.pid")
        return pid is not None and _pid_alive(pid)

    def stop_postgres(self) -> bool:
        if not self._pg_running():
            return False
        self._as_pg_user(
            [
                find_pg_bin("pg_ctl"),
                "-D",
                str(self._pg_data()),
                "-m",
                "fast",
                "-w",
                "-t",
                str(STOP_TIMEOUT_S),
                "stop",
            ]
        )
        return True

    # JVM services -----------------------------------------------------------------------------

    def _jvm_pid(self, name: str) -> int | None:
        pid = _read_pid(self.run / f"{name}.pid")
        if pid is not None and _pid_alive(pid) and str(self.root) in _cmdline(pid):
            return pid
        return None

    def _spawn_jvm(
        self,
        name: str,
        classpath_dir: str,
        main_class: str,
        args: list[str],
        heap: str,
        extra_props: list[str],
    ) -> None:
        self.run.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        cmd = [
            find_java(),
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            *extra_props,
            "-cp",
            str(self.root / "jars" / classpath_dir / "*"),
            main_class,
            *args,
        ]
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        (self.run / f"{name}.pid").write_text(f"{proc.pid}\n")

    def start_zookeeper(self) -> None:
        if self._jvm_pid("zookeeper") is not None:
            return
        home = self.root / "zookeeper"
        (home / "data").mkdir(parents=True, exist_ok=True)
        cfg = home / "zoo.cfg"
        cfg.write_text(
            "tickTime=2000\n"
            f"dataDir={home / 'data'}\n"
            f"clientPort={self.s.dev_zk_port}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat\n"
            "autopurge.purgeInterval=1\n"
        )
        self._spawn_jvm(
            "zookeeper",
            "zookeeper",
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            [str(cfg)],
            "256m",
            ["-Dzookeeper.jmx.log4j.disable=true"],
        )

    def _kafka_config(self) -> Path:
        home = self.root / "kafka"
        data = home / "data"
        data.mkdir(parents=True, exist_ok=True)
        port, cport = self.s.dev_kafka_port, self.s.dev_kafka_controller_port
        props = home / "server.properties"
        props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{cport}",
                    f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                    f"log.dirs={data}",
                    "num.partitions=1",
                    # Single node: every internal topic has one replica. Fewer internal partitions
                    # than the defaults (50) make a cold start and group joins much quicker.
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=8",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "transaction.state.log.num.partitions=4",
                    "share.coordinator.state.topic.replication.factor=1",
                    "share.coordinator.state.topic.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "auto.create.topics.enable=false",
                    "delete.topic.enable=true",
                    "log.retention.hours=24",
                    "log.segment.bytes=67108864",
                    "",
                ]
            )
        )
        log4j = home / "log4j2.properties"
        log4j.write_text(
            "\n".join(
                [
                    "status = warn",
                    "appender.out.type = Console",
                    "appender.out.name = OUT",
                    "appender.out.layout.type = PatternLayout",
                    "appender.out.layout.pattern = [%d] %p %m (%c)%n",
                    "rootLogger.level = INFO",
                    "rootLogger.appenderRef.out.ref = OUT",
                    "logger.state.name = state.change.logger",
                    "logger.state.level = WARN",
                    "logger.log.name = kafka.log",
                    "logger.log.level = WARN",
                    "logger.storage.name = org.apache.kafka.storage",
                    "logger.storage.level = WARN",
                    "",
                ]
            )
        )
        if not (data / "meta.properties").is_file():
            # A KRaft log directory must be formatted once with a cluster id (22 chars of
            # URL-safe base64, like `kafka-storage random-uuid`).
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            out = subprocess.run(
                [
                    find_java(),
                    "-Xmx256m",
                    f"-Dlog4j2.configurationFile={log4j}",
                    "-cp",
                    str(self.root / "jars" / "kafka" / "*"),
                    "kafka.tools.StorageTool",
                    "format",
                    "--cluster-id",
                    cluster_id,
                    "--config",
                    str(props),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if out.returncode != 0:
                raise StackError(
                    "formatting the Kafka log directory failed: "
                    + (out.stderr or out.stdout).strip().splitlines()[-1]
                )
        return props

    def start_kafka(self) -> None:
        if self._jvm_pid("kafka") is not None:
            return
        props = self._kafka_config()
        log4j = props.parent / "log4j2.properties"
        self._spawn_jvm(
            "kafka",
            "kafka",
            "kafka.Kafka",
            [str(props)],
            "1g",
            [f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={self.logs}"],
        )

    # the verbs --------------------------------------------------------------------------------

    def up(self) -> list[ServiceStatus]:
        """Start what is not running, wait for health, create the topics. Idempotent."""
        self.preflight()
        started = time.monotonic()
        if self.manages("kafka") or self.manages("zookeeper"):
            self.ensure_jars()
        # JVMs first: they boot while pg_ctl waits for Postgres.
        if self.manages("zookeeper"):
            self.start_zookeeper()
        if self.manages("kafka"):
            self.start_kafka()
        if self.manages("postgres"):
            self.start_postgres()
        self._await_health(
            "zookeeper", lambda: probe_zookeeper(self.s.effective_zk), ZK_START_TIMEOUT_S
        )
        self._await_health(
            "kafka", lambda: probe_kafka(self.s.effective_kafka), KAFKA_START_TIMEOUT_S
        )
        self._await_health(
            "postgres", lambda: probe_postgres(self.s.effective_dsn), PG_START_TIMEOUT_S
        )
        from tickwheel.kafka import create_topics

        create_topics(
            self.s.effective_kafka,
            [*self.topics.all(), self.health_topic],
            partitions=self.s.topic_partitions,
            replication=self.s.topic_replication,
        )
        statuses = self.status(round_trip=True)
        self.echo(f"stack up in {time.monotonic() - started:.1f}s")
        return statuses

    def _await_health(self, name: str, probe: Callable[[], str | None], timeout_s: float) -> None:
        last: list[str | None] = [None]

        def ok() -> bool:
            if name != "postgres" and self.manages(name) and self._jvm_pid(name) is None:
                raise StackError(
                    f"{name} exited during start-up: " + _tail(self.logs / f"{name}.log", 3)
                )
            last[0] = probe()
            return last[0] is None

        if not _wait_until(ok, timeout_s, interval_s=0.5):
            raise StackError(
                f"{name} not healthy after {timeout_s}s: {last[0]} "
                f"(log: {self.logs / (name + '.log')})"
            )

    def status(self, round_trip: bool = True) -> list[ServiceStatus]:
        checks: list[tuple[str, str, Callable[[], str | None]]] = [
            (
                "postgres",
                redact_dsn(self.s.effective_dsn),
                lambda: probe_postgres(self.s.effective_dsn),
            ),
            ("zookeeper", self.s.effective_zk, lambda: probe_zookeeper(self.s.effective_zk)),
            (
                "kafka",
                self.s.effective_kafka,
                lambda: probe_kafka(
                    self.s.effective_kafka, self.health_topic if round_trip else None
                ),
            ),
        ]
        result: list[ServiceStatus] = []
        for name, address, probe in checks:
            problem = probe()
            result.append(
                ServiceStatus(
                    name,
                    address,
                    problem is None,
                    self.manages(name),
                    problem or self._describe(name),
                )
            )
        return result

    def _describe(self, name: str) -> str:
        if not self.manages(name):
            return "given by the environment"
        if name == "postgres":
            return f"pid {_read_pid(self._pg_data() / 'postmaster.pid')}"
        return f"pid {self._jvm_pid(name)}"

    def down(self) -> list[str]:
        """Stop exactly what `up` started; services given by the environment are left alone."""
        stopped = []
        for name in ("kafka", "zookeeper"):
            pid = _read_pid(self.run / f"{name}.pid")
            if self.manages(name) and pid is not None:
                if _stop_pid(pid, str(self.root)):
                    stopped.append(name)
                (self.run / f"{name}.pid").unlink(missing_ok=True)
        if (
            self.manages("postgres")
            and (self.root / "pg.location").is_file()
            and self.stop_postgres()
        ):
            stopped.append("postgres")
        return stopped
