"""The ledger checker of every harness: the occurrences that were due, the `job_runs` rows, and
the handlers' own execution log (handlers.py), compared. Pure functions over plain values.

A harness gives `check` the run keys it expected (`tickwheel.domain.run_key`), the rows of its
tenant and the executions its handlers recorded, and the statuses a row may end in; the verdict
names, by run key:

    missing              due, and no row
    unfinished           a row whose status is not a final one (`final`: `TERMINAL` for the
                         chaos harness, where a dead run is an outcome; `COMPLETE` for the
                         demo, where every dead run is replayed and must succeed)
    unexecuted           succeeded, but the handler never returned for it
    duplicate_successes  succeeded, and executed under a later attempt than the one whose
                         success was recorded: the result's fence (I4) failed, a caller would
                         have been told "done" and the run went on. (The recorded attempt run
                         twice is at-least-once after a worker died with the run in hand, I4:
                         the chaos checker attributes each such re-execution to its cause.)
    completed_twice      the handler returned successfully more than once (at-least-once
                         allows it after a crash between the handler and the result's write)
    unexpected           rows of no expected occurrence

`lost` is missing + unfinished (I7); the chaos harness (chaos/checker.py) adds its rates,
failover gaps and causes, the demo (demo/tour.py) the occurrences its scheduler never reached.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tickwheel.domain import RunStatus, run_key

TERMINAL = frozenset({RunStatus.SUCCEEDED, RunStatus.DEAD, RunStatus.SKIPPED})
COMPLETE = frozenset({RunStatus.SUCCEEDED, RunStatus.SKIPPED})
BEGAN, OK, FAILED = "began", "ok", "failed"  # the events of the execution log (handlers.py)


@dataclass(frozen=True)
class RunRow:
    """One `job_runs` row (query `bench_ledger_runs`); instants in unix ms by the database's
    clock."""

    tenant: str
    job_id: str
    scheduled_ms: int
    status: str
    attempt: int
    shard_id: int = 0
    worker: str | None = None
    published_ms: int | None = None
    started_ms: int | None = None
    epoch: int | None = None  # the epoch that dispatched it last
    created_ms: int | None = None  # when its claim's transaction began
    finished_ms: int | None = None

    @property
    def key(self) -> str:
        return run_key(self.tenant, self.job_id, self.scheduled_ms)


@dataclass(frozen=True)
class Execution:
    """One line of the execution log: an execution began, or returned `ok` or `failed`, in the
    worker process `pid`."""

    run_key: str
    attempt: int
    worker: str
    event: str
    pid: int = 0

    @property
    def began(self) -> bool:
        return self.event == BEGAN

    @property
    def returned(self) -> bool:
        return self.event != BEGAN


def parse_executions(lines: Iterable[str], tenant: str | None = None) -> list[Execution]:
    """The well-formed lines (of `tenant`'s runs only, if given); a torn or foreign line is
    skipped."""
    prefix = None if tenant is None else f"{tenant}/"
    found = []
    for line in lines:
        parts = line.split(" ")
        if (
            len(parts) == 5
            and parts[0] in (BEGAN, OK, FAILED)
            and (prefix is None or parts[1].startswith(prefix))
            and parts[2].isdigit()
            and parts[4].isdigit()
        ):
            found.append(Execution(parts[1], int(parts[2]), parts[3], parts[0], int(parts[4])))
    return found


def read_executions(path: Path, tenant: str | None = None) -> list[Execution]:
    """`parse_executions` of the log at `path` (none when it does not exist yet)."""
    if not path.is_file():
        return []
    return parse_executions(path.read_text(errors="replace").splitlines(), tenant)


@dataclass
class Verdict:
    expected: int = 0
    missing: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)  # "<run key> (<status>)"
    unexecuted: list[str] = field(default_factory=list)
    duplicate_successes: list[str] = field(default_factory=list)
    completed_twice: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)  # statuses of the expected rows
    completions: Counter[str] = field(default_factory=Counter)  # successful returns per key

    @property
    def lost(self) -> list[str]:
        """Expected run keys without a row in a final status, sorted."""
        return sorted([*self.missing, *(u.split(" ", 1)[0] for u in self.unfinished)])


def check(
    expected: Iterable[str],
    rows: Sequence[RunRow],
    executions: Sequence[Execution],
    final: frozenset[RunStatus] = TERMINAL,
) -> Verdict:
    """Judge one ledger (see the module docstring)."""
    verdict = Verdict()
    by_key = {row.key: row for row in rows}
    starts: dict[str, list[Execution]] = defaultdict(list)
    for execution in executions:
        if execution.began:
            starts[execution.run_key].append(execution)
        elif execution.event == OK:
            verdict.completions[execution.run_key] += 1
    wanted = set(expected)
    for key in sorted(wanted):
        verdict.expected += 1
        row = by_key.get(key)
        if row is None:
            verdict.missing.append(key)
            continue
        verdict.outcomes[row.status] += 1
        if row.status not in final:
            verdict.unfinished.append(f"{key} ({row.status})")
        elif row.status == RunStatus.SUCCEEDED and verdict.completions[key] == 0:
            verdict.unexecuted.append(key)
    for key, began in sorted(starts.items()):
        row = by_key.get(key)
        if row is None or row.status != RunStatus.SUCCEEDED:
            continue
        if any(e.attempt > row.attempt for e in began):
            verdict.duplicate_successes.append(key)
    verdict.completed_twice = sorted(k for k, n in verdict.completions.items() if n > 1)
    verdict.unexpected = [row.key for row in rows if row.key not in wanted]
    return verdict
