"""`tickwheel bench hot-second | steady` (and `bench chaos`, chaos/cli.py): measure the real
processes on the local stack.

Both commands work on a scratch database and topics of their own (dropped at the end), start
real `tickwheel scheduler` and `tickwheel worker` processes on them, and read every figure back
from Postgres and Kafka. They print a table; `--json` and `--plot` keep the figures. The
processes' logs stay in `--log-dir` (default: a fresh temporary folder, printed).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tickwheel.bench.chaos.cli import chaos
from tickwheel.cli_support import EXIT_BAD_INPUT, fail, settings
from tickwheel.config import Settings

if TYPE_CHECKING:
    from tickwheel.bench.analysis import BurstSummary
    from tickwheel.bench.baseline import BaselineResult
    from tickwheel.bench.burst import BurstConfig, BurstResult
    from tickwheel.bench.floor import FloorResult

T = TypeVar("T")

DEFAULT_JOBS = 100_000
BASELINE_JOBS_MAX = 100_000  # the baseline's rate is measured on at most this many jobs
FAR_FUTURE_MS = 3_600_000  # the baseline's jobs are registered an hour ahead, then made due


@click.group("bench")
def bench() -> None:
    """Benchmarks of the whole system on the local stack (see docs/BENCHMARKS.md)."""


# The reliability harness is a benchmark of faults: `tickwheel bench chaos`.
bench.add_command(chaos)


@dataclass(frozen=True)
class FleetOptions:
    """The options every burst command shares (`_common`): the fleet, the registration, the
    scratch topics, and where the figures and logs go."""

    shards: int | None
    schedulers: int
    workers: int
    concurrency: int | None
    handler_text: str
    registration: str
    partitions: int | None
    lead_s: float | None
    json_path: Path | None
    plot_path: Path | None
    log_dir: Path | None

    def config(self, s: Settings, jobs: int, spread_ms: int) -> BurstConfig:
        """The burst of `jobs` due over `spread_ms` from T0 on this fleet (a bad --handler
        exits with a usage error)."""
        from tickwheel.bench.burst import BurstConfig
        from tickwheel.bench.load import Handler

        try:
            handler = Handler.parse(self.handler_text)
        except ValueError as exc:
            fail(str(exc), EXIT_BAD_INPUT)
        folder = self.log_dir or Path(tempfile.mkdtemp(prefix="tickwheel-bench-"))
        click.echo(f"process logs: {folder}", err=True)
        return BurstConfig(
            jobs=jobs,
            shards=self.shards or s.shards,
            schedulers=self.schedulers,
            workers=self.workers,
            concurrency=self.concurrency,
            spread_ms=spread_ms,
            handler=handler,
            registration=self.registration,
            partitions=self.partitions or s.topic_partitions,
            lead_s=self.lead_s,
            log_dir=folder,
            horizon_s=s.horizon_s,
        )


_FLEET_OPTIONS = tuple(f.name for f in fields(FleetOptions))


def _common(fn: Any) -> Any:
    """The shared options, handed to the command as one `fleet: FleetOptions`."""

    @functools.wraps(fn)
    def command(**kwargs: Any) -> Any:
        fleet = FleetOptions(**{name: kwargs.pop(name) for name in _FLEET_OPTIONS})
        return fn(fleet=fleet, **kwargs)

    options = [
        click.option(
            "--shards", type=click.IntRange(1, 4096), default=None, help="Default TICKWHEEL_SHARDS."
        ),
        click.option("--schedulers", type=click.IntRange(1, 64), default=1, show_default=True),
        click.option("--workers", type=click.IntRange(0, 256), default=2, show_default=True),
        click.option(
            "--concurrency",
            type=click.IntRange(1, 10_000),
            default=None,
            help="Runs per worker at once (default: the worker's own).",
        ),
        click.option(
            "--handler",
            "handler_text",
            default="noop",
            show_default=True,
            help="noop, or sleep:MS.",
        ),
        click.option(
            "--registration",
            type=click.Choice(["bulk", "kafka", "http"]),
            default="bulk",
            show_default=True,
            help="bulk: the registry's store in this process; kafka: produce registrations "
            "for a `tickwheel registry`; http: POST each job to one.",
        ),
        click.option(
            "--partitions",
            type=click.IntRange(1, 1000),
            default=None,
            help="Partitions of the scratch topics (default TICKWHEEL_TOPIC_PARTITIONS).",
        ),
        click.option(
            "--lead-s",
            type=click.FloatRange(1, 7200),
            default=None,
            help="Seconds from registration to T0 (default: estimated from --jobs).",
        ),
        click.option("--json", "json_path", type=click.Path(path_type=Path), default=None),
        click.option("--plot", "plot_path", type=click.Path(path_type=Path), default=None),
        click.option("--log-dir", type=click.Path(path_type=Path), default=None),
    ]
    for option in reversed(options):
        command = option(command)
    return command


# Settings the child processes inherit that say where, not how: left out of the record (a DSN
# may hold a password).
WHERE_SETTINGS = {"TICKWHEEL_DSN", "TICKWHEEL_KAFKA", "TICKWHEEL_ZK", "TICKWHEEL_CONFIG"}


def _command_line() -> str:
    """The command as run, with the TICKWHEEL_* settings that tune the processes before it."""
    tuning = [
        f"{name}={value}"
        for name, value in sorted(os.environ.items())
        if name.startswith("TICKWHEEL_") and name not in WHERE_SETTINGS
    ]
    return " ".join([*tuning, "tickwheel", *sys.argv[1:]])


def _write_json(path: Path | None, result: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
        click.echo(f"figures: {path}", err=True)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run the benchmark; a failure of the environment or a process is one line, exit 1."""
    import asyncpg
    from confluent_kafka import KafkaException

    from tickwheel.bench.supervisor import SupervisorError

    try:
        return asyncio.run(coro)
    except SupervisorError as exc:
        fail(f"a benchmark process failed: {exc}")
    except (OSError, asyncpg.PostgresError, KafkaException, TimeoutError) as exc:
        fail(f"benchmark stopped: {type(exc).__name__}: {exc}")


async def _burst(s: Settings, cfg: BurstConfig) -> BurstResult:
    """One measured burst by the real processes, on a scratch database and topics."""
    from tickwheel.bench.burst import run_burst
    from tickwheel.bench.scratch import scratch

    async with scratch(
        s.effective_dsn, s.effective_kafka, s.effective_zk, shards=cfg.shards,
        partitions=cfg.partitions,
    ) as res:  # fmt: skip
        return await run_burst(res, cfg, lambda line: click.echo(line, err=True))


def _summary(result: BurstResult) -> tuple[BurstSummary, dict[str, Any]]:
    """The burst's figures, and the run's metadata (command line, T0, process settings)."""
    from tickwheel.bench.analysis import summarize
    from tickwheel.clock import format_ms

    summary = summarize(
        result.expected, result.rows, result.deliveries, result.t0_ms, result.first_append
    )
    return summary, {"command": _command_line(), "t0": format_ms(result.t0_ms), **result.meta()}


async def _baseline(s: Settings, cfg: BurstConfig, jobs: int) -> BaselineResult:
    """The naive pollers on the same jobs, in a scratch database of their own."""
    from tickwheel.bench import load
    from tickwheel.bench.baseline import run_baseline
    from tickwheel.bench.report import Bar
    from tickwheel.bench.scratch import scratch
    from tickwheel.bench.supervisor import Supervisor
    from tickwheel.clock import now_ms

    async with scratch(
        s.effective_dsn,
        s.effective_kafka,
        s.effective_zk,
        shards=cfg.shards,
        partitions=cfg.partitions,
    ) as res:
        dues = load.due_instants(jobs, now_ms() + FAR_FUTURE_MS, cfg.spread_ms)
        click.echo(f"baseline: registering {jobs:,} jobs", err=True)
        with Bar(jobs, "registered") as bar:
            await load.register_bulk(res, load.documents(dues, cfg.handler), bar.set)
        click.echo("baseline: 3 naive pollers claiming", err=True)
        with Supervisor(res.env(), cfg.log_dir / "baseline") as fleet, Bar(jobs, "claimed") as bar:
            return await run_baseline(res, jobs, fleet, bar.set)


async def _floor(s: Settings, cfg: BurstConfig) -> FloorResult:
    """The design's least work on the same job ids, in a scratch database and topic of its own."""
    from tickwheel.bench.floor import run_floor
    from tickwheel.bench.report import Bar
    from tickwheel.bench.scratch import scratch
    from tickwheel.bench.supervisor import Supervisor

    async with scratch(
        s.effective_dsn,
        s.effective_kafka,
        s.effective_zk,
        shards=cfg.shards,
        partitions=cfg.partitions,
    ) as res:
        click.echo(f"floor: {cfg.jobs:,} runs, 1 claimer, 2 consumers", err=True)
        with (
            Supervisor(res.env(), cfg.log_dir / "floor") as fleet,
            Bar(cfg.jobs, "completed") as bar,
        ):
            return await run_floor(res, cfg.jobs, fleet, bar.set)


BASELINES = ("floor", "naive", "both")


@bench.command("hot-second")
@click.option("--jobs", type=click.IntRange(1, 10_000_000), default=DEFAULT_JOBS, show_default=True)
@click.option(
    "--spread-ms",
    type=click.IntRange(0, 3_600_000),
    default=0,
    show_default=True,
    help="Jobs due evenly over this many ms after T0 (0: all at T0).",
)
@click.option(
    "--baseline",
    type=click.Choice(BASELINES),
    default="both",
    show_default=True,
    help="Also measure, on the same jobs: the floor (the least work the design needs), the "
    "naive design (three SKIP LOCKED pollers), or both.",
)
@click.option("--no-baseline", is_flag=True, help="Measure tickwheel alone.")
@click.option(
    "--baseline-jobs",
    type=click.IntRange(1, 10_000_000),
    default=None,
    help=f"Jobs for the baseline (default: --jobs, at most {BASELINE_JOBS_MAX:,}).",
)
@_common
def hot_second(
    jobs: int,
    spread_ms: int,
    baseline: str,
    no_baseline: bool,
    baseline_jobs: int | None,
    fleet: FleetOptions,
) -> None:
    """N one-off jobs due in the same second: how fast are they claimed, published, run?"""
    from tickwheel.bench.report import burst_json, burst_table, plot

    s = settings()
    cfg = fleet.config(s, jobs, spread_ms)

    naive = not no_baseline and baseline in ("naive", "both")
    with_floor = not no_baseline and baseline in ("floor", "both")

    async def go() -> tuple[BurstResult, BaselineResult | None, FloorResult | None]:
        base = (
            await _baseline(s, cfg, baseline_jobs or min(jobs, BASELINE_JOBS_MAX))
            if naive
            else None
        )
        # The floor right before the measured burst: machines drift, neighbours matter less.
        floor = await _floor(s, cfg) if with_floor else None
        return await _burst(s, cfg), base, floor

    result, base, floor = _run(go())
    summary, meta = _summary(result)
    out = burst_json(
        summary, base.to_json() if base else None, meta, floor.to_json() if floor else None
    )
    click.echo(burst_table(out))
    _write_json(fleet.json_path, out)
    if fleet.plot_path is not None:
        plot(
            fleet.plot_path,
            f"tickwheel: {jobs:,} jobs due at T0",
            result.rows,
            result.t0_ms,
            base.rows if base else None,
            base.started_ms if base else None,
            result.first_append,
            (floor.rows, floor.t0_ms) if floor else None,
        )
        click.echo(f"plot: {fleet.plot_path}", err=True)


@bench.command("steady")
@click.option("--rate", type=click.IntRange(1, 1_000_000), default=5_000, show_default=True)
@click.option(
    "--duration", type=click.IntRange(1, 86_400), default=300, show_default=True, help="Seconds."
)
@_common
def steady(
    rate: int,
    duration: int,
    fleet: FleetOptions,
) -> None:
    """RATE runs per second for DURATION seconds (one-offs registered ahead, due evenly):
    publish and start lateness against each run's scheduled instant."""
    from tickwheel.bench.analysis import lateness
    from tickwheel.bench.report import burst_json, lateness_json, lateness_table, plot

    s = settings()
    cfg = fleet.config(s, rate * duration, duration * 1000)

    result = _run(_burst(s, cfg))
    summary, meta = _summary(result)
    late = lateness(result.expected, result.rows, result.first_append)
    out = {
        "rate_per_s": rate,
        "duration_s": duration,
        **lateness_json(late),
        "burst": burst_json(summary, None, meta),
    }
    click.echo(lateness_table(out))
    click.echo(
        f"duplicates {summary.duplicates}   lost {summary.lost}   "
        f"not completed {summary.not_completed}   throughput {summary.throughput_per_s:,.0f}/s"
    )
    for note in result.notes:
        click.echo(f"NOTE: {note}")
    _write_json(fleet.json_path, out)
    if fleet.plot_path is not None:
        plot(
            fleet.plot_path,
            f"tickwheel: {rate:,} runs/s for {duration} s",
            result.rows,
            result.t0_ms,
            None,
            None,
            result.first_append,
        )
        click.echo(f"plot: {fleet.plot_path}", err=True)


@bench.command("tenants")
@click.option(
    "--jobs",
    type=click.IntRange(1, 10_000_000),
    default=DEFAULT_JOBS,
    show_default=True,
    help="The burst: jobs of tenant bench, all due at T0.",
)
@click.option(
    "--other-jobs",
    type=click.IntRange(1, 1_000_000),
    default=100,
    show_default=True,
    help="Jobs of tenant bench-b, due evenly over --other-spread-ms from T0.",
)
@click.option(
    "--other-spread-ms",
    type=click.IntRange(0, 60_000),
    default=1_000,
    show_default=True,
    help="0: all at T0 too.",
)
@click.option("--no-alone", is_flag=True, help="Skip the burst alone (the comparison).")
@_common
def tenants(
    jobs: int,
    other_jobs: int,
    other_spread_ms: int,
    no_alone: bool,
    fleet: FleetOptions,
) -> None:
    """One tenant's burst of JOBS due at T0 and another tenant's OTHER-JOBS in the same second:
    how soon the small tenant's runs start, and what the burst's completion costs beside the
    burst alone (measured first, back to back)."""
    from dataclasses import replace

    from tickwheel.bench.analysis import by_tenant
    from tickwheel.bench.report import plot_tenants, tenants_json, tenants_table
    from tickwheel.bench.scratch import TENANT

    s = settings()
    cfg = fleet.config(s, jobs, 0)
    together_cfg = replace(cfg, other_jobs=other_jobs, other_spread_ms=other_spread_ms)

    async def go() -> tuple[BurstResult | None, BurstResult]:
        alone = None if no_alone else await _burst(s, cfg)
        return alone, await _burst(s, together_cfg)

    alone, together = _run(go())
    out: dict[str, Any] = {"other_spread_ms": other_spread_ms, "alone": None}
    for name, result in (("alone", alone), ("together", together)):
        if result is None:
            continue
        summary, meta = _summary(result)
        out[name] = tenants_json(by_tenant(result.expected, result.rows, result.t0_ms))
        out[f"{name}_burst"] = {
            "lost": summary.lost,
            "duplicates": summary.duplicates,
            "not_completed": summary.not_completed,
            **meta,
        }
    if alone is not None:
        a, b = out["alone"][TENANT]["completed_max_s"], out["together"][TENANT]["completed_max_s"]
        out["burst_completed_vs_alone"] = round(b / a, 3) if a and b else None
    click.echo(tenants_table(out))
    for name in ("alone_burst", "together_burst"):
        if name in out:
            o = out[name]
            click.echo(
                f"{name.split('_')[0]}: lost {o['lost']}   duplicates {o['duplicates']}   "
                f"not completed {o['not_completed']}"
            )
    _write_json(fleet.json_path, out)
    if fleet.plot_path is not None:
        plot_tenants(
            fleet.plot_path,
            f"tickwheel: {jobs:,} jobs of {TENANT} at T0, {other_jobs:,} of another over "
            f"{other_spread_ms:,} ms",
            together.rows,
            together.t0_ms,
        )
        click.echo(f"plot: {fleet.plot_path}", err=True)


@bench.command("peers")
@click.option("--jobs", type=click.IntRange(1, 10_000_000), default=DEFAULT_JOBS, show_default=True)
@click.option(
    "--peer",
    "peer_names",
    type=click.Choice(["graphile", "river"]),
    multiple=True,
    help="A peer to run (repeatable; default: both).",
)
@click.option("--no-tickwheel", is_flag=True, help="Run the peers only: no floor, no tickwheel.")
@click.option(
    "--lead-s",
    type=click.FloatRange(1, 7200),
    default=None,
    help="Seconds from adding the jobs to T0 (default: estimated from --jobs).",
)
@click.option("--timeout-s", type=click.FloatRange(1, 7200), default=600, show_default=True)
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None)
@click.option("--log-dir", type=click.Path(path_type=Path), default=None)
def peers(
    jobs: int,
    peer_names: tuple[str, ...],
    no_tickwheel: bool,
    lead_s: float | None,
    timeout_s: float,
    json_path: Path | None,
    log_dir: Path | None,
) -> None:
    """The floor and tickwheel (as `hot-second --baseline floor`), then graphile-worker and
    River, back to back on the same hot second, two worker processes each: one line per system.
    A peer whose tools (Node and npm; Go) are missing is left out with a line saying so."""
    from importlib.metadata import version

    from tickwheel.bench.peers.harness import (
        comparison_table,
        floor_figures,
        run_peer,
        tickwheel_figures,
    )
    from tickwheel.bench.peers.systems import PEERS, PeerError
    from tickwheel.bench.report import burst_json, machine

    s = settings()
    chosen = [PEERS[name] for name in peer_names or sorted(PEERS)]
    runnable = []
    for peer in chosen:
        missing = peer.missing_tools()
        if missing:
            click.echo(f"{peer.name}: not run, {', '.join(missing)} not found on PATH")
        else:
            runnable.append(peer)
    fleet = FleetOptions(
        shards=None, schedulers=1, workers=2, concurrency=None, handler_text="noop",
        registration="bulk", partitions=None, lead_s=lead_s, json_path=None, plot_path=None,
        log_dir=log_dir,
    )  # fmt: skip
    say = functools.partial(click.echo, err=True)

    async def go() -> list[Any]:
        rows = []
        if not no_tickwheel:
            cfg = fleet.config(s, jobs, 0)
            floor = await _floor(s, cfg)
            summary, meta = _summary(await _burst(s, cfg))
            burst = burst_json(summary, None, meta, floor.to_json())
            rows += [
                floor_figures(floor.to_json()),
                tickwheel_figures(burst, version("tickwheel"), "default settings, 2 workers"),
            ]
        for peer in runnable:
            folder = log_dir / peer.folder if log_dir else None
            rows.append(await run_peer(peer, s.effective_dsn, jobs, lead_s, timeout_s, folder, say))
        return rows

    if no_tickwheel and not runnable:
        fail("nothing to measure: no peer can run here, and --no-tickwheel")
    try:
        rows = _run(go())
    except PeerError as exc:
        fail(str(exc))
    click.echo(comparison_table(rows))
    systems = [row.to_json() for row in rows]
    _write_json(json_path, {"command": _command_line(), "systems": systems, "machine": machine()})


@bench.command("floor-claimer", hidden=True)
@click.option("--start-at-ms", type=int, required=True)
@click.option("--topic", required=True)
def floor_claimer(start_at_ms: int, topic: str) -> None:
    """The floor's claimer (started by `hot-second`, on its scratch resources)."""
    from tickwheel.bench.floor import claim_until_drained

    s = settings()
    claimed = asyncio.run(
        claim_until_drained(s.effective_dsn, s.effective_kafka, topic, start_at_ms)
    )
    click.echo(json.dumps({"claimed": claimed}))


@bench.command("floor-consumer", hidden=True)
@click.option("--topic", required=True)
def floor_consumer(topic: str) -> None:
    """One of the floor's consumers (started by `hot-second`, on its scratch resources)."""
    from tickwheel.bench.floor import consume_until_stopped

    s = settings()
    done = asyncio.run(
        consume_until_stopped(s.effective_dsn, s.effective_kafka, topic, f"{s.topic_prefix}.floor")
    )
    click.echo(json.dumps({"done": done}))


@bench.command("baseline-poller", hidden=True)
@click.option("--start-at-ms", type=int, required=True)
def baseline_poller(start_at_ms: int) -> None:
    """One naive poller of the baseline (started by `hot-second`, on its scratch resources)."""
    from tickwheel.bench.baseline import poll_until_drained

    s = settings()
    claimed = asyncio.run(
        poll_until_drained(s.effective_dsn, s.effective_kafka, s.topic_prefix, start_at_ms)
    )
    click.echo(json.dumps({"claimed": claimed}))
