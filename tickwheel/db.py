"""Postgres access: connection pools, migrations, the deployment a database belongs to,
partition upkeep, constraint → domain errors.

Migrations are `tickwheel/sql/migrations/NNNN_name.sql`, applied in number order inside one
transaction under an advisory lock and recorded in `schema_migrations`; applying them again
changes nothing. The same transaction records the deployment (topic prefix) the migration ran
under, or refuses a database that belongs to another (tickwheel/deployment.py).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeAlias

import asyncpg

# asyncpg's client-side input error (its public `DataError` is the server's SQLSTATE 22000).
from asyncpg.exceptions._base import DataError as ClientDataError
from asyncpg.pool import PoolConnectionProxy

from tickwheel.deployment import WrongDeployment, ownership_problem
from tickwheel.domain import PRIORITIES
from tickwheel.queries import QUERIES
from tickwheel.run_seal import RunSeal

# A connection of its own or one lent by a pool (`async with pool.acquire() as conn`).
Conn: TypeAlias = "asyncpg.Connection | PoolConnectionProxy[Any]"

_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
PARTITION_DAYS_AHEAD = 7  # days of job_runs partitions kept ready beyond today


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    found = []
    folder = resources.files("tickwheel") / "sql" / "migrations"
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations share a number: {versions}")
    return found


# Planner settings of the sessions whose every statement finds run rows by their key (the
# workers' claims, heartbeats and results): parameters stay parameters (one generic plan per
# statement and connection, planned once, never folded into literals that let a partial
# index's predicate in), and no plan but primary-key probes is left. Otherwise the planner
# answers a batch of 64 keys by scanning every run in flight of the day's partition whenever
# that partition was analysed while it was small — the normal state when a burst starts, and
# every day after midnight — and plans each execution anew over every partition (1.5-2.7 ms
# a statement, measured): O(runs in flight) per statement instead of O(batch).
KEYED_LOOKUPS: dict[str, str] = {
    "plan_cache_mode": "force_generic_plan",
    "enable_seqscan": "off",
    "enable_bitmapscan": "off",
    "enable_hashjoin": "off",
    "enable_mergejoin": "off",
    "enable_material": "off",
    # With the other plans switched off, a plain scan (the few capped tenants, a target host's
    # row) is costed at 10^10 and crosses every JIT threshold: each call compiled its plan
    # with LLVM, ~20 ms even when idle (D-169). None of these statements gains from JIT.
    "jit": "off",
}


async def connect(dsn: str, timeout: float = 60.0) -> asyncpg.Connection:
    return await asyncpg.connect(dsn, timeout=timeout)


# --- batch parameters --------------------------------------------------------------------------
#
# Hot statements take a batch of runs as parallel arrays. asyncpg encodes an array parameter
# element by element in Python (1.5 µs per element pair of a text[] and a bigint[], measured
# against 0.34 µs for the same values joined), so the arrays of identifiers and numbers travel as
# one text each, split by the statement: `string_to_array($n, ',')` for identifiers (tenant
# names, job ids and statuses hold no comma: their forms exclude it) and
# `string_to_array($n, ',', 'n')::bigint[]` for numbers, 'n' standing for NULL. Free text (an
# error) stays a real text[] parameter.


def id_list(values: Iterable[str]) -> str:
    """Identifiers as one parameter for `string_to_array($n, ',')`."""
    return ",".join(values)


def num_list(values: Sequence[int | None]) -> str:
    """Integers (None: NULL) as one parameter for `string_to_array($n, ',', 'n')::bigint[]`."""
    if None in values:
        return ",".join(["n" if v is None else str(v) for v in values])
    return ",".join(map(str, values))


def flag_list(values: Iterable[bool]) -> str:
    """Booleans as one parameter for `string_to_array($n, ',')::boolean[]`."""
    return ",".join(["t" if v else "f" for v in values])


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """A pool's release without asyncpg's reset query (see `create_pool`)."""


async def create_pool(
    dsn: str,
    min_size: int = 1,
    max_size: int = 10,
    server_settings: dict[str, str] | None = None,
    *,
    reset_sessions: bool = True,
) -> asyncpg.Pool:
    """A connection pool. `reset_sessions=False` for code that never changes a session's state
    (no SET, LISTEN, advisory lock or cursor outside a transaction): asyncpg otherwise sends
    `SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL` each time a connection
    goes back to the pool — one more round trip per statement on the hot path (an open
    transaction is still rolled back on release either way)."""
    return await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        server_settings=server_settings,
        reset=None if reset_sessions else _keep_session,
    )


async def migrate(conn: asyncpg.Connection, deployment: str | None = None) -> list[Migration]:
    """Apply the migrations not yet recorded; return those applied (empty: already current).

    With `deployment` (a topic prefix), the database is recorded as that deployment's when it
    records none yet; one that belongs to another deployment raises WrongDeployment and
    nothing is applied. Without it, no deployment is recorded (a template for test databases,
    each of which records its own)."""
    applied_now = []
    async with conn.transaction():
        await conn.execute(QUERIES["migrations_lock"])
        await conn.execute(QUERIES["migrations_table"])
        done = {row["version"] for row in await conn.fetch(QUERIES["migrations_applied"])}
        for migration in migrations():
            if migration.version in done:
                continue
            await conn.execute(migration.sql)
            await conn.execute(QUERIES["migration_record"], migration.version, migration.name)
            applied_now.append(migration)
        if deployment is not None:
            recorded = await conn.fetchval(QUERIES["deployment_record"], deployment)
            if (
                problem := ownership_problem(recorded, deployment, "tickwheel db migrate")
            ) is not None:
                raise WrongDeployment(problem)
    return applied_now


async def deployment_of(conn: asyncpg.Pool | asyncpg.Connection) -> str | None:
    """The topic prefix of the deployment the database belongs to; None: none recorded."""
    row = await conn.fetchrow(QUERIES["deployment_read"])
    return None if row is None else str(row["topic_prefix"])


async def check_deployment(conn: asyncpg.Pool | asyncpg.Connection, prefix: str, who: str) -> None:
    """WrongDeployment unless the database belongs to deployment `prefix` (a process's first
    read, before it leads, claims or runs anything). A database not migrated that far raises
    asyncpg's UndefinedTableError: the schema is not current."""
    if (problem := ownership_problem(await deployment_of(conn), prefix, who)) is not None:
        raise WrongDeployment(problem)


async def run_seal(pool: asyncpg.Pool | asyncpg.Connection) -> RunSeal | None:
    """The seal of run envelopes under the deployment's key (tickwheel/run_seal.py, migration
    0013); None when the key's row is missing: then nothing is sealed and every worker claim
    reads the job's row."""
    secret = await pool.fetchval(QUERIES["run_seal_key"])
    return None if secret is None else RunSeal(bytes(secret))


async def ensure_partitions(
    conn: asyncpg.Connection, today: dt.date | None = None, days_ahead: int = PARTITION_DAYS_AHEAD
) -> int:
    """Create the daily job_runs partitions from yesterday to `days_ahead`; return how many."""
    today = today or dt.datetime.now(dt.UTC).date()
    created: int = await conn.fetchval(
        QUERIES["partitions_ensure"], today - dt.timedelta(days=1), days_ahead + 2
    )
    return created


async def drop_partitions_before(conn: asyncpg.Connection, keep_from: dt.date) -> list[str]:
    """Retention: drop daily partitions entirely older than `keep_from` that hold no run in
    flight, and the default partition's finished rows older than it."""
    rows = await conn.fetch(QUERIES["partitions_drop_before"], keep_from)
    return [row["dropped"] for row in rows]


# --- constraint names → domain errors, in one place (STYLE.md "Errors") -----------------------


class DomainError(ValueError):
    """A database refusal translated into the field and allowed form a user can act on."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


CONSTRAINT_ERRORS: dict[str, tuple[str, str]] = {
    "tenants_name_form": ("name", "must match [A-Za-z0-9._-]{1,64}"),
    "tenants_pkey": ("name", "a tenant with this name exists already"),
    "jobs_id_form": ("id", "must match [A-Za-z0-9._:-]{1,128}"),
    "jobs_priority": ("priority", f"must be one of {', '.join(PRIORITIES)}"),
    "jobs_max_attempts": ("max_attempts", "must be at least 1"),
    "jobs_schedule_xor_at": ("schedule", "give exactly one of schedule and at"),
    "jobs_handler_xor_target": ("handler", "give exactly one of handler and target"),
    "jobs_tenant_fkey": ("tenant", "unknown tenant"),
    "operator_keys_name_form": ("name", "must match [A-Za-z0-9._@-]{1,64}"),
    "operator_keys_active_name": (
        "name",
        "this operator already has a key; revoke it first (tickwheel operator-key revoke NAME)",
    ),
}


def domain_error(exc: asyncpg.PostgresError) -> DomainError | None:
    """The domain error for a constraint violation we know by name, else None."""
    name = getattr(exc, "constraint_name", None)
    if name and name in CONSTRAINT_ERRORS:
        return DomainError(*CONSTRAINT_ERRORS[name])
    return None


# What a failed database round trip raises when the server (or the connection to it) went
# away, refused, or killed the session: a restart of Postgres raises all four kinds, among
# them asyncpg's InternalClientError ("cannot switch to state …") from a connection the
# restart cut mid-protocol, which is not an InterfaceError. Long-running loops log these and
# try again; anything else is a bug and stops the process (I9).
DB_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)


# --- data errors: "this input", never "this moment" -------------------------------------------

# SQLSTATE classes that mean the data is at fault, not the database's state: data exception
# (22: NUL or untranslatable characters, numeric out of range, …), integrity constraint
# violation (23), program limit exceeded (54: e.g. a row or an index entry too large).
DATA_ERROR_CLASSES = ("22", "23", "54")


def is_data_error(exc: BaseException) -> bool:
    """Whether `exc` means "the database cannot take this input" (retrying cannot help).

    Besides the server's SQLSTATE classes above, asyncpg refuses some input on the client
    before it is sent: its own `DataError` (an `InterfaceError`, so it must be told apart from
    a broken connection, which is one too) and `OverflowError` from encoding an integer that
    does not fit the column (e.g. 2^63 into a bigint through binary COPY).
    """
    if isinstance(exc, asyncpg.PostgresError):
        return str(getattr(exc, "sqlstate", "") or "")[:2] in DATA_ERROR_CLASSES
    return isinstance(exc, (ClientDataError, OverflowError))
