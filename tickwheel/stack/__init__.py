"""The local stack of `tickwheel dev`: real Postgres, Apache Kafka (KRaft) and ZooKeeper, no Docker.

Development tooling, outside the scheduler's core: one module per service (`postgres`,
`zookeeper`, `kafka`, and `jvm`/`jars` for the two JVMs), the orchestration in `stack`
(`DevStack`: up, down, status, env), the `tickwheel dev` commands in `cli`, and the same
services through testcontainers for Docker users in `containers`.

Everything lives under the settings' `devstack_dir` (default `.devstack/`):

    jars/{kafka,zookeeper}/   resolved from Maven Central by the poms in maven/ (jars.py)
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

from tickwheel.stack.addresses import Addresses
from tickwheel.stack.errors import StackError
from tickwheel.stack.stack import DevStack, ServiceStatus

__all__ = ["Addresses", "DevStack", "ServiceStatus", "StackError"]
