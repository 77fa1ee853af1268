"""What a benchmark shows: progress lines while it runs, then a table, JSON and a plot."""

from __future__ import annotations

import math
import os
import platform
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import click

from tickwheel.bench.analysis import (
    SLICE_S,
    BurstSummary,
    Lateness,
    RunRecord,
    Spread,
    TenantFigures,
    cumulative,
    finite,
    published_instants,
    tenant_of,
)
from tickwheel.clock import format_ms

PLAIN_EVERY_S = 5.0  # without a terminal, a progress line every this many seconds


class Bar:
    """Counters on one status line: redrawn in place on a terminal, else printed now and then."""

    def __init__(self, total: int, *labels: str) -> None:
        self.total = total
        self.labels = labels
        self.values = [0] * len(labels)
        self.tty = sys.stderr.isatty()
        self._printed = 0.0
        self._started = time.monotonic()

    def set(self, done: int) -> None:
        self.put(self.labels[0], done)

    def put(self, label: str, done: int) -> None:
        self.values[self.labels.index(label)] = done
        self._draw()

    def _line(self) -> str:
        parts = []
        for label, value in zip(self.labels, self.values, strict=True):
            pct = 100 * value / self.total if self.total else 100.0
            parts.append(f"{label} {value:>10,}/{self.total:,} {pct:5.1f}%")
        return f"  [{time.monotonic() - self._started:6.1f} s] " + "   ".join(parts)

    def _draw(self, final: bool = False) -> None:
        if self.tty:
            click.echo("\r" + self._line(), nl=final, err=True)
        elif final or time.monotonic() - self._printed >= PLAIN_EVERY_S:
            click.echo(self._line(), err=True)
            self._printed = time.monotonic()

    def __enter__(self) -> Bar:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._draw(final=True)


def machine() -> dict[str, Any]:
    load1, load5, _ = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "load_average_1m_5m_at_end": [round(load1, 2), round(load5, 2)],
    }


def spread_json(prefix: str, spread: Spread) -> dict[str, Any]:
    return {
        f"{prefix}_p50_s": finite(spread.p50_s),
        f"{prefix}_p99_s": finite(spread.p99_s),
        f"{prefix}_max_s": finite(spread.max_s),
        f"{prefix}_count": spread.count,
    }


def burst_json(
    summary: BurstSummary,
    baseline: dict[str, Any] | None,
    meta: dict[str, Any],
    floor: dict[str, Any] | None = None,
) -> dict[str, Any]:
    base_rate = baseline["claimed_per_s"] if baseline else None
    floor_done = floor["completed_max_s"] if floor else None
    ours_done = finite(summary.completed.max_s)
    return {
        "jobs": summary.jobs,
        **spread_json("published", summary.published),
        **spread_json("recorded_published_at", summary.recorded),
        **spread_json("completed", summary.completed),
        **spread_json("claimed", summary.claimed),
        **spread_json("started", summary.started),
        "throughput_per_s": round(summary.throughput_per_s, 1),
        "claimed_per_s": round(summary.claimed_per_s, 1),
        "published_per_s": round(summary.published_per_s, 1),
        "duplicates": summary.duplicates,
        "duplicate_messages": summary.duplicate_messages,
        "unexpected_rows": summary.unexpected_rows,
        "lost": summary.lost,
        "lost_sample": summary.lost_keys_sample,
        "reattempted": summary.reattempted,
        "not_completed": summary.not_completed,
        "statuses": summary.statuses,
        "baseline_claimed_per_s": base_rate,
        "ratio_vs_baseline": (
            round(summary.claimed_per_s / base_rate, 1)
            if base_rate and math.isfinite(summary.claimed_per_s)
            else None
        ),
        "baseline": baseline,
        "floor_completed_max_s": floor_done,
        "floor_cpu_s": floor["cpu_seconds_t0_to_done"]["whole_machine"] if floor else None,
        "ratio_vs_floor": (
            round(ours_done / floor_done, 2) if floor_done and ours_done is not None else None
        ),
        "floor": floor,
        **meta,
        "machine": machine(),
    }


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def burst_table(result: dict[str, Any]) -> str:
    jobs = result["jobs"]
    lines = [
        f"| {jobs:,} jobs | p50 s | p99 s | max s | runs |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in ("claimed", "published", "started", "completed"):
        lines.append(
            f"| {name} - T0 | {_s(result[f'{name}_p50_s'])} | {_s(result[f'{name}_p99_s'])} | "
            f"{_s(result[f'{name}_max_s'])} | {result[f'{name}_count']:,} |"
        )
    lines += [
        "",
        f"claimed/s {result['claimed_per_s']:,.0f}   published/s "
        f"{result['published_per_s']:,.0f}   completed/s (throughput) "
        f"{result['throughput_per_s']:,.0f}",
        f"duplicates {result['duplicates']} (messages {result['duplicate_messages']}, "
        f"unexpected rows {result['unexpected_rows']})   lost {result['lost']}   "
        f"reattempted {result['reattempted']}   not completed {result['not_completed']}",
    ]
    if result.get("baseline_claimed_per_s"):
        lines.append(
            f"baseline (3 naive pollers) claimed/s {result['baseline_claimed_per_s']:,.0f}   "
            f"ratio {result['ratio_vs_baseline']}x"
        )
    floor = result.get("floor")
    if floor:
        cpu_floor = floor["cpu_seconds_t0_to_done"]
        lines.append(
            f"floor (the design's least work: 1 claimer, 2 consumers) completed max "
            f"{_s(floor['completed_max_s'])} s, published max {_s(floor['published_max_s'])} s, "
            f"on {cpu_floor['whole_machine']:.1f} CPU-s of the machine   "
            f"ratio {result['ratio_vs_floor']}x"
        )
    mem = result.get("scheduler_bytes_per_loaded_job")
    if mem:
        lines.append(f"scheduler memory per loaded job: {mem:,} bytes (RSS delta / jobs)")
    cpu = result.get("cpu_seconds_t0_to_done")
    if cpu:
        lines.append(
            "CPU seconds from T0 to the last completion: "
            + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items())
        )
    for note in result.get("notes", []):
        lines.append(f"NOTE: {note}")
    return "\n".join(lines)


def lateness_json(late: Lateness) -> dict[str, Any]:
    return {
        "runs": late.runs,
        "claim_lateness_p50_s": finite(late.claimed.p50_s),
        "claim_lateness_p99_s": finite(late.claimed.p99_s),
        "claim_lateness_max_s": finite(late.claimed.max_s),
        "publish_lateness_p50_s": finite(late.published.p50_s),
        "publish_lateness_p99_s": finite(late.published.p99_s),
        "publish_lateness_p999_s": finite(late.published_p999_s),
        "publish_lateness_max_s": finite(late.published.max_s),
        "start_lateness_p50_s": finite(late.started.p50_s),
        "start_lateness_p99_s": finite(late.started.p99_s),
        "start_lateness_p999_s": finite(late.started_p999_s),
        "start_lateness_max_s": finite(late.started.max_s),
        # Each slice's first scheduled instant as UTC text, to find it in the services' logs.
        "slices_s": SLICE_S,
        "slices": [
            {
                "start": format_ms(s.start_ms),
                "runs": s.runs,
                "claim_max_s": finite(s.claim_max_s),
                "publish_p99_s": finite(s.publish_p99_s),
                "publish_max_s": finite(s.publish_max_s),
            }
            for s in late.slices
        ],
    }


def lateness_table(result: dict[str, Any]) -> str:
    lines = [
        f"| {result['runs']:,} runs at {result['rate_per_s']:,}/s | p50 s | p99 s | p99.9 s | "
        "max s |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in ("claim", "publish", "start"):
        lines.append(
            f"| {name} lateness | {_s(result[f'{name}_lateness_p50_s'])} | "
            f"{_s(result[f'{name}_lateness_p99_s'])} | "
            f"{_s(result.get(f'{name}_lateness_p999_s'))} | "
            f"{_s(result[f'{name}_lateness_max_s'])} |"
        )
    worst = sorted(
        result.get("slices", []),
        key=lambda s: math.inf if s["publish_max_s"] is None else s["publish_max_s"],
        reverse=True,
    )[:3]
    if worst:
        lines.append(
            f"latest {SLICE_S}-s slices (scheduled from; publish max / p99, claim max): "
            + "; ".join(
                f"{s['start']} {_s(s['publish_max_s'])} / {_s(s['publish_p99_s'])}, "
                f"{_s(s['claim_max_s'])} s"
                for s in worst
            )
        )
    return "\n".join(lines)


def plot(
    path: Path,
    title: str,
    rows: list[RunRecord],
    t0_ms: int,
    baseline_rows: list[RunRecord] | None,
    baseline_start_ms: int | None,
    first_append: dict[str, int],
    floor: tuple[list[RunRecord], int] | None = None,
) -> None:
    """Cumulative runs over time: the measured system with the floor's completions beside it,
    and the naive baseline's claims in a panel of their own."""
    plt = _pyplot()
    panels = 2 if baseline_rows else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.5), squeeze=False)
    ax = axes[0][0]
    for label, values in (
        ("claimed", [r.claimed_ms for r in rows]),
        ("published (broker append)", published_instants(rows, first_append)),
        ("published_at (recorded)", [r.published_ms for r in rows]),
        ("completed", [r.finished_ms for r in rows if r.status == "succeeded"]),
    ):
        xs, ys = cumulative(values, t0_ms)
        ax.step(xs, ys, where="post", label=label)
    if floor is not None:
        floor_rows, floor_t0_ms = floor
        xs, ys = cumulative([r.finished_ms for r in floor_rows], floor_t0_ms)
        ax.step(xs, ys, where="post", label="completed (floor)", color="black", linestyle="--")
    ax.set_title(title)
    ax.set_xlabel("seconds since T0")
    ax.set_ylabel("runs (cumulative)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    if baseline_rows and baseline_start_ms is not None:
        bx = axes[0][1]
        xs, ys = cumulative([r.claimed_ms for r in baseline_rows], baseline_start_ms)
        bx.step(xs, ys, where="post", label="claimed (naive pollers)", color="tab:red")
        mx, my = cumulative([r.claimed_ms for r in rows], t0_ms)
        bx.step(mx, my, where="post", label="claimed (tickwheel)", color="tab:blue")
        bx.set_title("baseline: 3 pollers, SKIP LOCKED, per-row writes")
        bx.set_xlabel("seconds since start")
        bx.grid(alpha=0.3)
        bx.legend(loc="upper left")
    _save(plt, fig, path)


def plot_tenants(path: Path, title: str, rows: list[RunRecord], t0_ms: int) -> None:
    """Each tenant's runs started over time, as a share of that tenant's runs: a burst of
    100,000 and a tenant of 100 on one scale."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    started: dict[str, list[int]] = {}
    for r in rows:
        if r.started_ms is not None:
            started.setdefault(tenant_of(r.run_key), []).append(r.started_ms)
    for tenant, instants in sorted(started.items()):
        xs, ys = cumulative(instants, t0_ms)
        share = [100 * y / len(instants) for y in ys]
        ax.step(xs, share, where="post", label=f"{tenant} ({len(instants):,} runs): started")
    ax.set_title(title)
    ax.set_xlabel("seconds since T0")
    ax.set_ylabel("share of the tenant's runs (%)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    _save(plt, fig, path)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("--plot needs matplotlib (pip install 'tickwheel[dev]')") from None
    return plt


def _save(plt: Any, fig: Any, path: Path) -> None:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def tenants_json(figures: Mapping[str, TenantFigures]) -> dict[str, Any]:
    return {
        tenant: {
            "runs": f.runs,
            **spread_json("started", f.started),
            **spread_json("start_lateness", f.start_lateness),
            **spread_json("completed", f.completed),
            **(spread_json("claimed", f.claimed) if f.claimed else {}),
            **(spread_json("published", f.published) if f.published else {}),
        }
        for tenant, f in figures.items()
    }


def tenants_table(result: dict[str, Any]) -> str:
    """The two-tenant burst: each tenant's starts and completions, and the burst alone."""
    lines = [
        "| tenant (runs) | claimed p99 s | published p99 s | started p50 / p99 / max s | "
        "start lateness p99 / max s | completed max s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    rows = [(f"{t} ({f['runs']:,})", f) for t, f in result["together"].items()]
    rows += [(f"{t} ({f['runs']:,}) alone", f) for t, f in (result.get("alone") or {}).items()]
    for name, f in rows:
        lines.append(
            f"| {name} | {_s(f.get('claimed_p99_s'))} | {_s(f.get('published_p99_s'))} | "
            f"{_s(f['started_p50_s'])} / {_s(f['started_p99_s'])} / "
            f"{_s(f['started_max_s'])} | {_s(f['start_lateness_p99_s'])} / "
            f"{_s(f['start_lateness_max_s'])} | {_s(f['completed_max_s'])} |"
        )
    ratio = result.get("burst_completed_vs_alone")
    if ratio is not None:
        lines.append(f"burst completed with the other tenant / alone: {ratio:.3f}")
    return "\n".join(lines)
