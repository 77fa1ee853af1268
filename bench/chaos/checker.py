"""The chaos round's verdicts: pure functions over one round's ledger (expected occurrences,
`job_runs` rows, the handler's execution log, the faults injected, the envelopes on the run
topics), in the spirit of a Jepsen queue checker. `lost` and `duplicate success` are the
harnesses' one ledger checker's (bench/ledger.py); this module adds what only a round of
faults measures.

Definitions (docs/RELIABILITY.md):
- lost: an occurrence that fell due in the round and has no terminal row (succeeded, dead,
  skipped) once the round has drained (I7).
- duplicate success: a succeeded occurrence executed under a later attempt than the one whose
  success was recorded (the result's fence of I4 failed): the system would have told a caller
  "done" and run it again. Must be 0.
- duplicate execution rate: executions beyond the first per executed occurrence, over the
  executed occurrences (at-least-once allows some). An execution counts when the handler
  began, so a handler killed mid-run and run again counts as two.
- duplicate completion rate: the same, counting only executions whose handler returned: the
  occurrences whose side effects were done in full more than once. The difference between
  the two rates is the runs interrupted by a crash and run again.
- re-executions by cause: each execution beyond the first of an occurrence is attributed to
  what let it run again. The execution before it ran in a worker process that died (kill -9,
  a crash point, a process that exited on its own) or was stopped — its run was in hand, so
  its message was delivered again (the same attempt, I4) or its lease lapsed (a later
  attempt) — or the round restarted Postgres (a lease can lapse while results cannot be
  written). Anything else — a run executed again while the process that ran it before lived
  on and the database stayed up — is unexplained: the suspect deliveries' claims, the
  release of revoked partitions, the fences or the leases failed. Must be 0.
- early: a row published or started before its scheduled instant, both by the database's clock,
  or an envelope on a run topic produced (its Kafka timestamp, the producer's clock on the
  same host) before it (I8). Must be 0.
- failover gap of a fault: over the shards it affects, the longest silence in dispatches (or
  starts, for worker faults) from the last one before the fault until the steady load ends.
- unexpected: a row of no occurrence that may exist at all — a deleted or paused job's run
  after the deletion or pause, an occurrence a DST policy excludes, a run of no job of the
  round (I3, DESIGN §6). Must be 0.
- stale claims: a row created by a claim that began more than `STALE_MARGIN_MS` after a newer
  epoch of its shard took over, yet carries the older epoch: a replaced leader's claim
  committed (I2). Takeovers are what the harness saw of `shard_leaders` (epoch, since), which
  may miss an epoch but never invents one, so the verdict can only undercount. Must be 0.
- re-executed beyond held: per worker process that died, the re-executions attributed to it
  beyond the runs it held when it died: those the database showed `running` under its name
  right after, or, for runs it started without a claim (I4), those its execution log shows it
  began and whose result it did not record. At-least-once may run again what a dead worker
  held, nothing more (a run whose result it recorded is never run again). Must be 0.
- offsets ahead (I5): a run whose claimed delivery lay below its consumer group's committed
  offset at an audit instant while the run's result had not been written (it finished later,
  or never). The claimed delivery is the envelope of the run's final attempt whose record
  timestamp the claim recorded as `published_at`; audits are taken only while the group's
  membership is steady (a moved partition is legitimately read again and its skipped copies
  done). Must be 0.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tickwheel.bench.ledger import TERMINAL, Execution, RunRow, check
from tickwheel.domain import RunStatus

# What may let an attempt lapse so that the next one runs again (see the module docstring).
WORKER_DIED, WORKER_STOPPED, DATABASE_RESTART, UNEXPLAINED = (
    "worker_died",
    "worker_stopped",
    "database_restart",
    "unexplained",
)
CAUSES = (WORKER_DIED, WORKER_STOPPED, DATABASE_RESTART, UNEXPLAINED)
DATABASE_FAULTS = frozenset({"postgres_restart", "pg_failover"})
LOST_SAMPLE = 10  # run keys listed per verdict and round in the report
# A claim beginning this long after a takeover's own start and still carrying the older epoch
# cannot have passed the fence: only the instant between the takeover's statement start and
# its row lock lets a claim in legitimately (microseconds), and a loaded machine stretches it.
STALE_MARGIN_MS = 200
# The verdicts that must all be 0 (the exit code of `tickwheel bench chaos`).
VERDICTS = (
    "lost",
    "duplicate_successes",
    "early",
    "unexpected",
    "stale_claims",
    "unexplained_reexecutions",
    "reexecuted_beyond_held",
    "offsets_ahead",
)


@dataclass(frozen=True)
class Envelope:
    """A run envelope read back from a run topic: its Kafka timestamp is when it was produced."""

    run_key: str
    scheduled_ms: int
    attempt: int
    produced_ms: int
    topic: str = ""
    partition: int = -1
    offset: int = -1


@dataclass(frozen=True)
class FaultEvent:
    """A fault injected at `at_ms` (unix ms). `shards` None: every shard is affected.
    `measure` is what resumes after it: "dispatch" (published_at) or "start" (started_at)."""

    kind: str
    at_ms: int
    shards: frozenset[int] | None = None
    measure: str = "dispatch"
    until_ms: int | None = None  # the end of the steady load: later pauses are not the fault's
    # A worker the fault killed: its pid and the runs `running` under its name right after.
    pid: int | None = None
    held: int | None = None


@dataclass(frozen=True)
class Takeover:
    """An epoch of a shard as the harness saw it in `shard_leaders`: `since_ms` is the
    takeover's start by the database's clock."""

    shard: int
    epoch: int
    since_ms: int


@dataclass(frozen=True)
class OffsetAudit:
    """The workers' group's committed offsets, read at `at_ms` (unix ms, after the read)."""

    at_ms: int
    committed: Mapping[tuple[str, int], int]


@dataclass(frozen=True)
class Ledger:
    """Everything the checker reads for one round."""

    expected: frozenset[str]  # run keys of the occurrences that fell due in the round
    rows: Sequence[RunRow]
    executions: Sequence[Execution]
    faults: Sequence[FaultEvent] = ()
    envelopes: Sequence[Envelope] = ()
    # Worker processes that ended during the run, by pid: WORKER_DIED or WORKER_STOPPED.
    ended: Mapping[int, str] = field(default_factory=dict)
    # Every run key that may exist (None: `unexpected` is not judged).
    allowed: frozenset[str] | None = None
    takeovers: Sequence[Takeover] = ()
    offset_audits: Sequence[OffsetAudit] = ()


@dataclass
class RoundResult:
    lost: int
    lost_sample: list[str]
    duplicate_successes: int
    executions: int
    executed_occurrences: int
    duplicate_executions: int
    duplicate_completions: int
    early: int
    early_envelopes: int
    envelopes: int
    lateness_ms: dict[str, int]
    failover_gaps_s: dict[str, float | None] = field(default_factory=dict)
    reexecutions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))
    unexpected: list[str] = field(default_factory=list)
    stale_claims: list[str] = field(default_factory=list)
    # per worker pid that died (and was measured): (re-executions attributed, runs held)
    died_with: dict[int, tuple[int, int]] = field(default_factory=dict)
    offsets_ahead: list[str] = field(default_factory=list)
    offset_audits: int = 0

    @property
    def reexecuted_beyond_held(self) -> int:
        return sum(max(0, again - held) for again, held in self.died_with.values())

    @property
    def duplicate_execution_rate(self) -> float:
        if not self.executed_occurrences:
            return 0.0
        return self.duplicate_executions / self.executed_occurrences

    @property
    def duplicate_completion_rate(self) -> float:
        if not self.executed_occurrences:
            return 0.0
        return self.duplicate_completions / self.executed_occurrences

    def as_dict(self) -> dict[str, Any]:
        return {
            "lost": self.lost,
            "lost_sample": self.lost_sample,
            "duplicate_successes": self.duplicate_successes,
            "executions": self.executions,
            "executed_occurrences": self.executed_occurrences,
            "duplicate_execution_rate": self.duplicate_execution_rate,
            "duplicate_completions": self.duplicate_completions,
            "duplicate_completion_rate": self.duplicate_completion_rate,
            "early": self.early,
            "early_envelopes": self.early_envelopes,
            "envelopes": self.envelopes,
            "lateness_ms": self.lateness_ms,
            "failover_gaps_s": self.failover_gaps_s,
            "reexecutions": self.reexecutions,
            "unexpected": len(self.unexpected),
            "unexpected_sample": self.unexpected[:LOST_SAMPLE],
            "stale_claims": len(self.stale_claims),
            "stale_claims_sample": self.stale_claims[:LOST_SAMPLE],
            "died_with": {str(pid): list(v) for pid, v in self.died_with.items()},
            "reexecuted_beyond_held": self.reexecuted_beyond_held,
            "offsets_ahead": len(self.offsets_ahead),
            "offsets_ahead_sample": self.offsets_ahead[:LOST_SAMPLE],
            "offset_audits": self.offset_audits,
        }


def percentiles(values: Iterable[int]) -> dict[str, int]:
    """p50, p95, p99 and max by the nearest-rank method; zeros for no values."""
    ordered = sorted(values)
    if not ordered:
        return {"p50": 0, "p95": 0, "p99": 0, "max": 0}

    def rank(q: float) -> int:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"p50": rank(0.50), "p95": rank(0.95), "p99": rank(0.99), "max": ordered[-1]}


def failover_gap_s(
    fault: FaultEvent, rows: Sequence[RunRow], envelopes: Sequence[Envelope] = ()
) -> float | None:
    """The longest silence over the fault's shards from their last activity before the fault
    until `until_ms`, seconds; None when no affected shard has activity on both sides.
    Dispatches are the rows' `published_at` (recorded by a worker's claim) and the envelopes'
    produce times (a run never claimed has no `published_at`); starts are the rows'
    `started_at`."""
    shard_of_key = {row.key: row.shard_id for row in rows}
    by_shard: dict[int, list[int]] = defaultdict(list)
    for row in rows:
        instant = row.published_ms if fault.measure == "dispatch" else row.started_ms
        if instant is not None:
            by_shard[row.shard_id].append(instant)
    if fault.measure == "dispatch":
        for env in envelopes:
            shard = shard_of_key.get(env.run_key)
            if shard is not None:
                by_shard[shard].append(env.produced_ms)
    gaps: list[int] = []
    for shard, instants in by_shard.items():
        if fault.shards is not None and shard not in fault.shards:
            continue
        ordered = sorted(set(instants))
        before = [t for t in ordered if t <= fault.at_ms]
        if not before:
            continue
        # From the last activity before the fault on, the longest silence: a service that
        # stops gracefully keeps serving a moment after the fault's instant.
        window = [t for t in ordered if t >= before[-1]]
        if fault.until_ms is not None:
            window = [t for t in window if t <= fault.until_ms]
        gaps.extend(b - a for a, b in itertools.pairwise(window))
    return max(gaps) / 1000 if gaps else None


def reexecution_causes(
    starts: Iterable[Sequence[Execution]],
    ended: Mapping[int, str],
    database_restarted: bool,
    died_from: Counter[int] | None = None,
) -> dict[str, int]:
    """Each execution beyond the first of an occurrence (`starts`: its executions that
    began), attributed to a cause (module docstring). `died_from`, if given, counts the
    `worker_died` ones by the pid of the process the earlier attempt ran in."""
    causes = dict.fromkeys(CAUSES, 0)
    for executions in starts:
        ordered = sorted(executions, key=lambda e: e.attempt)
        for earlier, _ in itertools.pairwise(ordered):
            if earlier.pid in ended:
                cause = ended[earlier.pid]
            elif database_restarted:
                cause = DATABASE_RESTART
            else:
                cause = UNEXPLAINED
            causes[cause] += 1
            if cause == WORKER_DIED and died_from is not None:
                died_from[earlier.pid] += 1
    return causes


def unrecorded_by(
    pid: int, starts: Mapping[str, Sequence[Execution]], rows: Sequence[RunRow]
) -> set[str]:
    """The run keys the worker process `pid` began and whose result it did not record (the
    row's final worker or attempt is another's): the runs it held when it died, started
    without a claim or not."""
    recorded = {row.key: (row.worker, row.attempt) for row in rows}
    return {
        key
        for key, executions in starts.items()
        for e in executions
        if e.pid == pid and recorded.get(key) != (e.worker, e.attempt)
    }


def unexpected_rows(rows: Sequence[RunRow], allowed: frozenset[str]) -> list[str]:
    """Run keys of the rows no occurrence allows, sorted."""
    return sorted(row.key for row in rows if row.key not in allowed)


def stale_claims(rows: Sequence[RunRow], takeovers: Sequence[Takeover]) -> list[str]:
    """Run keys of rows claimed under an epoch after a newer one had taken their shard over
    (module docstring), sorted."""
    newer: dict[int, list[Takeover]] = defaultdict(list)
    for t in takeovers:
        newer[t.shard].append(t)
    found = []
    for row in rows:
        if row.epoch is None or row.created_ms is None:
            continue
        if any(
            t.epoch > row.epoch and row.created_ms > t.since_ms + STALE_MARGIN_MS
            for t in newer.get(row.shard_id, ())
        ):
            found.append(row.key)
    return sorted(found)


def offsets_ahead(
    rows: Sequence[RunRow], envelopes: Sequence[Envelope], audits: Sequence[OffsetAudit]
) -> list[str]:
    """Run keys whose claimed delivery was committed before their result was written (module
    docstring), sorted. Only finished runs with a recorded `published_at` are judged."""
    copies: dict[tuple[str, int], list[Envelope]] = defaultdict(list)
    for env in envelopes:
        copies[(env.run_key, env.attempt)].append(env)
    found = set()
    for row in rows:
        if row.published_ms is None or row.status not in (RunStatus.SUCCEEDED, RunStatus.DEAD):
            continue
        claimed = [
            e
            for e in copies.get((row.key, row.attempt), ())
            if e.produced_ms == row.published_ms and e.offset >= 0
        ]
        if not claimed:
            continue
        for audit in audits:
            written = row.finished_ms is not None and row.finished_ms <= audit.at_ms
            # Every candidate copy passed: a copy still above the committed offset may be the
            # one claimed (two copies can share a millisecond).
            if not written and all(
                e.offset < audit.committed.get((e.topic, e.partition), -1) for e in claimed
            ):
                found.add(row.key)
                break
    return sorted(found)


def check_round(ledger: Ledger) -> RoundResult:
    """Judge one round's ledger."""
    verdict = check(ledger.expected, ledger.rows, ledger.executions, TERMINAL)
    per_key: dict[str, list[Execution]] = defaultdict(list)
    for execution in ledger.executions:
        if execution.began:
            per_key[execution.run_key].append(execution)
    executions = sum(len(starts) for starts in per_key.values())
    early = sum(
        1
        for row in ledger.rows
        if (row.published_ms is not None and row.published_ms < row.scheduled_ms)
        or (row.started_ms is not None and row.started_ms < row.scheduled_ms)
    )
    early_envelopes = sum(1 for e in ledger.envelopes if e.produced_ms < e.scheduled_ms)
    lateness = [
        row.started_ms - row.scheduled_ms
        for row in ledger.rows
        if row.key in ledger.expected and row.status == "succeeded" and row.started_ms is not None
    ]
    gaps: dict[str, float | None] = {}
    for n, fault in enumerate(ledger.faults):
        gaps[f"{n}:{fault.kind}"] = failover_gap_s(fault, ledger.rows, ledger.envelopes)
    lost = verdict.lost
    died_from: Counter[int] = Counter()
    causes = reexecution_causes(
        per_key.values(),
        ledger.ended,
        any(f.kind in DATABASE_FAULTS for f in ledger.faults),
        died_from,
    )
    held = {
        f.pid: max(f.held, len(unrecorded_by(f.pid, per_key, ledger.rows)))
        for f in ledger.faults
        if f.pid is not None and f.held is not None
    }
    return RoundResult(
        lost=len(lost),
        lost_sample=lost[:LOST_SAMPLE],
        duplicate_successes=len(verdict.duplicate_successes),
        executions=executions,
        executed_occurrences=len(per_key),
        duplicate_executions=executions - len(per_key),
        duplicate_completions=sum(n - 1 for n in verdict.completions.values() if n > 1),
        early=early + early_envelopes,
        early_envelopes=early_envelopes,
        envelopes=len(ledger.envelopes),
        lateness_ms=percentiles(lateness),
        failover_gaps_s=gaps,
        reexecutions=causes,
        unexpected=[] if ledger.allowed is None else unexpected_rows(ledger.rows, ledger.allowed),
        stale_claims=stale_claims(ledger.rows, ledger.takeovers),
        died_with={pid: (died_from[pid], n) for pid, n in held.items()},
        offsets_ahead=offsets_ahead(ledger.rows, ledger.envelopes, ledger.offset_audits),
        offset_audits=len(ledger.offset_audits),
    )


def summarize(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The report over every round: each round is {"round", "fault", "phase", "result"}."""
    faults = Counter(r["fault"] for r in rounds)
    executions = sum(r["result"]["executions"] for r in rounds)
    executed = sum(r["result"]["executed_occurrences"] for r in rounds)
    gaps = [
        gap for r in rounds for gap in r["result"]["failover_gaps_s"].values() if gap is not None
    ]
    by_kind: dict[str, float] = {}
    for r in rounds:
        for gap in r["result"]["failover_gaps_s"].values():
            if gap is not None:
                by_kind[r["fault"]] = max(gap, by_kind.get(r["fault"], 0.0))
    causes = {cause: sum(r["result"]["reexecutions"][cause] for r in rounds) for cause in CAUSES}
    lateness: dict[str, dict[str, int]] = {}
    for r in rounds:
        late = r["result"]["lateness_ms"]
        mine = lateness.setdefault(r["fault"], {"p50": 0, "p99": 0, "max": 0})
        for q in mine:  # the worst round of each kind
            mine[q] = max(mine[q], late[q])
    return {
        "rounds": len(rounds),
        "faults": dict(sorted(faults.items())),
        "lost": sum(r["result"]["lost"] for r in rounds),
        "duplicate_successes": sum(r["result"]["duplicate_successes"] for r in rounds),
        "duplicate_execution_rate": (executions - executed) / executed if executed else 0.0,
        "duplicate_completion_rate": (
            sum(r["result"]["duplicate_completions"] for r in rounds) / executed
            if executed
            else 0.0
        ),
        "reexecutions": causes,
        "reexecutions_by_fault": reexecutions_by_fault(rounds),
        "unexplained_reexecutions": causes[UNEXPLAINED],
        "early": sum(r["result"]["early"] for r in rounds),
        "failover_gap_max_s": max(gaps, default=None),
        "failover_gap_max_s_by_fault": dict(sorted(by_kind.items())),
        "lateness_ms_by_fault": dict(sorted(lateness.items())),
        "unexpected": sum(r["result"]["unexpected"] for r in rounds),
        "stale_claims": sum(r["result"]["stale_claims"] for r in rounds),
        "reexecuted_beyond_held": sum(r["result"]["reexecuted_beyond_held"] for r in rounds),
        "offsets_ahead": sum(r["result"]["offsets_ahead"] for r in rounds),
        "offset_audits": sum(r["result"]["offset_audits"] for r in rounds),
        "probe_lost": sum(r.get("probe", {}).get("lost", 0) for r in rounds),
        "probe_longest_ack_s_by_fault": _worst(
            rounds, lambda r: r.get("probe", {}).get("longest_ack_s")
        ),
        "detail": list(rounds),
    }


def reexecutions_by_fault(rounds: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per fault kind, over its rounds: the executed occurrences, the re-executions (executions
    beyond the first of an occurrence) by cause, and their rate over the executed occurrences:
    what each kind of fault costs in runs done again (at-least-once allows some; every one must
    have a cause other than `unexplained`)."""
    kinds: dict[str, dict[str, Any]] = {}
    for r in rounds:
        result = r["result"]
        kind = kinds.setdefault(
            r["fault"], {"executed": 0, "reexecutions": 0, "causes": dict.fromkeys(CAUSES, 0)}
        )
        kind["executed"] += result["executed_occurrences"]
        kind["reexecutions"] += result["executions"] - result["executed_occurrences"]
        for cause in CAUSES:
            kind["causes"][cause] += result["reexecutions"][cause]
    for kind in kinds.values():
        kind["rate"] = kind["reexecutions"] / kind["executed"] if kind["executed"] else 0.0
    return dict(sorted(kinds.items()))


def _worst(
    rounds: Sequence[dict[str, Any]], figure: Callable[[dict[str, Any]], float | None]
) -> dict[str, float]:
    """The largest `figure` of the rounds of each fault kind (rounds without it skipped)."""
    worst: dict[str, float] = {}
    for r in rounds:
        value = figure(r)
        if value is not None:
            worst[r["fault"]] = max(value, worst.get(r["fault"], value))
    return dict(sorted(worst.items()))
