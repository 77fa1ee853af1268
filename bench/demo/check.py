"""The demo's ledger check: which occurrences of its jobs were due, and the harnesses' ledger
checker (bench/ledger.py) over them, with `COMPLETE` as the final statuses (after the fix and
the replay nothing may stay dead). Pure, but for `occurrences`'s schedule arithmetic.

The demo adds one way of losing a run to the checker's: an occurrence due well before the
pause that the scheduler never reached (where the job's schedule stands — its `next_run_at`, or
the occurrence after its latest run when the leader claimed past the row, whose position it
writes later in batches, D-269 — is still before it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tickwheel.bench.ledger import COMPLETE, Execution, RunRow, Verdict, check
from tickwheel.domain import run_key


@dataclass(frozen=True)
class Registered:
    """A job as the demo registered it: its document and its first due instant (ms)."""

    doc: dict[str, Any]
    first_ms: int | None


@dataclass
class DemoReport:
    verdict: Verdict
    undispatched: list[str] = field(default_factory=list)  # due well before the pause, unclaimed

    @property
    def lost(self) -> int:
        v = self.verdict
        return len(v.lost) + len(self.undispatched) + len(v.unexecuted)

    @property
    def duplicates(self) -> list[str]:
        """Run keys the handlers executed successfully more than once."""
        return self.verdict.completed_twice


def check_ledger(
    due: dict[str, list[int]],
    undispatched: dict[str, list[int]],
    rows: Sequence[RunRow],
    executions: Sequence[Execution],
    tenant: str,
) -> DemoReport:
    """Compare the due occurrences with the run rows and the handlers' execution log.

    `due`: job id → the instants (ms) the scheduler had to dispatch (it moved past them);
    `undispatched`: instants due well before the pause that it never reached.
    """
    expected = [run_key(tenant, job, ms) for job, instants in due.items() for ms in instants]
    return DemoReport(
        check(expected, rows, executions, COMPLETE),
        [run_key(tenant, job, ms) for job, instants in undispatched.items() for ms in instants],
    )


def occurrences(
    tenant: str, doc: dict[str, Any], first_ms: int, stop_ms: int, shards: int
) -> list[int]:
    """The fire instants of a registered document in [first_ms, stop_ms)."""
    from tickwheel.registry_api.document import Limits, parse_document, validate_job

    if doc.get("at") is not None:
        return [first_ms] if first_ms < stop_ms else []
    spec = validate_job(tenant, parse_document(doc), Limits(shards=shards), first_ms - 1)
    found: list[int] = []
    at: int | None = first_ms
    while at is not None and at < stop_ms:
        found.append(at)
        at = spec.next_fire_after(at)
    return found


def next_after(tenant: str, doc: dict[str, Any], after_ms: int, shards: int) -> int | None:
    """The registered document's first fire instant after `after_ms` (a one-off: none)."""
    from tickwheel.registry_api.document import Limits, parse_document, validate_job

    if doc.get("at") is not None:
        return None
    spec = validate_job(tenant, parse_document(doc), Limits(shards=shards), after_ms)
    return spec.next_fire_after(after_ms)
