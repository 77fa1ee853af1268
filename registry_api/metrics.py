"""What the HTTP API reports about itself: Prometheus collectors and the request log.

`Observe` wraps the app: it counts and times each request by route template, logs one JSON
line per request, and bounds request bodies.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tickwheel.domain import Quota
from tickwheel.registry_api.admission import RejectKind
from tickwheel.registry_api.errors import too_large
from tickwheel.registry_api.intake import BatchReport
from tickwheel.registry_api.state import CHANGING, Outcome

# The request log's logger keeps the name docs/API.md gives it.
log = logging.getLogger("tickwheel.registry_api.http")

KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
INTAKE_RESULTS = ("applied", "rejected")  # a registration ends one or the other (DESIGN I7)
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """This app's Prometheus collectors, in a registry of its own (one per app, not global)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "tickwheel_http_requests",
            "HTTP requests by route template and status",
            ("method", "route", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "tickwheel_http_request_duration_seconds",
            "HTTP request latency, seconds",
            ("method", "route", "status"),
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.job_changes = Counter(
            "tickwheel_registry_job_changes",
            "Jobs changed over HTTP, by outcome (created, updated, deleted, paused, resumed)",
            ("outcome",),
            registry=self.registry,
        )
        for outcome in CHANGING:
            self.job_changes.labels(outcome)  # exported as 0 before the first change
        self.intake = Counter(
            "tickwheel_registry_intake_registrations",
            "Kafka registrations the intake settled, by result (applied, rejected)",
            ("result",),
            registry=self.registry,
        )
        for result in INTAKE_RESULTS:
            self.intake.labels(result)
        self.intake_rejections = Counter(
            "tickwheel_registry_intake_rejections",
            "Kafka registrations the intake rejected, by reason (a word; the rejected topic "
            "has the sentence)",
            ("reason",),
            registry=self.registry,
        )
        for kind in RejectKind:
            self.intake_rejections.labels(kind.value)
        self.paused_on_failure = Counter(
            "tickwheel_registry_jobs_paused_on_failure",
            "Jobs this registry paused after their pause_after_dead_runs consecutive dead runs, "
            "by tenant (registry_api/auto_pause.py)",
            ("tenant",),
            registry=self.registry,
        )
        self.intake_lag = Gauge(
            "tickwheel_registry_intake_lag",
            "Registrations between the intake's last batch of a partition and its end",
            ("partition",),
            registry=self.registry,
        )
        self.intake_batch_seconds = Histogram(
            "tickwheel_registry_intake_batch_duration_seconds",
            "Seconds from an intake batch's transaction to its offsets stored",
            buckets=BATCH_BUCKETS_S,
            registry=self.registry,
        )
        self.quota_refusals = Counter(
            "tickwheel_registry_quota_refusals",
            "Registrations a tenant's quota refused (HTTP 429 or a rejection), by tenant and quota",
            ("tenant", "quota"),
            registry=self.registry,
        )

    def intake_batch(self, report: BatchReport) -> None:
        """Count one settled intake batch (the intake's `on_batch`)."""
        self.intake.labels("rejected").inc(report.rejected)
        self.intake.labels("applied").inc(report.messages - report.rejected)
        for reason, count in report.reasons.items():
            self.intake_rejections.labels(reason).inc(count)
        for (tenant, quota), count in report.refusals.items():
            self.quota_refusals.labels(tenant, quota).inc(count)
        for partition, lag in report.lag.items():
            self.intake_lag.labels(str(partition)).set(lag)
        self.intake_batch_seconds.observe(report.duration_s)

    def refused(self, tenant: str, quota: Quota) -> None:
        """Count one HTTP request a tenant's quota refused."""
        self.quota_refusals.labels(tenant, quota.value).inc()

    def changed(self, outcome: Outcome) -> None:
        if outcome.changed:
            self.job_changes.labels(outcome.value).inc()


class Observe:
    """ASGI middleware: count and time each request by route template; log one JSON line.

    It also bounds request bodies: a declared Content-Length over `max_body_bytes` is refused
    before the app runs, and a chunked body is cut off as soon as it grows past it.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics, max_body_bytes: int) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server error middleware answers if the app raises

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        received = 0

        async def bounded_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise StarletteHTTPException(413)
            return message

        try:
            if self._declared_length(scope) > self.max_body_bytes:
                await too_large()(scope, receive, observed_send)
            else:
                await self.app(scope, bounded_receive, observed_send)
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            # The template, never the raw path: label values must stay few.
            template = getattr(route, "path", None) or "unmatched"
            # Only known methods: an arbitrary token as a label would grow /metrics unboundedly.
            method = scope["method"] if scope["method"] in KNOWN_METHODS else "other"
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template, str(status)).observe(elapsed)
            if log.isEnabledFor(logging.INFO):
                log.info(
                    "request",
                    extra={
                        "http_method": method,
                        "route": template,
                        "path": scope["path"],
                        "status": status,
                        "duration_ms": round(elapsed * 1000, 3),
                        "tenant": scope.get("state", {}).get("tenant"),
                    },
                )

    @staticmethod
    def _declared_length(scope: Scope) -> int:
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0  # the server rejects a malformed length before we see it
        return 0
