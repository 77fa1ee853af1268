"""What a registry operation does to a job: a pure function of the stored job and the operation.

Job statuses and the operations that move them (anything else leaves the job unchanged):

    (none) ──upsert──► active ──pause──► paused ──resume──► active
    active|paused ──delete──► deleted ──upsert──► active (re-created)
    active (one-off, fired) ──[shard leader]──► completed ──upsert with a changed doc──► active

`trigger` and `backfill` change no job: on an active or paused job they are `triggered` /
`backfilled` and the store then writes their runs (on_demand.py); on a completed one-off they
are a `conflict`, on a deleted or unknown job `not_found`.

Every change bumps `version` by one, or sets it to the operation's explicit `version`, which
must then be newer than the stored one (an older or equal one is `stale`: a no-op). A Kafka
registration carries its source position (partition, offset); a message at or below the
position last applied to the job is a `replay` (a redelivery after a crash) and changes nothing,
so the intake applies nothing twice in effect.

HTTP and Kafka share this function; the store (store.py) loads the jobs of a batch, folds the
batch's operations through it in order, and writes each changed job once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tickwheel.domain import AfterEnd, JobStatus, RegistrationOp
from tickwheel.registry_api.document import JobSpec
from tickwheel.registry_api.on_demand import BackfillRequest, TriggerRequest


class Outcome(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    STALE = "stale"  # explicit version not newer than the stored one
    REPLAY = "replay"  # source position already applied
    NOT_FOUND = "not_found"
    DELETED = "deleted"
    PAUSED = "paused"
    RESUMED = "resumed"
    CONFLICT = "conflict"  # e.g. pausing a completed one-off
    TRIGGERED = "triggered"  # the store starts (or finds) the triggered run
    BACKFILLED = "backfilled"  # the store creates the backfill's runs
    REFUSED = "refused"  # the store refused a backfill's range (Applied.problem says why)

    @property
    def changed(self) -> bool:
        return self in CHANGING


# The outcomes that changed the job, in a stable order (metrics export one counter each).
CHANGING = (Outcome.CREATED, Outcome.UPDATED, Outcome.DELETED, Outcome.PAUSED, Outcome.RESUMED)


@dataclass(frozen=True)
class StoredJob:
    """The registry-relevant part of a `jobs` row. Times are UTC integer milliseconds."""

    tenant: str
    job_id: str
    document: dict[str, Any]
    status: str
    version: int
    next_run_at: int | None
    intake_partition: int | None = None
    intake_offset: int | None = None
    spec: JobSpec | None = None  # set when the document was validated in this batch


@dataclass(frozen=True)
class Op:
    kind: str  # a RegistrationOp: upsert | delete | pause | resume | trigger | backfill
    tenant: str
    job_id: str
    spec: JobSpec | None = None  # the validated document, for upsert
    version: int | None = None
    source: tuple[int, int] | None = None  # (partition, offset) of a Kafka registration
    request: TriggerRequest | BackfillRequest | None = None  # trigger | backfill
    note: tuple[str, str] | None = None  # pause: (who, why), kept beside the paused version

    @property
    def key(self) -> tuple[str, str]:
        return (self.tenant, self.job_id)


ON_DEMAND: dict[str, Outcome] = {
    RegistrationOp.TRIGGER: Outcome.TRIGGERED,
    RegistrationOp.BACKFILL: Outcome.BACKFILLED,
}


def _is_replay(current: StoredJob | None, op: Op) -> bool:
    if op.source is None or current is None or current.intake_offset is None:
        return False
    partition, offset = op.source
    return current.intake_partition == partition and offset <= current.intake_offset


# What decides when a job fires, but for its window (start_at, end_at), which only bounds it.
TIMING_FIELDS = ("schedule", "at", "timezone", "dst")


def _same_timing(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return all(old.get(name) == new.get(name) for name in TIMING_FIELDS)


def _next_version(current: StoredJob | None, op: Op) -> int:
    if op.version is not None:
        return op.version
    return 1 if current is None else current.version + 1


def _changed(current: StoredJob, op: Op, **fields: Any) -> StoredJob:
    values: dict[str, Any] = {
        "tenant": current.tenant,
        "job_id": current.job_id,
        "document": current.document,
        "status": current.status,
        "version": _next_version(current, op),
        "next_run_at": current.next_run_at,
        "intake_partition": current.intake_partition,
        "intake_offset": current.intake_offset,
        "spec": current.spec,
    }
    if op.source is not None:
        values["intake_partition"], values["intake_offset"] = op.source
    values.update(fields)
    # Built directly: dataclasses.replace costs several times more on the intake's hot path.
    return StoredJob(**values)


def apply(
    current: StoredJob | None, op: Op, now_ms: int, resume_from: Any = None
) -> tuple[StoredJob | None, Outcome]:
    """The job after `op`, and what happened. `current` None: no such row.

    `resume_from(stored) -> JobSpec` rebuilds the spec of a stored job; resume needs it to
    compute the next fire time after now (a paused period is not caught up).
    """
    if _is_replay(current, op):
        return current, Outcome.REPLAY
    if op.version is not None and current is not None and op.version <= current.version:
        return current, Outcome.STALE
    live = current is not None and current.status != JobStatus.DELETED

    if op.kind == RegistrationOp.UPSERT:
        assert op.spec is not None, "an upsert carries its validated spec"
        document = op.spec.stored_document
        if current is not None and live and current.document == document and op.version is None:
            return current, Outcome.UNCHANGED
        first = op.spec.first_run_at(now_ms)
        if current is None or not live:
            # Built directly (the intake's hot path creates thousands per batch).
            partition, offset = op.source if op.source is not None else (None, None)
            if current is not None and op.source is None:
                partition, offset = current.intake_partition, current.intake_offset
            created = StoredJob(
                op.tenant,
                op.job_id,
                document,
                JobStatus.ACTIVE if first is not None else JobStatus.COMPLETED,
                _next_version(current, op),
                first,
                partition,
                offset,
                op.spec,
            )
            return created, Outcome.CREATED
        pending = current.next_run_at
        if pending is not None and _same_timing(current.document, document):
            # Only payload, handler, policies or the window changed: keep the pending
            # occurrence (it may be due right now; recomputing from now could skip it) while
            # the window still holds it; a window that opens earlier may bring an earlier one.
            start, end = op.spec.window_ms
            inside = (start is None or pending >= start) and (end is None or pending <= end)
            if inside and (first is None or pending < first):
                first = pending
        status = current.status
        if status == JobStatus.COMPLETED or (status == JobStatus.ACTIVE and first is None):
            status = JobStatus.ACTIVE if first is not None else JobStatus.COMPLETED
        return _changed(
            current, op, document=document, spec=op.spec, next_run_at=first, status=status
        ), Outcome.UPDATED

    if not live:
        return current, Outcome.NOT_FOUND
    assert current is not None

    if op.kind in ON_DEMAND:
        if current.status == JobStatus.COMPLETED:
            return current, Outcome.CONFLICT
        return current, ON_DEMAND[op.kind]
    if op.kind == RegistrationOp.DELETE:
        return _changed(current, op, status=JobStatus.DELETED, next_run_at=None), Outcome.DELETED
    if op.kind == RegistrationOp.PAUSE:
        if current.status == JobStatus.PAUSED:
            return current, Outcome.UNCHANGED
        if current.status != JobStatus.ACTIVE:
            return current, Outcome.CONFLICT
        return _changed(current, op, status=JobStatus.PAUSED), Outcome.PAUSED
    if op.kind == RegistrationOp.RESUME:
        if current.status == JobStatus.ACTIVE:
            return current, Outcome.UNCHANGED
        if current.status != JobStatus.PAUSED:
            return current, Outcome.CONFLICT
        spec: JobSpec = current.spec or resume_from(current)
        if spec.document.at is not None:
            next_run = spec.first_run_at(now_ms)  # a one-off keeps its instant (misfire decides)
        else:
            next_run = spec.next_fire_after(now_ms)
        status = JobStatus.ACTIVE
        if next_run is None:  # its active window ended while it was paused
            ends = spec.document.after_end == AfterEnd.DELETE
            status = JobStatus.DELETED if ends else JobStatus.COMPLETED
        return _changed(
            current, op, status=status, next_run_at=next_run, spec=spec
        ), Outcome.RESUMED
    raise ValueError(f"unknown operation {op.kind!r}")
