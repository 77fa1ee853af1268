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
