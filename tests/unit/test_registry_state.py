"""The registry's job state machine: versions, replays, pause/resume/delete, and timing kept."""

from __future__ import annotations

import pytest

from tickwheel.registry_api.document import Limits, parse_document, validate_job
from tickwheel.registry_api.state import Op, Outcome, StoredJob, apply

pytestmark = pytest.mark.unit

NOW = 1_800_000_000_000  # 2027-01-15T08:00:00Z
T = "acme"


def _spec(job_id: str = "j", **fields: object) -> object:
    doc = {"id": job_id, "schedule": "*/5 * * * *", "handler": "h.run", **fields}
    return validate_job(T, parse_document(doc), Limits(), NOW)


def _create(**fields: object) -> StoredJob:
    job, outcome = apply(None, Op("upsert", T, "j", spec=_spec(**fields)), NOW)  # type: ignore[arg-type]
    assert outcome is Outcome.CREATED and job is not None
    return job


def test_create_sets_version_one_and_first_fire() -> None:
    """a new job is active, version 1, next_run_at the first fire after now"""
    job = _create()
    assert (job.status, job.version) == ("active", 1)
    assert job.next_run_at == NOW + 5 * 60_000  # NOW is on a 5-minute boundary


def test_same_document_is_unchanged_and_changed_bumps_version() -> None:
    """re-upserting the same document is a no-op; a changed one bumps the version"""
    job = _create()
    same, outcome = apply(job, Op("upsert", T, "j", spec=_spec()), NOW + 1)  # type: ignore[arg-type]
    assert outcome is Outcome.UNCHANGED and same is job
    changed, outcome = apply(job, Op("upsert", T, "j", spec=_spec(priority="high")), NOW + 1)  # type: ignore[arg-type]
    assert outcome is Outcome.UPDATED and changed is not None and changed.version == 2


def test_change_without_timing_change_keeps_the_pending_occurrence() -> None:
    """editing the payload keeps next_run_at, even when that occurrence is due right now"""
    job = _create()
    assert job.next_run_at is not None
    due_now = job.next_run_at + 10
    edited, _ = apply(job, Op("upsert", T, "j", spec=_spec(payload={"n": 2})), due_now)  # type: ignore[arg-type]
    assert edited is not None and edited.next_run_at == job.next_run_at
    moved, _ = apply(job, Op("upsert", T, "j", spec=_spec(schedule="0 * * * *")), due_now)  # type: ignore[arg-type]
    assert moved is not None and moved.next_run_at != job.next_run_at


def test_explicit_versions_make_older_updates_stale() -> None:
    """an explicit version must be newer than the stored one, else the op is a no-op"""
    job, _ = apply(None, Op("upsert", T, "j", spec=_spec(), version=5), NOW)  # type: ignore[arg-type]
    assert job is not None and job.version == 5
    for older in (4, 5):
        same, outcome = apply(
            job,
            Op(
                "upsert",
                T,
                "j",
                spec=_spec(priority="low"),  # type: ignore[arg-type]
                version=older,
            ),
            NOW,
        )
        assert outcome is Outcome.STALE and same is job
    newer, outcome = apply(job, Op("pause", T, "j", version=9), NOW)
    assert outcome is Outcome.PAUSED and newer is not None and newer.version == 9


def test_replayed_source_position_is_a_no_op() -> None:
    """a message at or below the last applied (partition, offset) changes nothing"""
    job, _ = apply(None, Op("upsert", T, "j", spec=_spec(), source=(1, 40)), NOW)  # type: ignore[arg-type]
    assert job is not None and (job.intake_partition, job.intake_offset) == (1, 40)
    for offset in (39, 40):
        again, outcome = apply(job, Op("pause", T, "j", source=(1, offset)), NOW)
        assert outcome is Outcome.REPLAY and again is job
    later, outcome = apply(job, Op("pause", T, "j", source=(1, 41)), NOW)
    assert outcome is Outcome.PAUSED and later is not None and later.intake_offset == 41


def test_pause_resume_delete_lifecycle() -> None:
    """pause and resume are idempotent; resume computes the next fire from now; delete hides"""
    job = _create()
    paused, outcome = apply(job, Op("pause", T, "j"), NOW)
    assert outcome is Outcome.PAUSED and paused is not None
    again, outcome = apply(paused, Op("pause", T, "j"), NOW)
    assert outcome is Outcome.UNCHANGED and again is paused
    week_later = NOW + 7 * 24 * 3600 * 1000 + 1
    resumed, outcome = apply(paused, Op("resume", T, "j"), week_later)
    assert outcome is Outcome.RESUMED and resumed is not None
    assert resumed.next_run_at is not None and resumed.next_run_at > week_later  # no catch-up
    deleted, outcome = apply(resumed, Op("delete", T, "j"), week_later)
    assert outcome is Outcome.DELETED and deleted is not None
    assert (deleted.status, deleted.next_run_at) == ("deleted", None)
    for kind in ("pause", "resume", "delete"):
        _, outcome = apply(deleted, Op(kind, T, "j"), week_later)
        assert outcome is Outcome.NOT_FOUND
    recreated, outcome = apply(deleted, Op("upsert", T, "j", spec=_spec()), week_later)  # type: ignore[arg-type]
    assert outcome is Outcome.CREATED and recreated is not None
    assert recreated.status == "active" and recreated.version == deleted.version + 1


def test_ops_on_missing_job_are_not_found() -> None:
    """pause, resume and delete of a job that does not exist report not_found"""
    for kind in ("pause", "resume", "delete"):
        assert apply(None, Op(kind, T, "nope"), NOW) == (None, Outcome.NOT_FOUND)


def test_completed_one_off_cannot_be_paused_but_can_be_rescheduled() -> None:
    """a completed one-off conflicts on pause/resume; a new `at` makes it active again"""
    spec = validate_job(
        T,
        parse_document({"id": "o", "at": "2027-01-15T09:00:00Z", "handler": "h.run"}),
        Limits(),
        NOW,
    )
    job, _ = apply(None, Op("upsert", T, "o", spec=spec), NOW)
    assert job is not None and job.next_run_at == NOW + 3_600_000
    done = StoredJob(T, "o", job.document, "completed", job.version, None)
    for kind in ("pause", "resume"):
        assert apply(done, Op(kind, T, "o"), NOW)[1] is Outcome.CONFLICT
    again = validate_job(
        T,
        parse_document({"id": "o", "at": "2027-01-16T09:00:00Z", "handler": "h.run"}),
        Limits(),
        NOW,
    )
    revived, outcome = apply(done, Op("upsert", T, "o", spec=again), NOW)
    assert outcome is Outcome.UPDATED and revived is not None and revived.status == "active"
