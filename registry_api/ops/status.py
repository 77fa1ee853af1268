"""One snapshot of a running deployment, for `tickwheel status` and the demo's live view
(status_view.py draws it).

Where each figure comes from — every source is read, none is joined or changed:

    shards      Postgres `shard_leaders` (owner and epoch of the last takeover) and ZooKeeper
                `/tickwheel/<prefix>/shards/<n>` (who holds the shard right now); "behind" is
                how long the shard's oldest due job has waited to be claimed (Postgres, the
                `jobs_due` index)
    wheels      each scheduler's Prometheus endpoint (`tickwheel_scheduler_wheel_entries`),
                found through its ZooKeeper member node, which advertises `host:port` when
                the scheduler runs with `--metrics-port` (shards/election.py)
    lag         the schedulers' dispatch-lag histograms: quantiles since the process started,
                or, with `--watch`, over the last refresh interval (the difference of two reads)
    backlog     per run topic, the high watermarks minus the offsets committed by the
                `<prefix>.workers` group, read by a consumer that never subscribes (no join,
                no rebalance of the workers)
    dlq         messages on `<prefix>.runs.dlq` (high minus low watermark per partition)
    workers     the members of the `<prefix>.workers` group (Kafka's group description)

A source that cannot be read leaves its figures empty and adds one sentence to `errors`; the
others are still shown (and the command exits 1).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any

from tickwheel.config import Settings, redact_dsn
from tickwheel.domain import PRIORITIES
from tickwheel.topics import Topics

SOURCE_TIMEOUT_S = 5.0  # each source (ZooKeeper, a metrics endpoint, Kafka) gets this long

Buckets = list[tuple[float, float]]  # a histogram as (upper bound in s, cumulative count)


@dataclass
class ShardStatus:
    shard: int
    holder: str | None = None  # ZooKeeper: who holds the shard node now
    owner: str | None = None  # Postgres: who took it over last
    epoch: int | None = None
    since_ms: int | None = None
    wheel_entries: int | None = None
    behind_ms: int = 0  # age of the oldest due, unclaimed job; 0 when none is due


@dataclass
class SchedulerStatus:
    member: str
    metrics: str | None  # advertised host:port, None without --metrics-port
    shards_led: int | None = None
    lag_p50_s: float | None = None
    lag_p99_s: float | None = None
    lag_count: int = 0  # publishes the quantiles are over
    lag_buckets: Buckets = field(default_factory=list)
    error: str | None = None


@dataclass
class TopicBacklog:
    topic: str
    backlog: int  # messages not yet committed by the workers' group
    partitions: int


@dataclass
class WorkerMember:
    client_id: str
    host: str
    partitions: int


@dataclass
class Snapshot:
    prefix: str
    at_ms: int
    # The deployment the database records (migration 0014): another than `prefix` means this
    # status reads one deployment's topics and another's database; None: none recorded.
    database_deployment: str | None = None
    shards: list[ShardStatus] = field(default_factory=list)
    schedulers: list[SchedulerStatus] = field(default_factory=list)
    backlog: list[TopicBacklog] = field(default_factory=list)
    dlq_messages: int | None = None
    workers: list[WorkerMember] | None = None
    group_state: str | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def led(self) -> int:
        return sum(1 for s in self.shards if s.holder is not None)

    def to_json(self) -> dict[str, Any]:
        value = asdict(self)
        for sched in value["schedulers"]:
            del sched["lag_buckets"]
        value["shards_led"] = self.led
        return value


# --- pure parts ---------------------------------------------------------------------------------


def quantile(buckets: Buckets, q: float) -> float | None:
    """The upper bound of the bucket holding quantile `q` of a cumulative histogram."""
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return None
    for bound, count in buckets:
        if count >= q * total:
            return bound
    return buckets[-1][0]


def bucket_delta(now: Buckets, before: Buckets | None) -> Buckets:
    """The histogram of what happened between two reads (a restarted process: all of `now`)."""
    if not before or len(before) != len(now) or before[-1][1] > now[-1][1]:
        return now
    return [(b, c - c0) for (b, c), (_, c0) in zip(now, before, strict=True)]


def parse_scheduler_metrics(text: str) -> tuple[dict[int, int], Buckets, int | None]:
    """From a scheduler's exposition: wheel entries per shard, lag buckets, shards led."""
    from prometheus_client.parser import text_string_to_metric_families

    wheels: dict[int, int] = {}
    buckets: Buckets = []
    led: int | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "tickwheel_scheduler_wheel_entries":
                wheels[int(sample.labels["shard"])] = int(sample.value)
            elif sample.name == "tickwheel_scheduler_dispatch_lag_seconds_bucket":
                buckets.append((float(sample.labels["le"]), sample.value))
            elif sample.name == "tickwheel_scheduler_shards_led":
                led = int(sample.value)
    buckets.sort()
    return wheels, buckets, led


# --- the sources --------------------------------------------------------------------------------


def _read_zookeeper(hosts: str, prefix: str) -> tuple[dict[str, str | None], dict[int, str]]:
    """{member: metrics address}, {shard: holder} of one deployment."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    from tickwheel.deployment import parse_member_data, zk_root

    client = KazooClient(hosts=hosts, timeout=SOURCE_TIMEOUT_S)
    client.start(timeout=SOURCE_TIMEOUT_S)
    root = zk_root(prefix)
    try:
        members: dict[str, str | None] = {}
        holders: dict[int, str] = {}
        for child in client.get_children(f"{root}/members") if client.exists(root) else []:
            try:
                data, _ = client.get(f"{root}/members/{child}")
            except NoNodeError:  # gone between the listing and the read
                continue
            members[child] = parse_member_data(child, data)
        if client.exists(f"{root}/shards"):
            for child in client.get_children(f"{root}/shards"):
                try:
                    data, _ = client.get(f"{root}/shards/{child}")
                except NoNodeError:
                    continue
                if child.isdigit():
                    holders[int(child)] = data.decode(errors="replace")
        return members, holders
    finally:
        client.stop()
        client.close()


def _scrape(address: str) -> str:
    import httpx

    resp = httpx.get(f"http://{address}/metrics", timeout=SOURCE_TIMEOUT_S)
    resp.raise_for_status()
    return resp.text


def _read_kafka(
    bootstrap: str, topics: Topics, group: str
) -> tuple[list[TopicBacklog], int, list[WorkerMember], str]:
    from confluent_kafka import TopicPartition

    from tickwheel.kafka.clients import QUIET, admin_client, consumer

    run_topics = [topics.runs(p) for p in PRIORITIES]
    # Same group id as the workers, so `committed` reads their offsets; never subscribing
    # means it never joins the group, and nothing is ever committed from here.
    reader = consumer(bootstrap, group, **{"enable.auto.commit": False}, **QUIET)
    try:
        meta = reader.list_topics(timeout=SOURCE_TIMEOUT_S)
        backlog = []
        for topic in run_topics:
            found = meta.topics.get(topic)
            if found is None or found.error is not None:
                raise RuntimeError(f"topic {topic} does not exist")
            tps = [TopicPartition(topic, p) for p in sorted(found.partitions)]
            committed = reader.committed(tps, timeout=SOURCE_TIMEOUT_S)
            total = 0
            for tp in committed:
                low, high = reader.get_watermark_offsets(
                    TopicPartition(topic, tp.partition), timeout=SOURCE_TIMEOUT_S, cached=False
                )
                total += high - (tp.offset if tp.offset >= 0 else low)
            backlog.append(TopicBacklog(topic, total, len(tps)))
        dlq = meta.topics.get(topics.dlq)
        dlq_messages = 0
        if dlq is not None and dlq.error is None:
            for p in dlq.partitions:
                low, high = reader.get_watermark_offsets(
                    TopicPartition(topics.dlq, p), timeout=SOURCE_TIMEOUT_S, cached=False
                )
                dlq_messages += high - low
    finally:
        reader.close()
    admin = admin_client(bootstrap, quiet=True)
    description = admin.describe_consumer_groups([group], request_timeout=SOURCE_TIMEOUT_S)[
        group
    ].result()
    workers = [
        WorkerMember(m.client_id, m.host, len(m.assignment.topic_partitions))
        for m in description.members
    ]
    state = getattr(description.state, "name", str(description.state)).lower()
    return backlog, dlq_messages, sorted(workers, key=lambda w: w.client_id), state


async def _read_postgres(dsn: str) -> tuple[list[Any], dict[int, int], str | None]:
    from tickwheel import db
    from tickwheel.queries import QUERIES

    conn = await asyncio.wait_for(db.connect(dsn), SOURCE_TIMEOUT_S)
    try:
        leaders = list(await conn.fetch(QUERIES["ops_shard_leaders"]))
        rows = await conn.fetch(QUERIES["ops_shards_behind"])
        behind = {r["shard_id"]: r["behind_ms"] for r in rows}
        return leaders, behind, await db.deployment_of(conn)
    finally:
        await conn.close()


def _reason(exc: BaseException) -> str:
    return " ".join((str(exc) or type(exc).__name__).split())


async def collect(settings: Settings, previous: Snapshot | None = None) -> Snapshot:
    """Read every source at once; with `previous`, lag quantiles cover the time since it."""
    from tickwheel.clock import now_ms
    from tickwheel.deployment import worker_group

    topics = Topics(settings.topic_prefix)
    snap = Snapshot(prefix=settings.topic_prefix, at_ms=now_ms())
    pg, zk, kafka = await asyncio.gather(
        _read_postgres(settings.effective_dsn),
        asyncio.to_thread(_read_zookeeper, settings.effective_zk, settings.topic_prefix),
        asyncio.to_thread(
            _read_kafka, settings.effective_kafka, topics, worker_group(settings.topic_prefix)
        ),
        return_exceptions=True,
    )
    shards = {n: ShardStatus(n) for n in range(settings.shards)}
    if isinstance(pg, BaseException):
        snap.errors.append(f"Postgres at {redact_dsn(settings.effective_dsn)}: {_reason(pg)}")
    else:
        leaders, behind, snap.database_deployment = pg
        if (recorded := snap.database_deployment) != settings.topic_prefix:
            snap.errors.append(
                f"Postgres at {redact_dsn(settings.effective_dsn)}: "
                + (
                    "the database records no deployment (run `tickwheel db migrate`)"
                    if recorded is None
                    else f"the database belongs to deployment {recorded!r}, not to "
                    f"{settings.topic_prefix!r} (TICKWHEEL_TOPIC_PREFIX)"
                )
            )
        for row in leaders:
            s = shards.setdefault(row["shard_id"], ShardStatus(row["shard_id"]))
            s.owner, s.epoch, s.since_ms = row["owner"], row["epoch"], row["since_ms"]
        for shard, ms in behind.items():
            shards.setdefault(shard, ShardStatus(shard)).behind_ms = ms
    if isinstance(zk, BaseException):
        snap.errors.append(f"ZooKeeper at {settings.effective_zk}: {_reason(zk)}")
    else:
        members, holders = zk
        for shard, holder in holders.items():
            shards.setdefault(shard, ShardStatus(shard)).holder = holder
        snap.schedulers = await _scrape_all(members, shards, previous)
    if isinstance(kafka, BaseException):
        snap.errors.append(f"Kafka at {settings.effective_kafka}: {_reason(kafka)}")
    else:
        snap.backlog, snap.dlq_messages, snap.workers, snap.group_state = kafka
    snap.shards = [shards[n] for n in sorted(shards)]
    return snap


async def _scrape_all(
    members: dict[str, str | None], shards: dict[int, ShardStatus], previous: Snapshot | None
) -> list[SchedulerStatus]:
    before = {s.member: s.lag_buckets for s in previous.schedulers} if previous else {}
    found = [SchedulerStatus(m, a) for m, a in sorted(members.items())]
    texts = await asyncio.gather(
        *(asyncio.to_thread(_scrape, s.metrics) for s in found if s.metrics),
        return_exceptions=True,
    )
    for sched, text in zip([s for s in found if s.metrics], texts, strict=True):
        if isinstance(text, BaseException):
            sched.error = f"metrics at {sched.metrics}: {_reason(text)}"
            continue
        wheels, buckets, sched.shards_led = parse_scheduler_metrics(text)
        for shard, entries in wheels.items():
            # A scheduler keeps the gauge of a shard it let go (at 0): the holder's counts.
            if shard in shards and shards[shard].holder == sched.member:
                shards[shard].wheel_entries = entries
        sched.lag_buckets = buckets
        window = bucket_delta(buckets, before.get(sched.member))
        sched.lag_count = int(window[-1][1]) if window else 0
        sched.lag_p50_s, sched.lag_p99_s = quantile(window, 0.5), quantile(window, 0.99)
    return found
