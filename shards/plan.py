"""What a claim writes, decided without I/O: misfire and overlap applied to a batch of due jobs.

The leader hands `plan_claims` the wheel's due entries, the database clock's `now` and the
in-flight counts of the jobs whose overlap policy needs them; it gets back the arrays of one
`claim_due` statement: per job the `next_run_at` it expected and the one to advance to, per
occurrence the run row to insert. Nothing here talks to Postgres or Kafka, so every policy is
unit-tested with plain values.

Per due job:

    1. misfire (`tickwheel.schedule.plan_misfire`): which occurrences from the expected
       `next_run_at` up to `now` run, which are skipped (with reason), and the next one. The
       common case — on time, one occurrence due — takes a fast path with the same result and
       one cached `next_after`. A job with jitter (D-287) is late, on time or not due yet by
       the instant each occurrence was due (`due_at`), its runs keyed by the scheduled one;
    2. overlap (`decide_overlap`), for each occurrence to run, oldest first, against the job's
       runs in flight (`runs_in_flight`): run (pending, leased), buffer (pending without a
       lease: see below) or skip (reason "overlap");
    3. a `SkippedSpan` (more misfires than a plan lists) becomes ONE skipped row keyed at the
       span's first occurrence, its reason saying where the span ends (I7 without thousands of
       rows).

Overlap `buffer_one` is realised in the run ledger: the buffered occurrence is inserted as a
`pending` row *without* a publish lease and is not published. The sweeper's `buffered_release`
gives it a lease and publishes it once the job has no other run in flight; until then it counts
as the job's one buffered run, so a further occurrence is skipped.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from tickwheel.clock import format_ms
from tickwheel.domain import AfterEnd, JobKind, OverlapPolicy, RunStatus, job_key
from tickwheel.schedule import (
    REASON_OVERLAP,
    OverlapDecision,
    ScheduleCache,
    decide_overlap,
    in_window,
    jitter_offset,
    plan_misfire,
)

NO_NEXT_MS = 2**63 - 1  # "no next occurrence" where an int is needed (ordering)


@dataclass(slots=True, frozen=True, weakref_slot=True)
class JobRules:
    """How a job's occurrences are planned: what most jobs of a shard share. One object per
    distinct set of rules (`JobEntry.of` interns them), so a loaded job costs its identity,
    version and next instant, not nine fields of its own (docs/journal/hot-second.md, *Hot
    second against the floor and the peers*, memory)."""

    kind: str
    schedule: str | None
    timezone: str
    dst_gap: str
    dst_overlap: str
    misfire_policy: str
    grace_ms: int
    max_catchup: int
    overlap_policy: str
    start_ms: int | None = None  # the active window (cron only; None: unbounded)
    end_ms: int | None = None
    after_end: str | None = None  # 'delete': the job is deleted after the window's last one
    max_runs: int | None = None  # the job completes after this many scheduled runs
    calendars: tuple[str, ...] | None = None  # the tenant's exclusion calendars it names
    jitter_ms: int = 0  # each occurrence runs up to this much later (D-287; 0: none)


# Interned rules, held only while some entry uses them (a reload or an edit lets go of the old).
_RULES: weakref.WeakValueDictionary[tuple[object, ...], JobRules] = weakref.WeakValueDictionary()


@dataclass(slots=True)
class JobEntry:
    """A wheel entry for a job: what planning its occurrences needs (from `horizon_jobs`).

    The job is named by its key alone (`job_key`, the wheel's key too: one string per loaded
    job); `tenant`, `job_id` and `ids` cut it at its first '/', which no tenant name holds."""

    key: str
    version: int
    next_ms: int  # the next_run_at this entry expects (UTC ms)
    rules: JobRules

    @classmethod
    def of(
        cls,
        tenant: str,
        job_id: str,
        version: int,
        next_ms: int,
        kind: str,
        schedule: str | None,
        timezone: str,
        dst_gap: str,
        dst_overlap: str,
        misfire_policy: str,
        grace_ms: int,
        max_catchup: int,
        overlap_policy: str,
        start_ms: int | None = None,
        end_ms: int | None = None,
        after_end: str | None = None,
        max_runs: int | None = None,
        calendars: tuple[str, ...] | None = None,
        jitter_ms: int = 0,
    ) -> JobEntry:
        """An entry whose rules are the interned copy of these."""
        values = (
            kind, schedule, timezone, dst_gap, dst_overlap, misfire_policy, grace_ms,
            max_catchup, overlap_policy, start_ms, end_ms, after_end, max_runs, calendars,
            jitter_ms,
        )  # fmt: skip
        rules = _RULES.get(values)
        if rules is None:
            rules = _RULES[values] = JobRules(*values)
        return cls(job_key(tenant, job_id), version, next_ms, rules)

    @property
    def ids(self) -> tuple[str, str]:
        """(tenant, job id)."""
        tenant, _, job_id = self.key.partition("/")
        return tenant, job_id

    @property
    def tenant(self) -> str:
        return self.key.partition("/")[0]

    @property
    def job_id(self) -> str:
        return self.key.partition("/")[2]

    @property
    def overlap_policy(self) -> str:
        return self.rules.overlap_policy


@dataclass(slots=True, frozen=True)
class RetryEntry:
    """A wheel entry for a retrying run, due at its `retry_ms` (UTC ms). Attempt 0: a trigger
    or backfill run never dispatched yet (its first dispatch applies the overlap policy)."""

    tenant: str
    job_id: str
    scheduled_ms: int
    retry_ms: int
    attempt: int = 1


@dataclass(slots=True)
class FirstDispatch:
    """What the overlap policies make of due attempt-0 runs (`plan_first_dispatch`)."""

    run: list[RetryEntry] = field(default_factory=list)
    hold: list[RetryEntry] = field(default_factory=list)  # buffer_one: the job's buffered run
    skip: list[RetryEntry] = field(default_factory=list)  # recorded skipped, reason overlap


def plan_first_dispatch(
    due: Iterable[RetryEntry],
    policies: dict[tuple[str, str], str],
    in_flight: dict[tuple[str, str], tuple[int, int]],
) -> FirstDispatch:
    """Overlap for due attempt-0 runs, oldest `retry_ms` first, as `plan_claims` decides it
    for scheduled occurrences: `policies` holds the jobs whose policy is not allow, and
    `in_flight[(tenant, job_id)] = (running, buffered)`."""
    plan = FirstDispatch()
    counts = dict(in_flight)
    for entry in sorted(due, key=lambda e: (e.retry_ms, e.scheduled_ms)):
        key = (entry.tenant, entry.job_id)
        policy = policies.get(key, OverlapPolicy.ALLOW)
        if policy == OverlapPolicy.ALLOW:
            plan.run.append(entry)
            continue
        running, buffered = counts.get(key, (0, 0))
        decision = decide_overlap(policy, running, buffered)
        if decision is OverlapDecision.RUN:
            plan.run.append(entry)
            counts[key] = (running + 1, buffered)
        elif decision is OverlapDecision.BUFFER:
            plan.hold.append(entry)
            counts[key] = (running, buffered + 1)
        else:
            plan.skip.append(entry)
    return plan


@dataclass(slots=True)
class ClaimBatch:
    """The parameters of one `claim_due` statement, as parallel arrays."""

    tenants: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    expected_ms: list[int] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the versions the wheel knew
    next_ms: list[int | None] = field(default_factory=list)
    complete: list[bool] = field(default_factory=list)
    run_tenants: list[str] = field(default_factory=list)
    run_job_ids: list[str] = field(default_factory=list)
    run_ms: list[int] = field(default_factory=list)
    run_status: list[str] = field(default_factory=list)
    run_reason: list[str | None] = field(default_factory=list)
    run_leased: list[bool] = field(default_factory=list)
    entries: list[JobEntry] = field(default_factory=list)  # the due entries, in job order
    # Jobs with max_runs: their counted runs after this claim, and the instant the count runs
    # through (exclusive), for the leader to write off the claim (positions.py `counted`).
    counted: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    # Jobs with jitter: (tenant, job_id, scheduled) → the instant the run was due, for each
    # pending run whose offset is not 0 (the envelope's `due`, the dispatch lag).
    due: dict[tuple[str, str, int], int] = field(default_factory=dict)

    def add_run(
        self, ids: tuple[str, str], ms: int, status: str, reason: str | None, leased: bool
    ) -> None:
        self.run_tenants.append(ids[0])
        self.run_job_ids.append(ids[1])
        self.run_ms.append(ms)
        self.run_status.append(status)
        self.run_reason.append(reason)
        self.run_leased.append(leased)

    @property
    def skipped(self) -> int:
        return self.run_status.count(RunStatus.SKIPPED)


def next_fire(cache: ScheduleCache, entry: JobEntry, after_ms: int) -> int | None:
    """The job's first occurrence strictly after `after_ms` (a one-off has none after its own)."""
    rules = entry.rules
    schedule = rules.schedule
    if rules.kind == JobKind.ONCE or schedule is None:
        return None
    if rules.start_ms is None and rules.end_ms is None:
        return cache.next_after(
            schedule, rules.timezone, entry.key, rules.dst_gap, rules.dst_overlap, after_ms
        )
    return in_window(
        lambda t: cache.next_after(
            schedule, rules.timezone, entry.key, rules.dst_gap, rules.dst_overlap, t
        ),
        after_ms,
        rules.start_ms,
        rules.end_ms,
    )


def due_at(cache: ScheduleCache, entry: JobEntry, scheduled_ms: int) -> int:
    """The instant the job's occurrence at `scheduled_ms` is due: delayed by its jitter
    (`tickwheel.schedule.jitter`, D-287), never to its next occurrence. The wheel holds the
    entry at this instant; a job without jitter is due at `scheduled_ms`."""
    jitter = entry.rules.jitter_ms
    if not jitter:
        return scheduled_ms
    following = next_fire(cache, entry, scheduled_ms)
    return scheduled_ms + jitter_offset(entry.key, scheduled_ms, jitter, following)


def deleted_at_end(entry: JobEntry, next_ms: int | None, counted: tuple[int, int] | None) -> bool:
    """Whether a claim (or a load) that left the job with no next occurrence deletes it: its
    active window ended and its `after_end` is 'delete'. A job whose max_runs ran out
    completes instead (`counted`: what the claim counted, `ClaimBatch.counted`)."""
    if next_ms is not None or entry.rules.after_end != AfterEnd.DELETE:
        return False
    return not runs_used_up(entry, counted)


def runs_used_up(entry: JobEntry, counted: tuple[int, int] | None) -> bool:
    """Whether the claim that counted `counted` gave a job with max_runs its last run."""
    limit = entry.rules.max_runs
    return limit is not None and counted is not None and counted[0] >= limit


def _max_runs_reason(max_runs: int) -> str:
    return f"{REASON_MAX_RUNS}: the job's {max_runs} runs are done"


def _cap_runs(
    batch: ClaimBatch, ids: tuple[str, str], max_runs: int, counted: int, since: int,
    first_row: int, expected: int,
) -> None:  # fmt: skip
    """Limited runs, after the overlap policy decided (a run it skips is not counted): the
    job's rows of this claim from `first_row` keep at most the runs left, the rest of a
    catch-up is recorded skipped naming max_runs, and the claim that reaches the last run plans
    no next occurrence. An instant before `since`, where the count starts (a stale position
    brings back instants claimed before the job had max_runs), is not counted. What the count
    becomes goes to `batch.counted`."""
    left = max(0, max_runs - counted)
    pending = 0
    for i in range(first_row, len(batch.run_status)):
        if batch.run_status[i] != RunStatus.PENDING or batch.run_ms[i] < since:
            continue
        if pending < left:
            pending += 1
        else:
            batch.run_status[i] = RunStatus.SKIPPED
            batch.run_reason[i] = _max_runs_reason(max_runs)
            batch.run_leased[i] = False
    if counted + pending >= max_runs:
        batch.next_ms[-1] = None
        batch.complete[-1] = True
    batch.counted[ids] = (counted + pending, max([expected, *batch.run_ms[first_row:]]) + 1)


class Exclusions(Protocol):
    """The tenants' calendars as a claim asks them (`shards.calendars.CalendarBook`)."""

    def reason(self, tenant: str, names: Iterable[str], ms: int) -> str | None: ...


def _exclusions(
    cache: ScheduleCache, entry: JobEntry, names: tuple[str, ...], calendars: Exclusions
) -> Callable[[int], str | None]:
    """Why a calendar the job names excludes its occurrence at a scheduled instant, or None:
    the scheduled instant or, for a jittered job, the instant it would run at (D-286)."""
    tenant = entry.tenant
    if not entry.rules.jitter_ms:
        return lambda ms: calendars.reason(tenant, names, ms)

    def why(ms: int) -> str | None:
        found = calendars.reason(tenant, names, ms)
        if found is None and (due := due_at(cache, entry, ms)) != ms:
            found = calendars.reason(tenant, names, due)
        return found

    return why


def _note_due(batch: ClaimBatch, cache: ScheduleCache, entry: JobEntry, first_row: int) -> None:
    """The due instants of a jittered job's pending runs of this claim (from `first_row`)."""
    ids = entry.ids
    for i in range(first_row, len(batch.run_status)):
        if batch.run_status[i] == RunStatus.PENDING:
            ms = batch.run_ms[i]
            due = due_at(cache, entry, ms)
            if due != ms:
                batch.due[(ids[0], ids[1], ms)] = due


def span_reason(reason: str, end_ms: int) -> str:
    """The skip reason of a span's summary row: the reason and where the span ends."""
    return f"{reason}: every occurrence before {format_ms(end_ms)} skipped"


REASON_MAX_RUNS = "max_runs"


def plan_claims(
    due: Iterable[JobEntry],
    now_ms: int,
    cache: ScheduleCache,
    in_flight: dict[tuple[str, str], tuple[int, int]] | None = None,
    done: dict[tuple[str, str], tuple[int, int]] | None = None,
    calendars: Exclusions | None = None,
) -> ClaimBatch:
    """Plan the claim of `due` at `now_ms`; `in_flight[(tenant, job_id)] = (running, buffered)`;
    `done[(tenant, job_id)] = (runs, since)`: a job with max_runs, its counted runs before this
    claim and the instant its count starts at; `calendars`: what the jobs naming calendars are
    excluded from (shards/calendars.py)."""
    batch = ClaimBatch()
    counts = in_flight or {}
    for entry in due:
        expected = entry.next_ms
        rules = entry.rules
        following = next_fire(cache, entry, expected)
        late = now_ms - expected
        jitter = rules.jitter_ms
        if jitter:  # late from the instant it was due (D-287)
            late -= jitter_offset(entry.key, expected, jitter, following)
        excluding = None
        if rules.calendars is not None and calendars is not None:
            excluding = _exclusions(cache, entry, rules.calendars, calendars)
        if late <= rules.grace_ms and (following is None or following > now_ms):
            run, skipped, next_ms, span = [expected], [], following, None
            if excluding is not None and (why := excluding(expected)) is not None:
                run, skipped = [], [(expected, why)]
        else:
            plan = plan_misfire(
                rules.misfire_policy,
                rules.grace_ms,
                rules.max_catchup,
                expected,
                now_ms,
                partial(next_fire, cache, entry),
                partial(due_at, cache, entry) if jitter else None,
                jitter,
                excluding,
            )
            run, skipped, next_ms, span = (
                plan.run,
                plan.skipped,
                plan.next_run_at,
                plan.skipped_span,
            )
        ids = entry.ids
        batch.entries.append(entry)
        batch.tenants.append(ids[0])
        batch.job_ids.append(ids[1])
        batch.expected_ms.append(expected)
        batch.versions.append(entry.version)
        batch.next_ms.append(next_ms)
        batch.complete.append(next_ms is None)
        first_row = len(batch.run_status)
        if rules.overlap_policy == OverlapPolicy.ALLOW:
            for ms in run:
                batch.add_run(ids, ms, RunStatus.PENDING, None, True)
        else:
            running, buffered = counts.get(ids, (0, 0))
            for ms in run:
                decision = decide_overlap(rules.overlap_policy, running, buffered)
                if decision is OverlapDecision.RUN:
                    batch.add_run(ids, ms, RunStatus.PENDING, None, True)
                    running += 1
                elif decision is OverlapDecision.BUFFER:
                    batch.add_run(ids, ms, RunStatus.PENDING, None, False)
                    buffered += 1
                else:
                    batch.add_run(ids, ms, RunStatus.SKIPPED, REASON_OVERLAP, False)
        for ms, reason in skipped:
            batch.add_run(ids, ms, RunStatus.SKIPPED, reason, False)
        if rules.max_runs is not None:
            counted, since = (done or {}).get(ids, (0, 0))
            _cap_runs(batch, ids, rules.max_runs, counted, since, first_row, expected)
        if jitter:
            _note_due(batch, cache, entry, first_row)
        if span is not None:
            batch.add_run(
                ids,
                span.start_ms,
                RunStatus.SKIPPED,
                span_reason(span.reason, span.end_ms),
                False,
            )
    return batch
