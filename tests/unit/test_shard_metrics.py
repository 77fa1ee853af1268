"""Batched histogram observations count exactly like one-by-one observations."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram

from tickwheel.shards.metrics import LAG_BUCKETS_S, observe_many

pytestmark = pytest.mark.unit


def _samples(hist: Histogram) -> dict[tuple[str, str], float]:
    (metric,) = list(hist.collect())
    return {
        (s.name, s.labels.get("le", "")): s.value for s in metric.samples if "created" not in s.name
    }


def test_observe_many_matches_observe() -> None:
    """bucket counts, count and sum are the same as observing each value, edges included"""
    values = [0.0, 0.005, 0.0051, 0.3, 1, 59.9, 60, 1000.0, 0.02] * 3
    one, many = (
        Histogram(name, "h", buckets=LAG_BUCKETS_S, registry=CollectorRegistry())
        for name in ("one", "many")
    )
    for value in values:
        one.observe(value)
    observe_many(many, values)
    rename = {k: v for k, v in _samples(one).items()}
    assert {(n.replace("one", "many"), le): v for (n, le), v in rename.items()} == _samples(many)
