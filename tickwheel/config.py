"""Settings: one object read from `TICKWHEEL_*` environment variables and an optional TOML file.

Precedence, highest first: explicit keyword arguments, environment, the TOML file named by
`TICKWHEEL_CONFIG`, the defaults below. A service address left unset (`dsn`, `kafka`, `zk`)
means "the local stack of `tickwheel dev`", whose addresses follow from the `dev_*` ports.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, get_origin
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from tickwheel.deployment import PREFIX_FORM
from tickwheel.domain import PRIORITIES, Priority
from tickwheel.wire.job import TargetLimit

# A TICKWHEEL_TARGET_LIMITS key: a host name, IPv4 address or [IPv6] address, optionally :port.
_LIMIT_KEY = re.compile(
    r"([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?"
)


class ConfigError(ValueError):
    """A setting that cannot be used, named with the allowed form."""


class Settings(BaseSettings):
    """Every knob of every tickwheel process. Field docs are the README's settings table."""

    model_config = SettingsConfigDict(env_prefix="TICKWHEEL_", extra="forbid")

    dsn: str | None = Field(None, description="Postgres DSN; unset: the dev stack's")
    kafka: str | None = Field(None, description="Kafka bootstrap servers; unset: the dev stack's")
    zk: str | None = Field(None, description="ZooKeeper hosts; unset: the dev stack's")

    shards: int = Field(64, ge=1, le=4096, description="number of logical shards (fixed)")
    tick_ms: int = Field(100, ge=1, le=10_000, description="scheduler tick, milliseconds")
    horizon_s: int = Field(600, ge=10, description="how far ahead leaders load jobs, seconds")
    lease_s: int = Field(30, ge=1, description="worker run lease, seconds")
    topic_prefix: str = Field(
        "tickwheel", pattern=f"^{PREFIX_FORM.pattern}$", description="prefix of every topic name"
    )
    priority_weights: dict[str, int] = Field(
        default_factory=lambda: {
            Priority.HIGH.value: 6,
            Priority.NORMAL.value: 3,
            Priority.LOW.value: 1,
        },
        description="relative share of worker polls per priority topic",
    )
    # At most 512 KiB: a run envelope carries the payload as Postgres prints it (up to 1.5x the
    # JSON a user sent) and must fit one Kafka message (1,000,000 bytes), else it could never
    # be published.
    payload_limit_bytes: int = Field(
        262_144, ge=1, le=524_288, description="max job payload, bytes (at most 524288)"
    )
    target_allowlist: list[str] = Field(
        default_factory=list,
        description="URL prefixes HTTP targets may call (JSON list); empty: no HTTP targets",
    )
    intake_batch: int = Field(
        2000, ge=1, le=100_000, description="registrations applied per database transaction"
    )
    intake_require_signature: bool = Field(
        True,
        description="reject registrations from Kafka that are not signed (form 2) with an API "
        "key of their tenant (header tickwheel-signature); false only where the topic's "
        "producers are trusted (Kafka ACLs)",
    )
    intake_stall_s: int = Field(
        60,
        ge=10,
        le=3600,
        description="how long registrations may wait unread on the topic while the intake "
        "looks alive, seconds; then the intake ends and the registry exits (code 1) for its "
        "supervisor to restart it",
    )
    intake_signature_window_s: int = Field(
        86_400,
        ge=60,
        le=30 * 86_400,
        description="how old a signed registration may be when the intake reads it, seconds "
        "(older: rejected as expired; its message id is remembered this long to refuse replays)",
    )
    backfill_max_runs: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="occurrences one backfill request may run at most (more: 422 saying where "
        "to split the range)",
    )
    backfill_rate_per_s: float = Field(
        100.0,
        gt=0,
        le=100_000,
        description="runs per second a backfill releases to workers, per job",
    )
    kafka_session_timeout_ms: int = Field(
        10_000,
        ge=6_000,
        le=300_000,
        description="consumer group session timeout: how long a crashed member holds its "
        "partitions, milliseconds",
    )
    # scheduler
    zk_session_timeout_ms: int = Field(
        10_000,
        ge=1_000,
        le=600_000,
        description="ZooKeeper session timeout of scheduler processes: how long the shards of "
        "a crashed process stay without a leader, milliseconds (the server bounds it to "
        "[2, 20] x its tickTime)",
    )
    publish_lease_s: int = Field(
        300,
        ge=1,
        description="safety net: how long a dispatched run may stay unstarted before its "
        "leader publishes it again, seconds (a refused publish is retried at the next sweep, "
        "and a new leader adopts its predecessors' pending runs at once)",
    )
    claim_batch: int = Field(
        5000, ge=1, le=100_000, description="due entries claimed per database transaction"
    )
    sweep_interval_ms: int = Field(
        2000,
        ge=10,
        description="how often a leader sweeps its shard (lapsed leases, retries, buffered "
        "runs), milliseconds",
    )
    resync_s: int = Field(
        600,
        ge=1,
        description="how often a leader re-reads its whole horizon (a safety net: the change "
        "feed and the horizon's extensions keep the wheel current; only the jobs the wheel does "
        "not hold at their version and next instant are read in full), seconds",
    )
    tenant_dispatch_window: int = Field(
        0,
        ge=0,
        description="runs of one tenant that may be claimed and not finished yet (nor marked "
        "running), cluster-wide: a quota that holds a tenant's due runs in the scheduler at "
        "this many until the workers finish some; 0 (the default): no bound, a burst goes to "
        "the run topics at once and the leaders' turns keep other tenants' runs from waiting "
        "behind it (D-271)",
    )
    dispatch_window_refresh_ms: int = Field(
        100,
        ge=10,
        description="how often a scheduler counts the unfinished runs of the tenants near "
        "their dispatch window, milliseconds",
    )
    horizon_extend_s: int = Field(
        5,
        ge=1,
        description="how often a leader moves its horizon's end on, loading the jobs due in "
        "the newly covered slice only, seconds (less than TICKWHEEL_HORIZON_S)",
    )
    scheduler_db_connections: int = Field(
        16,
        ge=2,
        le=200,
        description="Postgres connections of one scheduler process (its shards' leaders share "
        "them; at 8, 64 leaders under steady load queued ~100 ms for one)",
    )
    topic_partitions: int = Field(6, ge=1, description="partitions of created topics")
    topic_replication: int = Field(1, ge=1, description="replication factor of created topics")

    # workers
    worker_concurrency: int = Field(
        # A dispatch starts as many runs as it has slots free; the suspect deliveries among them
        # are claimed in one statement (D-268), so the more slots, the fewer times a burst pays
        # a statement's fixed cost before its first row (D-150).
        256,
        ge=1,
        le=10_000,
        description="runs a worker executes at once (`--concurrency`)",
    )
    worker_high_reserved_slots: int = Field(
        0, ge=0, description="execution slots only high-priority runs may take"
    )
    worker_tenant_concurrency: int = Field(
        0,
        ge=0,
        description="runs of one tenant ONE worker executes at once, its share of the slots; "
        "0: no cap (the cluster-wide cap is `tickwheel tenant cap`)",
    )
    worker_queue_per_priority: int = Field(
        # Well above worker_batch (a fetch brings up to 500): at 256 a worker paused and resumed
        # its partitions on every fetch and two workers completed 965 runs/s; at 4000, 4,233/s
        # (docs/journal/hot-second.md, *Hot second: the whole system*). An envelope held costs
        # about a kilobyte.
        4000,
        ge=1,
        description="deliveries a worker holds per priority before pausing that topic's partitions",
    )
    worker_stall_s: int = Field(
        60,
        ge=10,
        le=3600,
        description="how long a worker may stay out of its group, leave messages unread past "
        "its position on a run partition it holds and fetches, or wait on one database call, "
        "while it looks alive, seconds; then it exits (code 1) for its supervisor to restart it",
    )
    worker_batch: int = Field(
        500, ge=1, le=100_000, description="messages per fetch and results per database write"
    )
    worker_grace_s: float = Field(
        20.0,
        ge=0,
        description="on SIGTERM, how long in-flight runs may finish before they are left to "
        "their lease, seconds",
    )
    target_rate_per_s: float = Field(
        50.0,
        gt=0,
        le=1_000_000,
        description="HTTP target requests per second per host, for all workers together, for "
        "hosts TICKWHEEL_TARGET_LIMITS does not name",
    )
    target_burst: int = Field(
        20,
        ge=1,
        le=1_000_000,
        description="HTTP target requests a host may get at once (all workers), for hosts "
        "TICKWHEEL_TARGET_LIMITS does not name",
    )
    target_limits: dict[str, TargetLimit] = Field(
        default_factory=dict,
        description="per target host, its rate and burst for all workers together (JSON: "
        '{"host[:port]": {"rate_per_s": 500, "burst": 50}}; a host named without a port: '
        "all its ports share the limit)",
    )
    target_breaker_failures: int = Field(
        5,
        ge=1,
        description="consecutive failures of a host, counted by all workers, that open its "
        "circuit breaker (5xx, 429, timeouts, connection errors)",
    )
    target_breaker_cooldown_s: float = Field(
        30.0, gt=0, description="how long an open circuit fails calls fast, seconds"
    )
    tenant_cap_hold_ms: int = Field(
        1000,
        ge=10,
        le=600_000,
        description="how long a run its tenant's cap (tenants.max_running) held back waits "
        "before it is dispatched again, milliseconds (plus up to a sweep of its leader)",
    )
    # operations
    retention_days: int = Field(
        30,
        ge=1,
        le=36_500,
        description="`tickwheel gc`: run history and completed one-off jobs older than this "
        "many days are removed",
    )
    ops_kafka_timeout_s: float = Field(
        10.0,
        gt=0,
        le=600,
        description="how long `tickwheel dlq` commands wait for Kafka before giving up, seconds",
    )

    devstack_dir: Path = Field(Path(".devstack"), description="where `tickwheel dev` keeps state")
    dev_pg_port: int = Field(55432, ge=1, le=65535, description="dev stack Postgres port")
    dev_kafka_port: int = Field(59092, ge=1, le=65535, description="dev stack Kafka port")
    dev_kafka_controller_port: int = Field(
        59093, ge=1, le=65535, description="dev stack KRaft controller port"
    )
    dev_zk_port: int = Field(52181, ge=1, le=65535, description="dev stack ZooKeeper port")

    @field_validator("dsn")
    @classmethod
    def _dsn_readable(cls, value: str | None) -> str | None:
        return check_dsn(value) if value else value

    @field_validator("kafka")
    @classmethod
    def _kafka_hosts(cls, value: str | None) -> str | None:
        return check_hosts(value, "the Kafka bootstrap servers") if value else value

    @field_validator("zk")
    @classmethod
    def _zk_hosts(cls, value: str | None) -> str | None:
        return check_hosts(value, "the ZooKeeper servers", chroot=True) if value else value

    @field_validator("target_limits")
    @classmethod
    def _limit_keys(cls, value: dict[str, TargetLimit]) -> dict[str, TargetLimit]:
        keys: dict[str, TargetLimit] = {}
        for key, limit in value.items():
            if not _LIMIT_KEY.fullmatch(key):
                raise ValueError(
                    f"names {key!r}: a key is a host name or address, optionally with :port "
                    "(no scheme, no path)"
                )
            keys[key.lower()] = limit
        return keys

    @field_validator("target_allowlist")
    @classmethod
    def _allowlist_readable(cls, value: list[str]) -> list[str]:
        from tickwheel.target_rules import TargetError, parse_entry

        for entry in value:
            try:
                parse_entry(entry)
            except TargetError as exc:
                raise ValueError(
                    f"entry {entry!r}: {exc.message} (an entry is a URL prefix, then "
                    "optionally the private address ranges its host may resolve to)"
                ) from None
        return value

    @field_validator("priority_weights")
    @classmethod
    def _weights_cover_priorities(cls, value: dict[str, int]) -> dict[str, int]:
        if set(value) != set(PRIORITIES) or any(w < 1 for w in value.values()):
            raise ValueError(
                "priority_weights must give a positive integer for exactly high, normal and low"
            )
        return value

    @model_validator(mode="after")
    def _extension_inside_horizon(self) -> Settings:
        if self.horizon_extend_s >= self.horizon_s:
            raise ValueError(
                f"horizon_extend_s ({self.horizon_extend_s}) must be less than horizon_s "
                f"({self.horizon_s}): a job could come due before the horizon reached it"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = os.environ.get("TICKWHEEL_CONFIG")
        if path:
            if not Path(path).is_file():
                raise ConfigError(f"TICKWHEEL_CONFIG names {path!r}, which is not a file")
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(path)))
        return tuple(sources)

    # The effective addresses: given ones as they are, else the dev stack's.

    @property
    def effective_dsn(self) -> str:
        return self.dsn or f"postgresql://tickwheel@127.0.0.1:{self.dev_pg_port}/tickwheel"

    @property
    def effective_kafka(self) -> str:
        return self.kafka or f"127.0.0.1:{self.dev_kafka_port}"

    @property
    def effective_zk(self) -> str:
        return self.zk or f"127.0.0.1:{self.dev_zk_port}"


# A secret's name in a DSN's query (`?password=…`) or in a keyword/value string
# (`password=… host=…`, the value bare or in single quotes with backslash escapes).
_SECRET_NAMES = r"(?:ssl)?password"
_QUERY_SECRET = re.compile(rf"(?i)([?&]{_SECRET_NAMES}=)[^&#]*")
_KEYWORD_SECRET = re.compile(rf"(?i)(\b{_SECRET_NAMES}\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|\S*)")


def redact_dsn(dsn: str) -> str:
    """The DSN with every password replaced by ***: for every message, status line and error.

    The one place that knows where a DSN keeps its secrets: the userinfo of a URL (`user:pw@`,
    multi-host `user:pw@h1,h2` included), its query (`?password=`, `&sslpassword=`), and the
    keyword/value form (`host=h password=pw`, quoted or not). In doubt it hides more: the
    userinfo is taken up to the last `@`, since an unencoded `@`, `/` or `?` in a password is
    a DSN that parsers split in different places.
    """
    scheme, sep, rest = dsn.partition("://")
    if not sep:
        return _KEYWORD_SECRET.sub(r"\1***", dsn)
    at = rest.rfind("@")
    if at >= 0:
        user, colon, _ = rest[:at].partition(":")
        if colon:
            rest = f"{user}:***{rest[at:]}"
    return scheme + "://" + _QUERY_SECRET.sub(r"\1***", rest)


def check_dsn(dsn: str) -> str:
    """`dsn` if it is a Postgres URL that asyncpg can read, else ValueError saying why (without
    the DSN: its password would be printed)."""
    scheme, sep, _ = dsn.partition("://")
    if not sep or scheme not in ("postgresql", "postgres"):
        raise ValueError(
            "must be a postgresql:// URL (postgresql://user:password@host:port/database); "
            "the keyword/value form (host=… dbname=…) is not supported"
        )
    try:
        parts = urlsplit(dsn)
    except ValueError as exc:
        raise ValueError(f"is not a URL that can be read: {exc}") from None
    hosts = parts.netloc.rpartition("@")[2]
    for host in filter(None, hosts.split(",")):
        name, port = _host_port(host)
        if port is not None and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError(f"names host {name!r} with port {port!r}, not a number 1-65535")
    return dsn


def _host_port(spec: str) -> tuple[str, str | None]:
    """(host, port or None) of `host[:port]` or `[v6]:port`."""
    if spec.startswith("["):
        host, _, after = spec[1:].partition("]")
        return host, after[1:] if after.startswith(":") else (after or None)
    host, colon, port = spec.rpartition(":")
    return (host, port) if colon else (spec, None)


def check_hosts(value: str, what: str, *, chroot: bool = False) -> str:
    """`value` if it is a comma-separated list of `host[:port]` (ZooKeeper's may end with a
    `/chroot` path), else ValueError naming the entry at fault."""
    hosts = value
    if chroot and "/" in value:
        hosts = value[: value.index("/")]
    entries = [h.strip() for h in hosts.split(",")]
    if not any(entries):
        raise ValueError(f"must list {what} as host:port[,host:port…]")
    for entry in entries:
        name, port = _host_port(entry)
        if not name or not all(c.isalnum() or c in ".-_:" for c in name):
            raise ValueError(f"has {entry!r}, which is not host:port")
        if port is not None and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError(f"has {entry!r}, whose port is not a number 1-65535")
    return value


_UNPARSED_FIELD = re.compile(r'field "(?P<field>\w+)"')
_JSON_EXAMPLES: dict[Any, str] = {
    list: 'a JSON list, e.g. ["https://hooks.example.com/"]',
    dict: 'a JSON object, e.g. {"high": 6, "normal": 3, "low": 1}',
}


def load_settings(**overrides: Any) -> Settings:
    """Read the settings, turning pydantic's report into one sentence per bad field.

    Every way a setting can be wrong ends here as a ConfigError: a value of the wrong form, a
    value that is not the JSON its field needs (a list, an object), a TOML file that does not
    parse. None of them quotes a DSN (its password)."""
    import tomllib

    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"TICKWHEEL_{'_'.join(str(p) for p in err['loc']).upper()}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(problems.replace("Value error, ", "")) from None
    except SettingsError as exc:
        match = _UNPARSED_FIELD.search(str(exc))
        field = match["field"] if match else ""
        shape = get_origin(Settings.model_fields[field].annotation) if field else None
        example = _JSON_EXAMPLES.get(shape, "JSON")
        raise ConfigError(
            f"TICKWHEEL_{field.upper()} cannot be read: it must be {example} "
            f"({exc.__cause__ or exc})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"TICKWHEEL_CONFIG names {os.environ.get('TICKWHEEL_CONFIG')!r}, which is not "
            f"valid TOML: {exc}"
        ) from None
    except OSError as exc:
        raise ConfigError(f"TICKWHEEL_CONFIG cannot be read: {exc}") from None
