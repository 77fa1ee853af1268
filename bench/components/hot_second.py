"""The hot-second figures of docs/BENCHMARKS.md: `tickwheel bench hot-second`, several runs.

Runs the command RUNS times with the given options (each run measures the naive baseline on
the same jobs too, unless --no-baseline is passed through), keeps every run's JSON as
`docs/results/hot_second_<jobs>_run<i>.json`, the first run's plot as
`docs/results/hot_second_<jobs>.png`, and writes the table of all runs to
`docs/results/hot_second_<jobs>.md`. Needs the dev stack (`tickwheel dev up`).

    .venv/bin/python -m tickwheel.bench.components.hot_second [--runs 3] [--jobs 100000] \
        [-- OPTIONS...]

Everything after `--` goes to `tickwheel bench hot-second` as it is (`--workers 2
--concurrency 1000`, ...); TICKWHEEL_* settings in the environment reach the processes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tickwheel.bench.components import RESULTS


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def table(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| run | published p50 / p99 / max s | completed p50 / p99 / max s | claimed/s | "
        "completed/s | duplicates | lost | baseline claimed/s | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(runs, 1):
        lines.append(
            f"| {i} | {_s(r['published_p50_s'])} / {_s(r['published_p99_s'])} / "
            f"{_s(r['published_max_s'])} | {_s(r['completed_p50_s'])} / "
            f"{_s(r['completed_p99_s'])} / {_s(r['completed_max_s'])} | "
            f"{r['claimed_per_s']:,.0f} | {r['throughput_per_s']:,.0f} | {r['duplicates']} | "
            f"{r['lost']} | {r['baseline_claimed_per_s'] or 0:,.0f} | "
            f"{r['ratio_vs_baseline'] or '—'} |"
        )
    return "\n".join(lines)


def main() -> None:
    argv = sys.argv[1:]
    passed = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args(own)
    exe = str(Path(sys.executable).parent / "tickwheel")
    RESULTS.mkdir(exist_ok=True)
    runs = []
    for i in range(1, args.runs + 1):
        out = RESULTS / f"hot_second_{args.jobs}_run{i}.json"
        command = [exe, "bench", "hot-second", "--jobs", str(args.jobs), "--json", str(out)]
        if i == 1:
            command += ["--plot", str(RESULTS / f"hot_second_{args.jobs}.png")]
        subprocess.run([*command, *passed], check=True)
        runs.append(json.loads(out.read_text()))
    text = table(runs)
    (RESULTS / f"hot_second_{args.jobs}.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
