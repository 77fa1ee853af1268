"""The operations guide and the Grafana dashboard name only metrics the processes export, and
the guide lists every one of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tickwheel.registry_api.metrics import Metrics
from tickwheel.shards.metrics import SchedulerMetrics
from tickwheel.workers.metrics import WorkerMetrics

pytestmark = pytest.mark.unit

DOCS = Path(__file__).resolve().parents[2] / "docs"
METRIC = re.compile(r"\btickwheel_[a-z_]+\b")
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")
# Exported by a collector made per process (workers/metrics.py PartsCollector), not a class field.
COLLECTED = {"tickwheel_worker_part_up"}


def _names(registry: CollectorRegistry) -> set[str]:
    return {metric.name for metric in registry.collect()}


def _exported() -> set[str]:
    return (
        _names(Metrics().registry)
        | _names(SchedulerMetrics().registry)
        | _names(WorkerMetrics().registry)
        | COLLECTED
    )


def _base(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def test_operations_guide_lists_exactly_the_exported_metrics() -> None:
    """every metric of registry, scheduler and worker is in the Metrics section of
    docs/OPERATIONS.md, and no other (elsewhere the guide names other tickwheel_ things, such
    as the NOTIFY channels)"""
    guide = (DOCS / "OPERATIONS.md").read_text()
    text = guide[guide.index("\n## Metrics\n") : guide.index("\n## Deploying on real clusters")]
    named = {_base(m) for m in METRIC.findall(text)}
    assert named == _exported()


def test_grafana_dashboard_is_json_over_exported_metrics() -> None:
    """docs/grafana/tickwheel.json parses, has its panels, and queries only exported metrics"""
    dashboard = json.loads((DOCS / "grafana" / "tickwheel.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {_base(m) for e in exprs for m in METRIC.findall(e)}
    assert used <= _exported(), used - _exported()
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in ("dispatch lag", "published", "outcome", "dlq", "partition lag", "leadership"):
        assert topic in titles, topic


def test_alert_rules_query_only_exported_metrics() -> None:
    """docs/prometheus/alerts.yml names only metrics the processes export (and Prometheus's
    own `up`), and alerts on every process kind."""
    rules = (DOCS / "prometheus" / "alerts.yml").read_text()
    exprs = re.findall(r"expr: >?\n?((?:.*\n)+?)\s+(?:for|labels):", rules)
    used = {_base(m) for e in exprs for m in METRIC.findall(e)}
    assert used
    assert used <= _exported(), used - _exported()
    assert {name.split("_")[1] for name in used} == {"scheduler", "worker", "registry"}
    assert "up{" in rules


def test_the_intake_counts_each_settled_batch_by_result() -> None:
    """A batch of 7 with 2 rejections adds 5 applied and 2 rejected; both exported from 0."""
    from tickwheel.registry_api.intake import BatchReport

    metrics = Metrics()
    sample = metrics.registry.get_sample_value
    name = "tickwheel_registry_intake_registrations_total"
    assert sample(name, {"result": "rejected"}) == 0
    metrics.intake_batch(BatchReport(messages=7, rejected=2))
    metrics.intake_batch(BatchReport(messages=1))
    assert (sample(name, {"result": "applied"}), sample(name, {"result": "rejected"})) == (6, 2)


def test_a_scheduler_exports_the_deployment_s_shard_count() -> None:
    """tickwheel_scheduler_shards is TICKWHEEL_SHARDS from the moment the scheduler exists."""
    from tickwheel.config import load_settings
    from tickwheel.shards.service import Scheduler

    scheduler = Scheduler(load_settings(shards=16), "s1")
    assert scheduler.metrics.registry.get_sample_value("tickwheel_scheduler_shards") == 16
