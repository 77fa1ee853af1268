"""A chaos run's options and the plan drawn from them: which fault kind each round injects, in
which phase (during the burst or in the steady load after it) and against which victim. The plan
is a pure function of the options: every kind once per cycle, in an order, phases and victims
drawn from `Options.seed`, so a seed names the same rounds on every machine."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tickwheel.bench.chaos.deployment import REPLICATED, REPLICATED_PORTS, SINGLE, Ports
from tickwheel.bench.chaos.faults import DEFAULT_KINDS
from tickwheel.bench.chaos.workload import BURST_SLEEP_MS
from tickwheel.stack.replicated import ReplicatedPorts

PHASES = ("burst", "steady")
VICTIMS = 6  # the plan draws a victim index below this: fair over two processes or three
DEFAULT_BURST = {SINGLE: 300, REPLICATED: 150}


@dataclass(frozen=True)
class Options:
    rounds: int
    seed: int
    burst: int = 300
    kinds: Sequence[str] = DEFAULT_KINDS[SINGLE]
    root: Path = Path(".devstack-chaos")
    ports: Ports | ReplicatedPorts = field(default_factory=Ports)
    jars_from: Path | None = None
    broken: frozenset[str] = frozenset()  # test-only broken variants (tickwheel/broken.py)
    burst_sleep_ms: int = BURST_SLEEP_MS  # how long each burst run holds its slot
    dispatch_window: int | None = None  # the system's TICKWHEEL_TENANT_DISPATCH_WINDOW

    @property
    def stack(self) -> str:
        return REPLICATED if isinstance(self.ports, ReplicatedPorts) else SINGLE


def default_ports(stack: str) -> Ports | ReplicatedPorts:
    return REPLICATED_PORTS if stack == REPLICATED else Ports()


def default_jars() -> Path | None:
    """The resolved jars of the configured dev stack, reused by the private stack when they
    are current (else the stack resolves them with Maven)."""
    from tickwheel.config import load_settings
    from tickwheel.stack.jars import pom_digest

    jars = load_settings().devstack_dir / "jars"
    stamp = jars / ".pom-digest"
    return jars if stamp.is_file() and stamp.read_text() == pom_digest() else None


def plan(options: Options) -> list[tuple[str, str, int]]:
    """(fault kind, phase, victim index) per round: every kind once per cycle, in a seeded
    order, so `len(kinds)` rounds cover every kind."""
    rng = random.Random(options.seed)
    kinds = list(options.kinds)
    out: list[tuple[str, str, int]] = []
    while len(out) < options.rounds:
        cycle = kinds[:]
        rng.shuffle(cycle)
        out.extend((k, rng.choice(PHASES), rng.randrange(VICTIMS)) for k in cycle)
    return out[: options.rounds]
