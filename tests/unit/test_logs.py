"""The JSON-lines formatter: every record becomes one line, whatever its extra fields hold."""

from __future__ import annotations

import logging

import orjson
import pytest

from tickwheel.logs import JsonLines

pytestmark = pytest.mark.unit


def record(**extra: object) -> logging.LogRecord:
    r = logging.LogRecord(
        "tickwheel.test", logging.INFO, __file__, 1, "registrations batch", (), None
    )
    r.__dict__.update(extra)
    return r


def test_a_batch_report_with_tuple_and_number_keys_is_one_json_line() -> None:
    """the intake's batch report counts refusals by (tenant, quota) and lag by partition: the
    line is written (it was lost to orjson's 'Dict key must be str'), keys as text"""
    line = JsonLines().format(
        record(batch={"refusals": {("acme", "jobs"): 2}, "lag": {0: 5}, "outcomes": {"created": 1}})
    )
    body = orjson.loads(line)
    assert body["msg"] == "registrations batch"
    assert body["batch"] == {
        "refusals": {"acme/jobs": 2},
        "lag": {"0": 5},
        "outcomes": {"created": 1},
    }


def test_plain_fields_keep_their_types() -> None:
    body = orjson.loads(JsonLines().format(record(lag={3: 1}, shard=7)))
    assert body["lag"] == {"3": 1} and body["shard"] == 7
