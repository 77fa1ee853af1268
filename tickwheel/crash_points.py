"""Named crash points for tests of crash safety (I5): the process dies on the spot, as in a
power cut, when `TICKWHEEL_FAULT` names the point. Unset in production; one env lookup per call.

Points are named `<process>_<after what>` (`scheduler_after_claim`, `worker_after_dlq`,
`intake_after_db`); the faults the chaos harness injects from outside a process are another
thing, in bench/chaos/faults.py.
"""

from __future__ import annotations

import os

FAULT_EXIT_CODE = 86


def crash_point(name: str) -> None:
    """Exit immediately, skipping every cleanup (no flush, no commit), if this point is armed."""
    if os.environ.get("TICKWHEEL_FAULT") == name:
        os._exit(FAULT_EXIT_CODE)


class InjectedFault(RuntimeError):
    """Raised by an armed `fail_point`: an unforeseen exception, as a bug would raise it."""


def fail_point(name: str) -> None:
    """Raise InjectedFault if `TICKWHEEL_FAULT` is `raise:<name>`: a loop's own code failing,
    for tests that a dying part takes its process down (I9)."""
    if os.environ.get("TICKWHEEL_FAULT") == f"raise:{name}":
        raise InjectedFault(f"fault injected at {name}")
