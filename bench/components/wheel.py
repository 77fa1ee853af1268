"""The timing wheel against a heapq timer with lazy cancellation, measured in the same run.

Scenarios (issue 3):
- hot bucket: 200,000 entries due within the same second, then one `advance` over them;
- a shard's ten minutes: 1,000,000 entries over ten minutes, 30 % rescheduled and 10 %
  cancelled before they are due, advanced second by second;
- memory per pending entry, by tracemalloc.
A sweep over (tick_ms, wheel_size) backs the choice of the headline configuration.

Run: `.venv/bin/python -m tickwheel.bench.components.wheel [--quick]`. Writes
docs/results/wheel.json and docs/results/wheel.md. Figures are medians of a few repetitions;
nothing here is asserted.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from tickwheel.bench.components import RESULTS
from tickwheel.wheel import TimingWheel

# 2026-01-01T00:00:00Z plus 137 ms, so that neither seconds nor power-of-two spans line up
# with the start by accident.
T0_MS = 1_767_225_600_137
SECOND_MS = 1_000
HORIZON_MS = 600_000  # a shard leader holds the next ten minutes
HOT_LEAD_MS = 300_000  # the hot second starts five minutes after the load
HEADLINE = (1, 256)  # (tick_ms, wheel_size) of the headline figures; see the sweep
SWEEP = [(1, 64), (1, 256), (1, 1024), (10, 64), (10, 256), (100, 64), (1_000, 64)]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Timer(Protocol):
    """The part of the wheel's contract that the scenarios drive."""

    def schedule(self, key: str, due_ms: int, value: None = None) -> None: ...
    def cancel(self, key: str) -> bool: ...
    def advance(self, now_ms: int) -> list[tuple[str, int, None]]: ...


class HeapTimer(Generic[K, V]):
    """Baseline: a binary heap (C heapq) of (due, serial, key, value) with lazy cancellation.

    A key's live serial sits in a dict; cancel and reschedule only change the dict, and a popped
    heap item whose serial is no longer live is dropped. This is the usual Python timer.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, K, V | None]] = []
        self._live: dict[K, int] = {}
        self._serial = 0

    def schedule(self, key: K, due_ms: int, value: V | None = None) -> None:
        self._serial += 1
        self._live[key] = self._serial
        heapq.heappush(self._heap, (due_ms, self._serial, key, value))

    def cancel(self, key: K) -> bool:
        return self._live.pop(key, None) is not None

    def advance(self, now_ms: int) -> list[tuple[K, int, V | None]]:
        heap = self._heap
        live = self._live
        pop = heapq.heappop
        fired: list[tuple[K, int, V | None]] = []
        while heap and heap[0][0] <= now_ms:
            due, serial, key, value = pop(heap)
            if live.get(key) == serial:
                del live[key]
                fired.append((key, due, value))
        return fired


def wheel_factory(tick_ms: int, wheel_size: int) -> Callable[[], TimingWheel[str, None]]:
    return lambda: TimingWheel[str, None](tick_ms, wheel_size, T0_MS)


def heap_factory() -> Timer:
    return HeapTimer[str, None]()


@dataclass
class HotResult:
    entries: int
    schedule_ms: float  # ms for all schedule calls
    advance_ms: float  # ms for the one advance over the hot second
    schedule_ns_per_entry: float
    advance_ns_per_entry: float
    advance_ms_samples: list[float]  # every repetition, to show the spread behind the median


@dataclass
class ShardResult:
    entries: int
    operations: int  # schedule + reschedule + cancel calls, plus entries fired
    load_s: float  # seconds to schedule the initial ten minutes
    run_s: float  # seconds for the reschedules, cancels and 601 advances
    total_s: float
    ns_per_operation: float
    total_s_samples: list[float]  # every repetition, to show the spread behind the median


@dataclass
class MemoryResult:
    entries: int
    bytes_per_entry: float


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def hot_bucket(make: Callable[[], Timer], n: int, reps: int, seed: int = 1) -> HotResult:
    rng = random.Random(seed)
    hot_start = T0_MS + HOT_LEAD_MS
    keys = [f"tenant-{i % 97}/job-{i:07d}" for i in range(n)]
    dues = [hot_start + rng.randrange(SECOND_MS) for _ in range(n)]
    schedule_s: list[float] = []
    advance_s: list[float] = []
    for _ in range(reps):
        timer = make()
        schedule = timer.schedule
        gc.collect()
        started = time.perf_counter()
        for key, due in zip(keys, dues, strict=True):
            schedule(key, due)
        scheduled = time.perf_counter()
        fired = timer.advance(hot_start + SECOND_MS - 1)
        advanced = time.perf_counter()
        if len(fired) != n:
            raise AssertionError(f"hot bucket fired {len(fired)} of {n}")
        schedule_s.append(scheduled - started)
        advance_s.append(advanced - scheduled)
        del timer, fired
    return HotResult(
        entries=n,
        schedule_ms=median(schedule_s) * 1e3,
        advance_ms=median(advance_s) * 1e3,
        schedule_ns_per_entry=median(schedule_s) / n * 1e9,
        advance_ns_per_entry=median(advance_s) / n * 1e9,
        advance_ms_samples=[sample * 1e3 for sample in advance_s],
    )


@dataclass
class ShardScript:
    """The ten minutes of one shard, generated once and replayed against every timer."""

    keys: list[str]
    dues: list[int]
    # second -> changes applied just before that second's advance: (key, new due or None)
    changes: dict[int, list[tuple[str, int | None]]]
    seconds: int
    operations: int


def shard_script(n: int, seed: int = 2) -> ShardScript:
    rng = random.Random(seed)
    keys = [f"tenant-{i % 97}/job-{i:07d}" for i in range(n)]
    dues = [T0_MS + rng.randrange(1, HORIZON_MS + 1) for _ in range(n)]
    order = list(range(n))
    rng.shuffle(order)
    rescheduled = int(n * 0.30)
    cancelled = int(n * 0.10)
    changes: dict[int, list[tuple[str, int | None]]] = {}
    for rank, i in enumerate(order[: rescheduled + cancelled]):
        # The change lands in a second whose advance comes before the entry is due.
        second = rng.randrange((dues[i] - T0_MS - 1) // SECOND_MS + 1)
        new_due: int | None = None
        if rank < rescheduled:
            new_due = rng.randrange(T0_MS + second * SECOND_MS + 1, T0_MS + HORIZON_MS + 1)
        changes.setdefault(second, []).append((keys[i], new_due))
    seconds = HORIZON_MS // SECOND_MS + 1
    operations = n + rescheduled + cancelled + (n - cancelled)
    return ShardScript(keys, dues, changes, seconds, operations)


def shard_ten_minutes(make: Callable[[], Timer], script: ShardScript, reps: int) -> ShardResult:
    load_s: list[float] = []
    run_s: list[float] = []
    for _ in range(reps):
        timer = make()
        schedule, cancel, advance = timer.schedule, timer.cancel, timer.advance
        changes = script.changes
        fired = 0
        gc.collect()
        started = time.perf_counter()
        for key, due in zip(script.keys, script.dues, strict=True):
            schedule(key, due)
        loaded = time.perf_counter()
        for second in range(script.seconds):
            for key, new_due in changes.get(second, ()):
                if new_due is None:
                    cancel(key)
                else:
                    schedule(key, new_due)
            fired += len(advance(T0_MS + second * SECOND_MS))
        finished = time.perf_counter()
        expected = len(script.keys) - int(len(script.keys) * 0.10)
        if fired != expected:
            raise AssertionError(f"ten minutes fired {fired}, expected {expected}")
        load_s.append(loaded - started)
        run_s.append(finished - loaded)
        del timer
    total = [load + run for load, run in zip(load_s, run_s, strict=True)]
    return ShardResult(
        entries=len(script.keys),
        operations=script.operations,
        load_s=median(load_s),
        run_s=median(run_s),
        total_s=median(total),
        ns_per_operation=median(total) / script.operations * 1e9,
        total_s_samples=total,
    )


def deadline_driven(
    make: Callable[[], TimingWheel[str, None]], script: ShardScript, n: int
) -> float:
    """Seconds to drain n entries of the ten minutes by advancing at every next_deadline_ms.

    This is the other way to drive the wheel (sleep until the next deadline), and the one in
    which level-0 buckets wider than 1 ms are partly due at almost every advance.
    """
    wheel = make()
    for key, due in zip(script.keys[:n], script.dues[:n], strict=True):
        wheel.schedule(key, due)
    gc.collect()
    started = time.perf_counter()
    while (deadline := wheel.next_deadline_ms()) is not None:
        wheel.advance(deadline)
    return time.perf_counter() - started


def memory_per_entry(make: Callable[[], Timer], n: int, seed: int = 3) -> MemoryResult:
    """Bytes the timer allocates per pending entry; keys and due ints belong to the caller."""
    rng = random.Random(seed)
    keys = [f"tenant-{i % 97}/job-{i:07d}" for i in range(n)]
    dues = [T0_MS + rng.randrange(1, HORIZON_MS + 1) for _ in range(n)]
    gc.collect()
    tracemalloc.start()
    try:
        timer = make()
        for key, due in zip(keys, dues, strict=True):
            timer.schedule(key, due)
        current, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del timer
    return MemoryResult(entries=n, bytes_per_entry=current / n)


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }


def markdown(results: dict[str, Any]) -> str:
    hot, shard, mem = results["hot_bucket"], results["ten_minutes"], results["memory"]
    tick_ms, wheel_size = results["headline"]["tick_ms"], results["headline"]["wheel_size"]
    hw, hh = hot["wheel"], hot["heapq"]
    sw, sh = shard["wheel"], shard["heapq"]
    mw, mh = mem["wheel"], mem["heapq"]
    lines = [
        f"Wheel `tick_ms={tick_ms}, wheel_size={wheel_size}`; median of {results['reps']} runs; "
        f"Python {results['machine']['python']}, {results['machine']['cpus']} cores"
        + (" (**--quick**: reduced sizes)" if results["quick"] else "")
        + ".",
        "",
        "| scenario | wheel | heapq (lazy cancel) | heapq / wheel | target |",
        "|---|---:|---:|---:|---|",
        f"| hot bucket: {hw['entries']:,} due in one second, one `advance` "
        f"| {hw['advance_ms']:.1f} ms | {hh['advance_ms']:.1f} ms "
        f"| {hh['advance_ms'] / hw['advance_ms']:.1f}x | ≥ 3x |",
        f"| hot bucket: scheduling them | {hw['schedule_ms']:.1f} ms | {hh['schedule_ms']:.1f} ms "
        f"| {hh['schedule_ms'] / hw['schedule_ms']:.2f}x | |",
        f"| ten minutes: {sw['entries']:,} entries, 30 % moved, 10 % cancelled, 1 s advances "
        f"| {sw['total_s']:.2f} s ({sw['ns_per_operation']:.0f} ns/op) "
        f"| {sh['total_s']:.2f} s ({sh['ns_per_operation']:.0f} ns/op) "
        f"| {sh['total_s'] / sw['total_s']:.2f}x | ≥ 1x |",
        f"| … of which the initial load | {sw['load_s']:.2f} s | {sh['load_s']:.2f} s "
        f"| {sh['load_s'] / sw['load_s']:.2f}x | |",
        f"| … of which changes + advances | {sw['run_s']:.2f} s | {sh['run_s']:.2f} s "
        f"| {sh['run_s'] / sw['run_s']:.2f}x | |",
        f"| memory per pending entry ({mw['entries']:,} pending) "
        f"| {mw['bytes_per_entry']:.0f} B | {mh['bytes_per_entry']:.0f} B "
        f"| | ≤ 250 B |",
        "",
        f"Sweep of the wheel's shape (median of {results['sweep_reps']} runs each). *Deadline "
        f"driven*: {results['deadline_entries']:,} of the ten minutes' entries drained by "
        "advancing at every `next_deadline_ms()`:",
        "",
        "| tick_ms | wheel_size | ten minutes | hot advance | memory/entry | deadline driven |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["sweep"]:
        lines.append(
            f"| {row['tick_ms']} | {row['wheel_size']} | {row['ten_minutes_s']:.2f} s "
            f"| {row['hot_advance_ms']:.1f} ms | {row['bytes_per_entry']:.0f} B "
            f"| {row['deadline_driven_s']:.2f} s |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="reduced sizes, for a smoke run")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    args = parser.parse_args(argv)

    hot_n, shard_n, mem_n, deadline_n, reps, sweep_reps = (
        (20_000, 100_000, 100_000, 30_000, 2, 1)
        if args.quick
        else (200_000, 1_000_000, 1_000_000, 300_000, 5, 3)
    )
    headline = wheel_factory(*HEADLINE)
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus", file=sys.stderr)

    script = shard_script(shard_n)
    results: dict[str, Any] = {
        "quick": args.quick,
        "reps": reps,
        "sweep_reps": sweep_reps,
        "deadline_entries": deadline_n,
        "machine": machine(),
        "headline": {"tick_ms": HEADLINE[0], "wheel_size": HEADLINE[1]},
        "hot_bucket": {},
        "ten_minutes": {},
        "memory": {},
        "sweep": [],
    }
    for name, make in (("wheel", headline), ("heapq", heap_factory)):
        results["hot_bucket"][name] = asdict(hot_bucket(make, hot_n, reps))
        print(f"hot bucket   {name}: {results['hot_bucket'][name]}", file=sys.stderr)
    for name, make in (("wheel", headline), ("heapq", heap_factory)):
        results["ten_minutes"][name] = asdict(shard_ten_minutes(make, script, reps))
        print(f"ten minutes  {name}: {results['ten_minutes'][name]}", file=sys.stderr)
    for name, make in (("wheel", headline), ("heapq", heap_factory)):
        results["memory"][name] = asdict(memory_per_entry(make, mem_n))
        print(f"memory       {name}: {results['memory'][name]}", file=sys.stderr)
    for tick_ms, wheel_size in SWEEP:
        make = wheel_factory(tick_ms, wheel_size)
        row = {
            "tick_ms": tick_ms,
            "wheel_size": wheel_size,
            "ten_minutes_s": shard_ten_minutes(make, script, sweep_reps).total_s,
            "hot_advance_ms": hot_bucket(make, hot_n, sweep_reps).advance_ms,
            "bytes_per_entry": memory_per_entry(make, mem_n).bytes_per_entry,
            "deadline_driven_s": median(
                [deadline_driven(make, script, deadline_n) for _ in range(sweep_reps)]
            ),
        }
        results["sweep"].append(row)
        print(f"sweep        {row}", file=sys.stderr)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "wheel.json").write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(results)
    (args.out / "wheel.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
