"""The registry's staging rows line up, column by column, with the staging table's one list."""

from __future__ import annotations

import re

import orjson
import pytest

from tickwheel.queries import QUERIES
from tickwheel.registry_api.document import Limits, parse_document, validate_job
from tickwheel.registry_api.rows import row_tuple
from tickwheel.registry_api.state import StoredJob

pytestmark = pytest.mark.unit

NOW = 1_800_000_000_000


def _stage_columns() -> list[str]:
    lines = QUERIES["jobs_stage_create"].splitlines()
    sql = "\n".join(line for line in lines if not line.lstrip().startswith("--"))
    body = sql[sql.index("(") + 1 : sql.rindex(")")]
    return [re.split(r"\s+", part.strip())[0] for part in body.split(",")]


def test_each_staged_value_lands_in_its_named_column() -> None:
    """a staged job's values pair with jobs_stage_create's columns by name, in COPY order"""
    doc = parse_document(
        {
            "id": "invoice-42",
            "schedule": "0 9 * * MON-FRI",
            "timezone": "Europe/Berlin",
            "target": {"url": "https://hooks.acme.test/jobs/x"},
            "payload": {"n": 1},
            "priority": "high",
            "misfire": {"policy": "skip", "grace_ms": 5, "max_catchup": 7},
            "dst": {"gap": "skip", "overlap": "both"},
            "overlap": "buffer_one",
            "start_at": "2027-02-01T00:00:00Z",
            "end_at": "2027-03-01T00:00:00Z",
            "after_end": "delete",
            "pause_after_dead_runs": 3,
            "max_runs": 12,
            "calendars": ["holidays", "lunch"],
            "jitter_ms": 250,
        }
    )
    limits = Limits(target_allowlist=("https://hooks.acme.test/jobs",))
    spec = validate_job("acme", doc, limits, NOW)
    job = StoredJob("acme", "invoice-42", spec.stored_document, "paused", 3, 123, 4, 56, spec)
    row = dict(zip(_stage_columns(), row_tuple(job, spec, 2), strict=True))
    assert row == {
        "tenant": "acme",
        "job_id": "invoice-42",
        "shard_id": spec.shard_id,
        "kind": "cron",
        "schedule": "0 9 * * MON-FRI",
        "run_at": None,
        "timezone": "Europe/Berlin",
        "handler": None,
        "target": row["target"],
        "payload": '{"n":1}',
        "priority": "high",
        "max_attempts": 5,
        "backoff_base_ms": 10_000,
        "backoff_cap_ms": 600_000,
        "timeout_ms": 300_000,
        "misfire_policy": "skip",
        "misfire_grace_ms": 5,
        "misfire_max_catchup": 7,
        "overlap_policy": "buffer_one",
        "dst_gap": "skip",
        "dst_overlap": "both",
        "status": "paused",
        "next_run_at": 123,
        "version": 3,
        "document": orjson.dumps(spec.stored_document).decode(),
        "intake_partition": 4,
        "intake_offset": 56,
        "expected_version": 2,
        "start_at": 1_801_440_000_000,
        "end_at": 1_803_859_200_000,
        "after_end": "delete",
        "pause_after_dead_runs": 3,
        "max_runs": 12,
        "calendars": ["holidays", "lunch"],
        "jitter_ms": 250,
    }
    assert orjson.loads(row["target"])["url"] == "https://hooks.acme.test/jobs/x"
