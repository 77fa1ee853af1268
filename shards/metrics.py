"""Prometheus metrics of a scheduler process (served on `--metrics-port`).

A registry per `Scheduler`, not the global one, so that several schedulers in one test process
never collide. Label values are bounded: shard ids (fixed count), priorities, reasons.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tickwheel.metrics import observe_many

__all__ = ["LAG_BUCKETS_S", "SchedulerMetrics", "observe_many"]

LAG_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class SchedulerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.dispatch_lag = Histogram(
            "tickwheel_scheduler_dispatch_lag_seconds",
            "Broker ack of a run's first publish minus the instant it was due (its scheduled "
            "instant, delayed by its job's jitter)",
            buckets=LAG_BUCKETS_S,
            registry=r,
        )
        self.claimed = Counter(
            "tickwheel_scheduler_claimed_runs_total",
            "Pending run rows created by claims",
            registry=r,
        )
        self.published = Counter(
            "tickwheel_scheduler_published_runs_total",
            "Run envelopes acknowledged by the broker",
            ["kind"],  # first | retry | unacked | adopted | republish | requeue | buffered
            registry=r,
        )
        self.skipped = Counter(
            "tickwheel_scheduler_skipped_runs_total",
            "Skipped run rows recorded (misfire, max_catchup, overlap; a span counts once)",
            registry=r,
        )
        self.dead = Counter(
            "tickwheel_scheduler_dead_runs_total",
            "Runs declared dead by the sweeper (worker lease lapsed on the last attempt)",
            registry=r,
        )
        self.fenced_out = Counter(
            "tickwheel_scheduler_fenced_out_total",
            "Leader transactions refused by the fence (another epoch owns the shard)",
            registry=r,
        )
        self.leadership = Counter(
            "tickwheel_scheduler_leadership_changes_total",
            "Shards taken, released, lost or fenced out by this process",
            ["change"],
            registry=r,
        )
        self.wheel_size = Gauge(
            "tickwheel_scheduler_wheel_entries",
            "Entries in a shard's timing wheel",
            ["shard"],
            registry=r,
        )
        self.window_held = Gauge(
            "tickwheel_scheduler_window_held_entries",
            "Due entries a shard's leader holds because their tenant's dispatch window is full",
            ["shard"],
            registry=r,
        )
        self.shards_led = Gauge(
            "tickwheel_scheduler_shards_led", "Shards this process leads", registry=r
        )
        # The deployment's TICKWHEEL_SHARDS, so that "every shard has a leader" is PromQL:
        # sum(shards_led) < max(shards) (docs/prometheus/alerts.yml).
        self.shards = Gauge(
            "tickwheel_scheduler_shards", "Logical shards of the deployment", registry=r
        )
        self.feed_lag = Gauge(
            "tickwheel_scheduler_feed_lag_seconds",
            "Age of the newest job change when the feed applied it to a wheel",
            registry=r,
        )
        self.calendars_age = Gauge(
            "tickwheel_scheduler_calendars_age_seconds",
            "Seconds since the exclusion calendars were last read (polled every second)",
            registry=r,
        )
        self.zk_state = Gauge(
            "tickwheel_scheduler_zookeeper_connected",
            "1 while the ZooKeeper session is connected, else 0",
            registry=r,
        )
