"""Postgres for the local stack: a private cluster (`initdb`, `pg_ctl`) on a loopback port, or
(for the chaos harness's replicated stack, `replicated.py`) one of two: a primary and a
streaming standby made from it with `pg_basebackup`, promoted with `pg_ctl promote`.

Postgres refuses to run as root, so as root the cluster runs as an unprivileged OS user
(`postgres`, or a created `tickwheel`). If that user cannot reach the checkout (a 0700 home),
the cluster lives in `/var/tmp/tickwheel-pg-<random>` instead, recorded in `<root>/pg.location`.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from tickwheel.config import Settings
from tickwheel.stack.errors import INSTALL_HINTS, StackError
from tickwheel.stack.procs import (
    HEALTH_PROBE_TIMEOUT_S,
    STOP_TIMEOUT_S,
    pid_alive,
    read_pid,
    reason,
    tail,
)

PG_START_TIMEOUT_S = 60
DEV_DB = "tickwheel"
DEV_DB_USER = "tickwheel"
UNPRIVILEGED_USERS = ("postgres", "tickwheel")  # tried in order when we run as root


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


class Postgres:
    """One Postgres cluster of the stack: `<home>/data` (`<home>/data-<name>` for a named
    node of the replicated stack), its log linked as `<root>/logs/<name>.log`."""

    def __init__(
        self, settings: Settings, root: Path, name: str = "postgres", port: int | None = None
    ) -> None:
        self.name = name
        self.port = settings.dev_pg_port if port is None else port
        self.root = root
        self.logs = root / "logs"

    def pid(self) -> int | None:
        return read_pid(self.data() / "postmaster.pid")

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

    def home(self) -> Path:
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

    def data(self) -> Path:
        return self.home() / ("data" if self.name == "postgres" else f"data-{self.name}")

    def start(self) -> None:
        home, data = self.home(), self.data()
        if self.running():
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
        log = home / f"{self.name}.log"
        self.logs.mkdir(parents=True, exist_ok=True)
        link = self.logs / f"{self.name}.log"
        if not link.is_symlink():
            link.unlink(missing_ok=True)
            link.symlink_to(log)
        # TCP on loopback only, no Unix socket (its path length and directory ownership are a
        # portability trap); sizes fit a 2-core laptop shared with two JVMs.
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 "
            "-c unix_socket_directories='' -c max_connections=300 "
            "-c shared_buffers=256MB -c max_wal_size=2GB -c timezone=UTC "
            # Loaded so that `CREATE EXTENSION pg_stat_statements` can profile a benchmark's
            # statements (docs/BENCHMARKS.md); its bookkeeping is a hash update per statement.
            "-c shared_preload_libraries=pg_stat_statements"
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
            raise StackError(f"Postgres did not start (port {self.port} busy?): " + tail(log, 3))
        if not (data / "standby.signal").is_file():
            self._ensure_dev_database()

    def _ensure_dev_database(self) -> None:
        import asyncpg

        async def create() -> None:
            conn = await asyncpg.connect(
                f"postgresql://{DEV_DB_USER}@127.0.0.1:{self.port}/postgres"
            )
            try:
                exists = await conn.fetchval("select 1 from pg_database where datname = $1", DEV_DB)
                if not exists:
                    await conn.execute(f'CREATE DATABASE "{DEV_DB}"')
            finally:
                await conn.close()

        asyncio.run(create())

    def running(self) -> bool:
        data = self.data()
        pid = read_pid(data / "postmaster.pid")
        return pid is not None and pid_alive(pid)

    def stop(self) -> bool:
        if not self.running():
            return False
        self._as_pg_user(
            [
                find_pg_bin("pg_ctl"),
                "-D",
                str(self.data()),
                "-m",
                "fast",
                "-w",
                "-t",
                str(STOP_TIMEOUT_S),
                "stop",
            ]
        )
        return True

    # --- the replicated stack's primary and standby ---------------------------------------

    def base_backup_from(self, primary_port: int) -> None:
        """Make this (stopped) node a streaming standby of the primary on `primary_port`: a
        fresh `pg_basebackup -R` of it. A standby never carries `synchronous_standby_names`
        (the primary's is copied with its configuration): promoted, it would wait for a
        standby of its own before any commit returned."""
        data = self.data()
        shutil.rmtree(data, ignore_errors=True)
        home = self.home()
        home.mkdir(parents=True, exist_ok=True)
        user = self._pg_user()
        if user is not None:
            os.chown(home, user.pw_uid, user.pw_gid)
        out = self._as_pg_user(
            [
                find_pg_bin("pg_basebackup"),
                "-D",
                str(data),
                "-h",
                "127.0.0.1",
                "-p",
                str(primary_port),
                "-U",
                DEV_DB_USER,
                "-X",
                "stream",
                "-R",
                "--checkpoint=fast",
                "--no-sync",
            ]
        )
        if out.returncode != 0:
            raise StackError(
                "pg_basebackup failed: " + (out.stderr.strip().splitlines() or ["?"])[-1]
            )
        auto = data / "postgresql.auto.conf"
        kept = [
            line
            for line in auto.read_text().splitlines()
            if not line.startswith("synchronous_standby_names")
        ]
        auto.write_text("\n".join(kept) + "\n")

    def promote(self) -> None:
        """`pg_ctl promote`: this standby becomes a primary (waits until it accepts writes)."""
        out = self._as_pg_user(
            [find_pg_bin("pg_ctl"), "-D", str(self.data()), "-w", "-t", "60", "promote"]
        )
        if out.returncode != 0:
            raise StackError("pg_ctl promote failed: " + (out.stderr or out.stdout).strip())

    def kill(self) -> list[int]:
        """kill -9 of the postmaster and every process it started, as a crash of its machine
        would end them (no shutdown checkpoint, no goodbye to any client); returns the pids."""
        pm = self.pid()
        if pm is None or not pid_alive(pm):
            return []
        victims = [pm, *_children(pm)]
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return victims


def _children(pid: int) -> list[int]:
    """The pids whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


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
        return reason(exc)
    return None
