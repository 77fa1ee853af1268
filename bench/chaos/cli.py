"""`tickwheel bench chaos`: the fault-injection harness on a private stack of its own."""

from __future__ import annotations

from pathlib import Path

import click

from tickwheel.bench.chaos.deployment import STACKS
from tickwheel.bench.chaos.faults import DEFAULT_KINDS, FAULTS


@click.command("chaos")
@click.option(
    "--stack",
    type=click.Choice(STACKS),
    default="single",
    show_default=True,
    help="single: one Postgres, one broker, one ZooKeeper; replicated: three brokers, a "
    "three-server ensemble, a primary with a synchronous standby.",
)
@click.option("--rounds", type=click.IntRange(1, 10_000), default=10, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--faults",
    "kinds",
    default=None,
    help="Comma-separated fault kinds to draw from (default: the stack's own set, "
    "docs/RELIABILITY.md).",
)
@click.option(
    "--burst",
    type=click.IntRange(1, 100_000),
    default=None,
    help="One-off jobs due together per round (default: 300 single, 150 replicated).",
)
@click.option(
    "--dir",
    "root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".devstack-chaos"),
    show_default=True,
    help="Where the private stack lives (kept between runs; each run uses new tenants).",
)
@click.option(
    "--ports",
    default=None,
    help="Private ports, comma-separated: 4 for single (postgres,kafka,controller,zookeeper; "
    "default 61432,61092,61093,61181), 17 for replicated (3 Kafka, 3 controllers, 3 "
    "ZooKeeper client, 3 quorum, 3 election, 2 Postgres; default 62100-62116).",
)
@click.option(
    "--dispatch-window",
    type=click.IntRange(0, 1_000_000),
    default=None,
    help="TICKWHEEL_TENANT_DISPATCH_WINDOW of the system under test (default: its default, "
    "which a round's burst does not reach; below the burst, every round's claims are held "
    "and released through the window while the faults strike).",
)
@click.option(
    "--jars-from",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="A resolved jars/ directory to reuse (default: the dev stack's, if current; "
    "else Maven resolves).",
)
def chaos(
    stack: str,
    rounds: int,
    seed: int,
    json_path: Path | None,
    kinds: str | None,
    burst: int | None,
    root: Path,
    ports: str | None,
    dispatch_window: int | None,
    jars_from: Path | None,
) -> None:
    """Break a private stack on purpose, round after round, and check the run ledger: lost,
    duplicate successes, early, unexpected runs, stale claims, unexplained re-executions,
    re-executions beyond what a dead worker held and offsets ahead of results all 0 (exit 1
    otherwise)."""
    import orjson

    from tickwheel.bench.chaos.checker import VERDICTS
    from tickwheel.bench.chaos.deployment import Ports
    from tickwheel.bench.chaos.faults import have_faketime
    from tickwheel.bench.chaos.harness import Harness, table
    from tickwheel.bench.chaos.plan import DEFAULT_BURST, Options, default_jars, default_ports
    from tickwheel.cli_support import fail, settings
    from tickwheel.stack.replicated import ReplicatedPorts

    settings()  # a bad setting fails here with one line, before any service is started

    chosen = (
        list(DEFAULT_KINDS[stack])
        if kinds is None
        else [k.strip() for k in kinds.split(",") if k.strip()]
    )
    usable = [k for k, f in FAULTS.items() if stack in f.stacks]
    unknown = [k for k in chosen if k not in usable]
    if unknown or not chosen:
        raise click.BadParameter(
            f"fault kind(s) {', '.join(unknown) or '(none given)'} not available on the "
            f"{stack} stack; choose from {', '.join(usable)}",
            param_hint="--faults",
        )
    if "clock_step" in chosen and not have_faketime():
        fail("clock_step needs libfaketime: apt-get install faketime (or leave clock_step out)")
    private: Ports | ReplicatedPorts = default_ports(stack)
    if ports is not None:
        want = 4 if stack == "single" else 17
        try:
            numbers = [int(p) for p in ports.split(",")]
            if len(numbers) != want or not all(1 <= p <= 65535 for p in numbers):
                raise ValueError
        except ValueError:
            raise click.BadParameter(
                f"{want} ports 1-65535, comma-separated, for the {stack} stack",
                param_hint="--ports",
            ) from None
        private = Ports(*numbers) if stack == "single" else ReplicatedPorts.of(numbers)
    jars = jars_from or default_jars()
    options = Options(
        rounds, seed, burst or DEFAULT_BURST[stack], chosen, root, private, jars,
        dispatch_window=dispatch_window,
    )  # fmt: skip
    try:
        report = Harness(options, echo=click.echo).run()
    except (RuntimeError, OSError) as exc:
        fail(f"chaos run failed: {exc}")
    click.echo(table(report))
    if json_path is not None:
        json_path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    if any(report[v] for v in VERDICTS):
        raise SystemExit(1)
