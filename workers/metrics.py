"""The worker's Prometheus collectors, in a registry of its own (one per worker, not global)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tickwheel.domain import RunStatus
from tickwheel.runtime import Process

HANDLER_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
LATENESS_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600)
OUTCOMES = (RunStatus.SUCCEEDED, RunStatus.RETRYING, RunStatus.DEAD, "fenced")
SKIP_REASONS = ("duplicate", "stale", "unknown_run")


class WorkerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.executions = Counter(
            "tickwheel_worker_executions",
            "Attempts recorded, by outcome (fenced: the result lost its lease and was dropped)",
            ("outcome",),
            registry=self.registry,
        )
        self.handler_seconds = Histogram(
            "tickwheel_worker_handler_duration_seconds",
            "Handler or HTTP target duration, seconds",
            buckets=HANDLER_BUCKETS_S,
            registry=self.registry,
        )
        self.start_lateness = Histogram(
            "tickwheel_worker_start_lateness_seconds",
            "Start minus the instant the run was due (its scheduled instant, delayed by its job's"
            " jitter), seconds: the claim's time (database clock)"
            " for a claimed run, this host's clock for one started without a claim",
            buckets=LATENESS_BUCKETS_S,
            registry=self.registry,
        )
        self.skipped = Counter(
            "tickwheel_worker_duplicates_skipped",
            "Deliveries that claimed nothing: duplicate (run taken or finished), stale (another "
            "attempt), unknown_run (no such run row: dead-lettered), held (a run overlap "
            "buffer_one holds back, not yet sent by a scheduler)",
            ("reason",),
            registry=self.registry,
        )
        self.claimed = Counter(
            "tickwheel_worker_claimed",
            "Runs claimed, by where what ran came from: `sealed` (the envelope, its seal opened:"
            " tickwheel/run_seal.py) or `job_row` (the job's row, read by the claim). Runs from"
            " the schedulers count as job_row only while their seal does not open: another"
            " key, or a worker or scheduler started before migration 0013",
            ["content"],
            registry=self.registry,
        )
        self.started_unclaimed = Counter(
            "tickwheel_worker_started_unclaimed",
            "Runs started without a claim (I4): first deliveries of fresh claims, sealed, of "
            "uncapped tenants. The others (suspect deliveries: redelivered after a partition "
            "moved, sent again by a leader, late, unsealed; capped tenants) take a claim first "
            "and count in tickwheel_worker_claimed",
            registry=self.registry,
        )
        self.marked = Counter(
            "tickwheel_worker_marked_running",
            "Runs started without a claim then marked running under this worker (a long run at "
            "a heartbeat, or runs in hand while their partition was taken away): `marked`, or "
            "`moved_on` (finished, claimed by another or re-dispatched meanwhile)",
            ("outcome",),
            registry=self.registry,
        )
        self.envelope_mismatch = Counter(
            "tickwheel_worker_envelope_mismatch",
            "Claimed deliveries whose handler, target, payload or timeout differ from their "
            "job's: the job changed after the dispatch, or the message is not a scheduler's. "
            "The job's content ran",
            registry=self.registry,
        )
        self.dlq = Counter(
            "tickwheel_worker_dlq_published",
            "Messages published to the DLQ: dead runs and unreadable deliveries",
            ("kind",),
            registry=self.registry,
        )
        self.lag = Gauge(
            "tickwheel_worker_partition_lag",
            "Messages of an assigned partition not yet done by this worker",
            ("topic", "partition"),
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "tickwheel_worker_in_flight", "Runs executing now", registry=self.registry
        )
        # Target hosts (labelled by the host's limit key; hosts are the operator's allowlist).
        self.target_takes = Counter(
            "tickwheel_worker_target_takes",
            "Statements that asked a target host's row for send instants (each for a batch of "
            "calls waiting at once)",
            ("host",),
            registry=self.registry,
        )
        self.target_waits = Counter(
            "tickwheel_worker_target_waits",
            "HTTP target calls that waited for a send instant of their host's cluster-wide rate",
            ("host",),
            registry=self.registry,
        )
        self.target_wait_seconds = Counter(
            "tickwheel_worker_target_wait_seconds",
            "Seconds HTTP target calls waited for their host's cluster-wide rate, in total",
            ("host",),
            registry=self.registry,
        )
        self.target_late = Counter(
            "tickwheel_worker_target_late",
            "Send instants given up because the worker woke too late for them (a busy event "
            "loop); the call asked for another",
            ("host",),
            registry=self.registry,
        )
        self.target_breaker_state = Gauge(
            "tickwheel_worker_target_breaker_state",
            "A target host's shared circuit breaker as this worker last saw it: 0 closed, "
            "1 half-open, 2 open",
            ("host",),
            registry=self.registry,
        )
        self.target_breaker_opens = Counter(
            "tickwheel_worker_target_breaker_opens",
            "Times a failure this worker counted opened a target host's shared breaker",
            ("host",),
            registry=self.registry,
        )
        self.target_refused = Counter(
            "tickwheel_worker_target_refused",
            "HTTP target calls failed fast by an open breaker (retried later)",
            ("host",),
            registry=self.registry,
        )
        # Capped tenants (tenants.max_running set; an uncapped tenant has no series).
        self.tenant_held = Counter(
            "tickwheel_worker_tenant_held",
            "Runs this worker's claims held back by their tenant's cluster-wide cap "
            "(sent back to wait, no attempt spent)",
            ("tenant",),
            registry=self.registry,
        )
        self.tenant_running = Gauge(
            "tickwheel_worker_tenant_running",
            "A capped tenant's runs running across the cluster, at the last refresh",
            ("tenant",),
            registry=self.registry,
        )
        self.tenant_cap = Gauge(
            "tickwheel_worker_tenant_cap",
            "A capped tenant's max_running, at the last refresh",
            ("tenant",),
            registry=self.registry,
        )
        for outcome in OUTCOMES:
            self.executions.labels(str(outcome))
        for reason in SKIP_REASONS:
            self.skipped.labels(reason)
        for kind in ("dead", "unreadable"):
            self.dlq.labels(kind)
        for outcome in ("marked", "moved_on"):
            self.marked.labels(outcome)


class PartsCollector(Collector):
    """`tickwheel_worker_part_up{part}`: 1 while a part of the process runs, 0 once it ended
    (I9: the metrics report each part's real state)."""

    def __init__(self, process: Process) -> None:
        self.process = process

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "tickwheel_worker_part_up", "1 while the part runs, 0 after it ended", labels=["part"]
        )
        for name, state in sorted(self.process.health.items()):
            family.add_metric([name], 1.0 if state.alive else 0.0)
        yield family
