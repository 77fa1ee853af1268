"""The chaos round's verdicts: pure functions over one round's ledger (expected occurrences,
`job_runs` rows, the handler's execution log, the faults injected, the envelopes on the run
topics), in the spirit of a Jepsen queue checker. `lost` and `duplicate success` are the
harnesses' one ledger checker's (bench/ledger.py); this module adds what only a round of
faults measures.

Definitions (docs/RELIABILITY.md):
- lost: an occurrence that fell due in the round and has no terminal row (succeeded, dead,
  skipped) once the round has drained (I7).
- duplicate success: a succeeded occurrence executed again after the attempt whose success was
  recorded, or executed twice under that same attempt (the claim fence of I4 failed): the
  system would have told a caller "done" twice. Must be 0.
- duplicate execution rate: executions beyond the first per executed occurrence, over the
  executed occurrences (at-least-once allows some). An execution counts when the handler
  began, so a handler killed mid-run and run again counts as two.
- duplicate completion rate: the same, counting only executions whose handler returned: the
  occurrences whose side effects were done in full more than once. The difference between
  the two rates is the runs interrupted by a crash and run again.
- re-executions by cause: each execution beyond the first of an occurrence is attributed to
  what let its attempt lapse. It is a later attempt than the one before it, and that one ran
  in a worker process that died (kill -9, a crash point, a process that exited on its own) or
  was stopped, or the round restarted Postgres (a lease can lapse while results cannot be
  written). Anything else — the same attempt run twice, or a later attempt while the earlier
  one's process lived on and the database stayed up — is unexplained: the fences or the
  leases failed. Must be 0.
- early: a row published or started before its scheduled instant, both by the database's clock,
  or an envelope on a run topic produced (its Kafka timestamp, the producer's clock on the
  same host) before it (I8). Must be 0.
- failover gap of a fault: over the shards it affects, the longest silence in dispatches (or
  starts, for worker faults) from the last one before the fault until the steady load ends.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tickwheel.bench.ledger import TERMINAL, Execution, RunRow, check

# What may let an attempt lapse so that the next one runs again (see the module docstring).
WORKER_DIED, WORKER_STOPPED, DATABASE_RESTART, UNEXPLAINED = (
    "worker_died",
    "worker_stopped",
    "database_restart",
    "unexplained",
)
CAUSES = (WORKER_DIED, WORKER_STOPPED, DATABASE_RESTART, UNEXPLAINED)
DATABASE_FAULTS = frozenset({"postgres_restart"})
LOST_SAMPLE = 10  # lost run keys listed per round in the report


@dataclass(frozen=True)
class Envelope:
    """A run envelope read back from a run topic: its Kafka timestamp is when it was produced."""

    run_key: str
    scheduled_ms: int
    attempt: int
    produced_ms: int


@dataclass(frozen=True)
class FaultEvent:
    """A fault injected at `at_ms` (unix ms). `shards` None: every shard is affected.
    `measure` is what resumes after it: "dispatch" (published_at) or "start" (started_at)."""

    kind: str
    at_ms: int
    shards: frozenset[int] | None = None
    measure: str = "dispatch"
    until_ms: int | None = None  # the end of the steady load: later pauses are not the fault's


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
    starts: Iterable[Sequence[Execution]], ended: Mapping[int, str], database_restarted: bool
) -> dict[str, int]:
    """Each execution beyond the first of an occurrence (`starts`: its executions that
    began), attributed to a cause (module docstring)."""
    causes = dict.fromkeys(CAUSES, 0)
    for executions in starts:
        ordered = sorted(executions, key=lambda e: e.attempt)
        for earlier, later in itertools.pairwise(ordered):
            if later.attempt <= earlier.attempt:
                cause = UNEXPLAINED  # one attempt executed twice: the claim fence failed
            elif earlier.pid in ended:
                cause = ended[earlier.pid]
            elif database_restarted:
                cause = DATABASE_RESTART
            else:
                cause = UNEXPLAINED
            causes[cause] += 1
    return causes


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
        reexecutions=reexecution_causes(
            per_key.values(),
            ledger.ended,
            any(f.kind in DATABASE_FAULTS for f in ledger.faults),
        ),
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
        "unexplained_reexecutions": causes[UNEXPLAINED],
        "early": sum(r["result"]["early"] for r in rounds),
        "failover_gap_max_s": max(gaps, default=None),
        "failover_gap_max_s_by_fault": dict(sorted(by_kind.items())),
        "detail": list(rounds),
    }
