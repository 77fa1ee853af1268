"""`tickwheel bench chaos`: the fault-injection harness on a private stack of its own."""

from __future__ import annotations

from pathlib import Path

import click

from tickwheel.bench.chaos.faults import FAULTS


@click.command("chaos")
@click.option("--rounds", type=click.IntRange(1, 10_000), default=9, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--faults",
    "kinds",
    default=",".join(FAULTS),
    show_default=True,
    help="Comma-separated fault kinds to draw from.",
)
@click.option("--burst", type=click.IntRange(1, 100_000), default=300, show_default=True)
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
    default="61432,61092,61093,61181",
    show_default=True,
    help="Private Postgres, Kafka, KRaft controller and ZooKeeper ports.",
)
@click.option(
    "--jars-from",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="A resolved jars/ directory to reuse (default: the dev stack's, if current; "
    "else Maven resolves).",
)
def chaos(
    rounds: int,
    seed: int,
    json_path: Path | None,
    kinds: str,
    burst: int,
    root: Path,
    ports: str,
    jars_from: Path | None,
) -> None:
    """Break a private stack on purpose, round after round, and check the run ledger:
    lost 0, duplicate successes 0, early 0, unexplained re-executions 0 (exit 1 otherwise)."""
    import orjson

    from tickwheel.bench.chaos.deployment import Ports
    from tickwheel.bench.chaos.harness import Harness, Options, default_jars, table
    from tickwheel.cli_support import fail, settings

    settings()  # a bad setting fails here with one line, before any service is started

    chosen = [k.strip() for k in kinds.split(",") if k.strip()]
    unknown = sorted(set(chosen) - set(FAULTS))
    if unknown or not chosen:
        raise click.BadParameter(
            f"unknown fault kind(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(FAULTS)}",
            param_hint="--faults",
        )
    try:
        numbers = [int(p) for p in ports.split(",")]
        if len(numbers) != 4 or not all(1 <= p <= 65535 for p in numbers):
            raise ValueError
    except ValueError:
        raise click.BadParameter(
            "four ports 1-65535, comma-separated: postgres,kafka,controller,zookeeper",
            param_hint="--ports",
        ) from None
    jars = jars_from or default_jars()
    options = Options(rounds, seed, burst, chosen, root, Ports(*numbers), jars)
    try:
        report = Harness(options, echo=click.echo).run()
    except (RuntimeError, OSError) as exc:
        fail(f"chaos run failed: {exc}")
    click.echo(table(report))
    if json_path is not None:
        json_path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    verdicts = ("lost", "duplicate_successes", "early", "unexplained_reexecutions")
    if any(report[v] for v in verdicts):
        raise SystemExit(1)
