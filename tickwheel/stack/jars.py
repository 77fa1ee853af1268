"""The Kafka and ZooKeeper jars, resolved from Maven Central by the poms in `maven/`.

Two Maven modules, so Kafka's log4j2 and ZooKeeper's SLF4J binding never share a classpath.
The jars are resolved once per pom version: `jars/.pom-digest` records which.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from tickwheel.stack.errors import INSTALL_HINTS, StackError
from tickwheel.stack.procs import tail


def find_mvn() -> str:
    mvn = shutil.which("mvn")
    if not mvn:
        raise StackError("`mvn` not found on PATH; " + INSTALL_HINTS["mvn"])
    return mvn


def pom_dir() -> Path:
    return Path(str(resources.files("tickwheel") / "stack" / "maven"))


def pom_digest() -> str:
    digest = hashlib.sha256()
    for pom in sorted(pom_dir().rglob("pom.xml")):
        digest.update(pom.read_bytes())
    return digest.hexdigest()


class Jars:
    """`<root>/jars/{kafka,zookeeper}/`: each JVM's classpath directory."""

    def __init__(self, root: Path, echo: Callable[[str], None]) -> None:
        self.dir = root / "jars"
        self.logs = root / "logs"
        self.echo = echo

    def classpath(self, module: str) -> str:
        return str(self.dir / module / "*")

    def current(self) -> bool:
        stamp = self.dir / ".pom-digest"
        return stamp.is_file() and stamp.read_text() == pom_digest()

    def ensure(self) -> None:
        """Resolve the Kafka and ZooKeeper jars once per pom version (`mvn dependency:copy-…`)."""
        if self.current():
            return
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.echo("resolving Kafka and ZooKeeper jars from Maven Central …")
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / "mvn.log", "wb") as log:
            proc = subprocess.run(
                [
                    find_mvn(),
                    "-B",
                    "-q",
                    "-f",
                    str(pom_dir() / "pom.xml"),
                    "package",
                    f"-Ddevstack.jars={self.dir}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if proc.returncode != 0:
            raise StackError(
                f"mvn could not resolve the jars (see {self.logs / 'mvn.log'}): "
                + tail(self.logs / "mvn.log", 3)
            )
        (self.dir / ".pom-digest").write_text(pom_digest())
