"""Cost per next-fire computation: raw croniter vs CronSchedule vs ScheduleCache (issue 4).

Two populations of 100,000 jobs, each job with a zone and a `next_run_at`:

  (a) shared — the jobs use 10 expressions in 4 zones (a typical tenant mix);
  (b) hashed — every job has its own `H` expression (5 templates x 20,000 keys): 100,000
      distinct (expression, key) pairs, which resolve to far fewer concrete schedules.

For each population it times, per computation:

  croniter parse+next  `croniter(expr, aware start, hash_id=key).get_next()` — what a leader
                       pays per job without a cache (on a sample of the jobs, see --sample)
  croniter next        `get_next(start_time=…)` on an already-built croniter (sample too)
  schedule next        `CronSchedule.next_after` on an already-parsed schedule, no cache
  cache first          `ScheduleCache.next_after` for every job's first fire, cache empty:
                       includes parsing (the registry's and a new leader's path)
  cache advance        `ScheduleCache.next_after(expected)` for every job, ten rounds: the
                       shard leader's hot path after each fire (window refills included)

Each figure is the best of --repeats runs (the machine is shared).

A third part times sparse schedules in DST zones one call at a time (issue 9): each case is
asked for its next fire from SPARSE_STARTS instants spread over 2026-2100, cold (nothing about
the zone or expression cached) and warm, and the median and worst call are reported in
milliseconds (target: every call under 15 ms).

Writes docs/results/schedule.json and docs/results/schedule.md (--sparse-only:
docs/results/schedule_sparse.json and .md). Run:

    .venv/bin/python -m tickwheel.bench.components.schedule [--jobs 100000] [--sample 20000] \
        [--repeats 3]
    .venv/bin/python -m tickwheel.bench.components.schedule --sparse-only   # the sparse cases
                                                            # alone (~30 s)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from zoneinfo import ZoneInfo

from croniter import croniter

from tickwheel.bench.components import RESULTS
from tickwheel.schedule import CronSchedule, ScheduleCache, parse_at, parse_cron
from tickwheel.schedule.cron import clear_compiled
from tickwheel.schedule.zones import timeline

START_MS = parse_at("2026-03-27T10:00:00Z")  # registration instant, two days before EU DST
ADVANCE_ROUNDS = 10  # fires each job is advanced through in the warm measurement
SPARSE_STARTS = 60  # start instants per sparse case
SPARSE_FROM_MS = parse_at("2026-01-01T00:00:00Z")  # first start instant
SPARSE_SPAN_MS = parse_at("2100-01-01T00:00:00Z") - SPARSE_FROM_MS  # starts spread over this

# Schedules that fire once a year or rarer, in zones with DST: each call may cross many
# offset segments (and their spring gaps) before it finds the next fire.
SPARSE = [
    ("0 0 L 2 MON#5", "Europe/Berlin"),  # last day of February or its fifth Monday (OR)
    ("0 0 29 2 1#5", "Australia/Lord_Howe"),  # 29 February or a fifth Monday of it (OR)
    ("0 0 * 2 MON#5", "Europe/Berlin"),  # a fifth Monday in February: every 28 years or so
    ("30 2 29 2 *", "Europe/Berlin"),  # leap day, fixed hour
    ("0 0 1 1 *", "Pacific/Apia"),  # yearly, east of UTC
]

SHARED = [
    ("0 9 * * MON-FRI", "Europe/Berlin"),
    ("*/5 * * * *", "UTC"),
    ("0 * * * *", "America/New_York"),
    ("30 2 * * *", "Europe/Berlin"),
    ("0 0 1 * *", "UTC"),
    ("15 6,18 * * *", "Australia/Sydney"),
    ("0 0 * * SUN", "America/New_York"),
    ("*/30 * * * * *", "UTC"),
    ("0 8-17 * * 1-5", "Europe/Berlin"),
    ("0 3 L * *", "Australia/Sydney"),
]
HASHED_TEMPLATES = [
    ("H H * * *", "Europe/Berlin"),
    ("H/15 * * * *", "UTC"),
    ("H H(0-6) * * 1-5", "America/New_York"),
    ("H H H * *", "Australia/Sydney"),
    ("H(0-29)/10 H * * *", "Europe/Berlin"),
]


@dataclass(frozen=True, slots=True)
class Job:
    """One job of a population."""

    expr: str
    tz: str
    key: str
    hashed: bool


def shared_jobs(count: int) -> list[Job]:
    """Population (a): `count` jobs over the 10 shared expressions."""
    return [
        Job(SHARED[i % len(SHARED)][0], SHARED[i % len(SHARED)][1], f"acme/job-{i}", False)
        for i in range(count)
    ]


def hashed_jobs(count: int) -> list[Job]:
    """Population (b): `count` jobs, each an H template with its own key."""
    n = len(HASHED_TEMPLATES)
    return [
        Job(
            HASHED_TEMPLATES[i % n][0], HASHED_TEMPLATES[i % n][1], f"tenant-{i % 97}/job-{i}", True
        )
        for i in range(count)
    ]


def timed(body: Callable[[], int]) -> tuple[float, int]:
    """(seconds, computations) of one run of `body`, which returns its computation count."""
    gc.collect()
    started = time.perf_counter()
    computations = body()
    return time.perf_counter() - started, computations


def per_call_us(seconds: float, computations: int) -> float:
    """Microseconds per computation."""
    return round(seconds / computations * 1e6, 3)


def measure(jobs: list[Job], sample_every: int, repeats: int) -> dict[str, object]:
    """All measurements for one population, each the best of `repeats` runs."""
    sample = jobs[::sample_every]
    start_dt = {tz: datetime.fromtimestamp(START_MS / 1000, ZoneInfo(tz)) for _, tz in SHARED}
    start_dt.update(
        {tz: datetime.fromtimestamp(START_MS / 1000, ZoneInfo(tz)) for _, tz in HASHED_TEMPLATES}
    )

    def croniter_parse_next() -> int:
        for job in sample:
            croniter(job.expr, start_dt[job.tz], hash_id=job.key if job.hashed else None).get_next(
                float
            )
        return len(sample)

    built = [
        croniter(job.expr, start_dt[job.tz], hash_id=job.key if job.hashed else None)
        for job in sample
    ]

    def croniter_next() -> int:
        for job, it in zip(sample, built, strict=True):
            it.get_next(float, start_time=start_dt[job.tz])
        return len(sample)

    parsed: list[CronSchedule] = [parse_cron(j.expr, tz=j.tz, key=j.key) for j in sample]

    def schedule_next() -> int:
        for schedule in parsed:
            schedule.next_after(START_MS)
        return len(parsed)

    results: dict[str, object] = {"jobs": len(jobs), "croniter_sample": len(sample)}
    for name, body in [
        ("croniter_parse_next_us", croniter_parse_next),
        ("croniter_next_us", croniter_next),
        ("schedule_next_us", schedule_next),
    ]:
        results[name] = min(per_call_us(*timed(body)) for _ in range(repeats))

    first_us, advance_us = [], []
    for _ in range(repeats):
        clear_compiled()  # every repeat parses cold, as a fresh leader would
        cache = ScheduleCache()
        next_run: list[int | None] = [None] * len(jobs)

        def cache_first(cache: ScheduleCache = cache, next_run: list[int | None] = next_run) -> int:
            for i, job in enumerate(jobs):
                # Registrations arrive spread over an hour, not all at one instant.
                next_run[i] = cache.next_after(
                    job.expr, job.tz, job.key, "shift", "first", START_MS + (i % 3600) * 1000
                )
            return len(jobs)

        def cache_advance(
            cache: ScheduleCache = cache, next_run: list[int | None] = next_run
        ) -> int:
            calls = 0
            for _ in range(ADVANCE_ROUNDS):
                for i, job in enumerate(jobs):
                    expected = next_run[i]
                    if expected is not None:
                        next_run[i] = cache.next_after(
                            job.expr, job.tz, job.key, "shift", "first", expected
                        )
                        calls += 1
            return calls

        first_us.append(per_call_us(*timed(cache_first)))
        after_first = cache.stats()
        seconds, advance_calls = timed(cache_advance)
        advance_us.append(per_call_us(seconds, advance_calls))
    results["cache_first_us"] = min(first_us)
    results["cache_advance_us"] = min(advance_us)
    stats = cache.stats()
    results["distinct_schedules"] = stats.evaluations
    results["parses"] = stats.parses
    results["computations_first"] = after_first.computations
    results["computations_advance"] = stats.computations - after_first.computations
    results["advance_calls"] = advance_calls
    return results


def measure_sparse(repeats: int) -> dict[str, dict[str, float]]:
    """Per-call milliseconds of `next_after` for each sparse case: median and worst start.

    *cold*: a process that has never looked at the zone or the expression (the zone's offset
    table and the compiled fields are dropped before the call); *warm*: the same call again.
    Each start's figure is the best of `repeats` tries, so that a moment of contention on the
    shared machine does not stand in for the code's worst case.
    """
    step = SPARSE_SPAN_MS // SPARSE_STARTS
    starts = [SPARSE_FROM_MS + i * step + (i * 7919 % 86_400) * 1000 for i in range(SPARSE_STARTS)]
    results: dict[str, dict[str, float]] = {}
    for expr, tz in SPARSE:
        cold, warm = [], []
        for start in starts:
            cold_ms = warm_ms = float("inf")
            for _ in range(repeats):
                timeline.cache_clear()
                clear_compiled()
                schedule = parse_cron(expr, tz=tz)
                for runs in ("cold", "warm"):
                    began = time.perf_counter()
                    schedule.next_after(start)
                    elapsed = (time.perf_counter() - began) * 1e3
                    if runs == "cold":
                        cold_ms = min(cold_ms, elapsed)
                    else:
                        warm_ms = min(warm_ms, elapsed)
            cold.append(cold_ms)
            warm.append(warm_ms)
        cold.sort()
        warm.sort()
        results[f"{expr} @ {tz}"] = {
            "cold_median_ms": round(cold[len(cold) // 2], 3),
            "cold_max_ms": round(cold[-1], 3),
            "warm_median_ms": round(warm[len(warm) // 2], 3),
            "warm_max_ms": round(warm[-1], 3),
        }
    return results


def sparse_markdown(sparse: dict[str, dict[str, float]]) -> str:
    """The sparse-schedule table."""
    rows = [
        f"| `{case}` | {r['cold_median_ms']:.2f} | {r['cold_max_ms']:.2f} "
        f"| {r['warm_median_ms']:.2f} | {r['warm_max_ms']:.2f} |"
        for case, r in sparse.items()
    ]
    return (
        f"Sparse schedules, milliseconds per `next_after` ({SPARSE_STARTS} starts over "
        "2026-2100, best of the repeats per start).\n\n"
        "| schedule @ zone | cold median | cold worst | warm median | warm worst |\n"
        "|---|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n"
    )


def markdown(report: dict[str, object]) -> str:
    """The short table for docs/BENCHMARKS.md."""
    rows = []
    scenarios = report["scenarios"]
    assert isinstance(scenarios, dict)
    labels = {
        "shared": f"(a) {scenarios['shared']['jobs']:,} jobs, 10 shared expressions",
        "hashed": f"(b) {scenarios['hashed']['jobs']:,} jobs, distinct H expressions",
    }
    for name, label in labels.items():
        r = scenarios[name]
        raw = r["croniter_parse_next_us"]
        rows.append(
            f"| {label} | {raw:.1f} | {r['croniter_next_us']:.1f} | {r['schedule_next_us']:.2f} "
            f"| {r['cache_first_us']:.2f} | {r['cache_advance_us']:.2f} "
            f"| {raw / r['cache_advance_us']:.0f}x | {r['distinct_schedules']:,} |"
        )
    head = (
        "| population | croniter parse+next | croniter next | CronSchedule.next_after "
        "| cache, first fire | cache, advance | advance vs raw | distinct schedules |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    return (
        "Microseconds per next-fire computation.\n\n"
        + head
        + "\n"
        + "\n".join(rows)
        + "\n\n"
        + f"Python {report['python']}, croniter {report['croniter']}, "
        + f"{report['cpus']} CPUs, {report['date']}.\n"
    )


def _environment(repeats: int) -> dict[str, object]:
    return {
        "python": platform.python_version(),
        "croniter": version("croniter"),
        "cpus": os.cpu_count(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "repeats": repeats,
    }


def main() -> None:
    """Run both populations and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--sample", type=int, default=20_000, help="jobs timed with croniter")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure; the best counts")
    parser.add_argument("--sparse-only", action="store_true", help="time the sparse cases only")
    args = parser.parse_args()
    if args.sparse_only:
        sparse = measure_sparse(args.repeats)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "schedule_sparse.json").write_text(
            json.dumps({**_environment(args.repeats), "sparse": sparse}, indent=2) + "\n"
        )
        table = sparse_markdown(sparse)
        (RESULTS / "schedule_sparse.md").write_text(table)
        print(table)
        return
    sample_every = max(1, args.jobs // args.sample)
    report: dict[str, object] = {
        **_environment(args.repeats),
        "start": "2026-03-27T10:00:00Z",
        "scenarios": {
            "shared": measure(shared_jobs(args.jobs), sample_every, args.repeats),
            "hashed": measure(hashed_jobs(args.jobs), sample_every, args.repeats),
        },
        "sparse": measure_sparse(args.repeats),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "schedule.json").write_text(json.dumps(report, indent=2) + "\n")
    measured = report["sparse"]
    assert isinstance(measured, dict)
    table = markdown(report) + "\n" + sparse_markdown(measured)
    (RESULTS / "schedule.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
