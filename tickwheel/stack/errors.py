"""What stops the local stack, said in one line a user can act on."""

from __future__ import annotations

INSTALL_HINTS = {
    "java": "install Java 17+ (Debian/Ubuntu: apt-get install openjdk-17-jre-headless)",
    "mvn": "install Apache Maven (Debian/Ubuntu: apt-get install maven)",
    "postgres": "install the Postgres 15+ server binaries "
    "(Debian/Ubuntu: apt-get install postgresql), or set TICKWHEEL_DSN",
}


class StackError(RuntimeError):
    """A one-line, user-facing reason why the stack cannot come up."""
