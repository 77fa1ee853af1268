"""What a burst benchmark's rows and topics say: percentiles, throughput, duplicates and losses.

Pure functions over plain values, so the accounting is unit-tested on crafted data
(tests/unit/test_bench_analysis.py) and the harness only gathers the inputs:

- `expected`: the run keys the registered jobs must produce (one per one-off job);
- `rows`: one `RunRecord` per `job_runs` row of the scratch database, its instants in unix ms;
- `deliveries`: how many messages each run key has on the run topics (from the `run_key`
  header), whatever the status of its row;
- `first_append`: per run key, when the broker appended its first message (unix ms; the
  scratch run topics stamp messages on append).

Definitions (docs/BENCHMARKS.md repeats them beside the figures):

- *published*: the broker's append time of the run's first message on its run topic, minus
  T0 (the instant the burst's jobs are due), in seconds; `published_at` of the row when the
  topic gave no time. *recorded*: the row's `published_at` itself, which the worker's claim
  records from the delivery's record timestamp (the append time on the scratch topics).
- *completed*: `finished_at` of a succeeded row, minus T0.
- A run not published (not completed) when the benchmark stopped counts as infinitely late:
  percentiles are over all expected runs, so a missing 2 % shows as an infinite p99, never as
  a better one.
- *duplicates*: messages on the run topics beyond the first per run key, plus messages and
  rows of run keys nobody expected (a one-off job runs once). Strict on purpose: a re-publish
  the workers would have skipped still counts.
- *lost*: expected run keys that have no row, or no message on the run topics.
- *reattempted*: rows with `attempt > 1` (a worker's lease lapsed, or a retry).
- *claimed per second*: expected runs / (last claim - T0); a claim is the row's `created_at`,
  the start of the claim transaction that inserted it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tickwheel.domain import RunStatus

MS_PER_S = 1000.0


@dataclass(frozen=True)
class RunRecord:
    """One `job_runs` row, instants as unix milliseconds (None: not reached)."""

    run_key: str
    scheduled_ms: int
    claimed_ms: int
    published_ms: int | None
    started_ms: int | None
    finished_ms: int | None
    status: str
    attempt: int


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (the smallest value with at least `pct` % at or below it).

    `values` must be sorted. Nearest rank, not interpolation: p100 is the maximum, and a
    percentile is always a value that some run really had.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < pct <= 100:
        raise ValueError("pct must be in (0, 100]")
    rank = math.ceil(pct / 100 * len(values))
    return values[rank - 1]


@dataclass(frozen=True)
class Spread:
    """Percentiles (seconds) over every expected run; inf where runs are missing."""

    count: int  # runs that reached the instant
    p50_s: float
    p99_s: float
    max_s: float

    @classmethod
    def of(cls, reached_s: Iterable[float], expected: int) -> Spread:
        values = sorted(reached_s)
        count = len(values)
        values.extend([math.inf] * max(0, expected - count))
        if not values:
            return cls(0, math.inf, math.inf, math.inf)
        return cls(count, percentile(values, 50), percentile(values, 99), values[-1])


@dataclass(frozen=True)
class BurstSummary:
    jobs: int
    rows: int
    claimed: Spread
    published: Spread
    recorded: Spread  # rows' published_at
    started: Spread
    completed: Spread
    claimed_per_s: float
    published_per_s: float
    throughput_per_s: float  # completed runs per second, from T0 to the last completion
    duplicates: int
    duplicate_messages: int
    unexpected_rows: int
    lost: int
    lost_keys_sample: list[str] = field(default_factory=list)
    reattempted: int = 0
    not_completed: int = 0
    statuses: dict[str, int] = field(default_factory=dict)


def _rate(count: int, span_ms: float) -> float:
    return count / (span_ms / MS_PER_S) if span_ms > 0 else math.inf


def published_instants(
    rows: Sequence[RunRecord], first_append: Mapping[str, int]
) -> list[int | None]:
    """Each row's publish instant: its first broker append, else its `published_at`."""
    return [first_append.get(r.run_key, r.published_ms) for r in rows]


def summarize(
    expected: Collection[str],
    rows: Sequence[RunRecord],
    deliveries: Mapping[str, int],
    t0_ms: int,
    first_append: Mapping[str, int] | None = None,
) -> BurstSummary:
    """The burst's figures relative to T0 (see the module docstring for each definition)."""
    wanted = set(expected)
    mine = [r for r in rows if r.run_key in wanted]
    unexpected_rows = len(rows) - len(mine)

    def since_t0(values: Iterable[int | None]) -> list[float]:
        return [(v - t0_ms) / MS_PER_S for v in values if v is not None]

    succeeded = [r for r in mine if r.status == RunStatus.SUCCEEDED]
    claimed = Spread.of(since_t0(r.claimed_ms for r in mine), len(wanted))
    publish_ms = published_instants(mine, first_append or {})
    published = Spread.of(since_t0(publish_ms), len(wanted))
    recorded = Spread.of(since_t0(r.published_ms for r in mine), len(wanted))
    started = Spread.of(since_t0(r.started_ms for r in mine), len(wanted))
    completed = Spread.of(since_t0(r.finished_ms for r in succeeded), len(wanted))

    duplicate_messages = sum(
        count - 1 if key in wanted else count for key, count in deliveries.items() if count > 0
    )
    delivered = {key for key, count in deliveries.items() if count > 0}
    row_keys = {r.run_key for r in mine}
    missing = sorted(wanted - (row_keys & delivered))

    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r.status] = statuses.get(r.status, 0) + 1

    def rate_to_last(spread: Spread) -> float:
        return _rate(spread.count, spread.max_s * MS_PER_S) if spread.count == len(wanted) else 0.0

    last_claim_ms = max((r.claimed_ms for r in mine), default=t0_ms) - t0_ms
    last_pub_ms = max((p or t0_ms for p in publish_ms), default=t0_ms) - t0_ms
    last_done_ms = max((r.finished_ms or t0_ms for r in succeeded), default=t0_ms) - t0_ms
    return BurstSummary(
        jobs=len(wanted),
        rows=len(rows),
        claimed=claimed,
        published=published,
        recorded=recorded,
        started=started,
        completed=completed,
        claimed_per_s=_rate(len(mine), last_claim_ms) if mine else 0.0,
        published_per_s=_rate(published.count, last_pub_ms) if published.count else 0.0,
        throughput_per_s=_rate(len(succeeded), last_done_ms) if succeeded else 0.0,
        duplicates=duplicate_messages + unexpected_rows,
        duplicate_messages=duplicate_messages,
        unexpected_rows=unexpected_rows,
        lost=len(missing),
        lost_keys_sample=missing[:5],
        reattempted=sum(1 for r in mine if r.attempt > 1),
        not_completed=len(wanted) - len(succeeded),
        statuses=statuses,
    )


@dataclass(frozen=True)
class Lateness:
    """Steady load: instants minus each run's own scheduled instant, seconds."""

    runs: int
    claimed: Spread
    published: Spread
    started: Spread
    published_p999_s: float
    started_p999_s: float
    # When in the run the lateness was: one slice per SLICE_S seconds of scheduled instants.
    slices: list[LateSlice] = field(default_factory=list)


SLICE_S = 10


@dataclass(frozen=True)
class LateSlice:
    """The runs scheduled in one slice of a steady run, from `start_ms` (unix ms) for SLICE_S
    seconds: how many, and their claim and publish lateness (seconds; inf: one never was)."""

    start_ms: int
    runs: int
    claim_max_s: float
    publish_p99_s: float
    publish_max_s: float


def late_slices(
    scheduled_ms: Sequence[int], claim_s: Sequence[float], publish_s: Sequence[float | None]
) -> list[LateSlice]:
    """Runs grouped by the SLICE_S-second slice of their scheduled instant (from the first),
    with each slice's lateness: where a tail sits in time, to set beside the logs."""
    if not scheduled_ms:
        return []
    first = min(scheduled_ms)
    width = int(SLICE_S * MS_PER_S)
    groups: dict[int, tuple[list[float], list[float]]] = {}
    for at, claim, pub in zip(scheduled_ms, claim_s, publish_s, strict=True):
        claims, pubs = groups.setdefault((at - first) // width, ([], []))
        claims.append(claim)
        pubs.append(math.inf if pub is None else pub)
    slices = []
    for index in sorted(groups):
        claims, pubs = groups[index]
        pubs.sort()
        slices.append(
            LateSlice(first + index * width, len(pubs), max(claims), percentile(pubs, 99), pubs[-1])
        )
    return slices


def lateness(
    expected: Collection[str],
    rows: Sequence[RunRecord],
    first_append: Mapping[str, int] | None = None,
) -> Lateness:
    wanted = set(expected)
    mine = [r for r in rows if r.run_key in wanted]
    publish_ms = published_instants(mine, first_append or {})
    pub_or_none = [
        (p - r.scheduled_ms) / MS_PER_S if p else None
        for r, p in zip(mine, publish_ms, strict=True)
    ]
    pub = [v for v in pub_or_none if v is not None]
    start = [(r.started_ms - r.scheduled_ms) / MS_PER_S for r in mine if r.started_ms]
    claim = [(r.claimed_ms - r.scheduled_ms) / MS_PER_S for r in mine]
    published = Spread.of(pub, len(wanted))
    started = Spread.of(start, len(wanted))

    def p999(values: list[float]) -> float:
        padded = sorted(values) + [math.inf] * (len(wanted) - len(values))
        return percentile(padded, 99.9) if padded else math.inf

    slices = late_slices([r.scheduled_ms for r in mine], claim, pub_or_none)
    return Lateness(
        len(wanted),
        Spread.of(claim, len(wanted)),
        published,
        started,
        p999(pub),
        p999(start),
        slices,
    )


def cumulative(instants_ms: Iterable[int | None], origin_ms: int) -> tuple[list[float], list[int]]:
    """A step curve for plots: seconds since `origin_ms` and how many instants had passed."""
    xs = sorted((v - origin_ms) / MS_PER_S for v in instants_ms if v is not None)
    return xs, list(range(1, len(xs) + 1))


def finite(value: float) -> float | None:
    """JSON has no infinity: an unreached percentile is written as null."""
    return None if math.isinf(value) else round(value, 3)


@dataclass(frozen=True)
class TenantFigures:
    """One tenant's runs of a burst: claims, publishes (the leader's produce instant the
    worker recorded), starts and completions since T0, starts since each run's own due instant
    (seconds). Where a tenant's runs waited shows between them: in the scheduler (claimed),
    on the topics (published → started)."""

    runs: int
    started: Spread
    start_lateness: Spread
    completed: Spread
    claimed: Spread | None = None
    published: Spread | None = None


def tenant_of(run_key: str) -> str:
    """The tenant a run key opens with (`<tenant>/<job_id>@<ms>`)."""
    return run_key.split("/", 1)[0]


def by_tenant(
    expected: Collection[str], rows: Sequence[RunRecord], t0_ms: int
) -> dict[str, TenantFigures]:
    """`TenantFigures` per tenant of the expected run keys."""
    wanted: dict[str, set[str]] = {}
    for key in expected:
        wanted.setdefault(tenant_of(key), set()).add(key)
    figures = {}
    for tenant, keys in wanted.items():
        mine = [r for r in rows if r.run_key in keys]
        done = [r.finished_ms for r in mine if r.status == RunStatus.SUCCEEDED and r.finished_ms]
        figures[tenant] = TenantFigures(
            runs=len(keys),
            started=Spread.of(
                [(r.started_ms - t0_ms) / MS_PER_S for r in mine if r.started_ms], len(keys)
            ),
            start_lateness=Spread.of(
                [(r.started_ms - r.scheduled_ms) / MS_PER_S for r in mine if r.started_ms],
                len(keys),
            ),
            completed=Spread.of([(ms - t0_ms) / MS_PER_S for ms in done], len(keys)),
            claimed=Spread.of([(r.claimed_ms - t0_ms) / MS_PER_S for r in mine], len(keys)),
            published=Spread.of(
                [(r.published_ms - t0_ms) / MS_PER_S for r in mine if r.published_ms],
                len(keys),
            ),
        )
    return figures
