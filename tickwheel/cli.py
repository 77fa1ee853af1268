"""The `tickwheel` command line: one click group that registers each area's commands.

Each area keeps its commands beside its code: `cron` (tickwheel/schedule/cli.py), `dev`
(tickwheel/stack/cli.py), `db` and `topics` (tickwheel/core_cli.py), `registry` and `tenant`
(registry_api/cli.py), `operator-key` (registry_api/ops_cli.py), `demo` (tickwheel/demo.py),
`worker` (workers/cli.py), `scheduler` (shards/cli.py). What they share — the settings,
failing with one line on stderr — is tickwheel/cli_support.py.
"""

from __future__ import annotations

import click

from tickwheel import __version__
from tickwheel.bench.cli import bench
from tickwheel.chaos.cli import chaos
from tickwheel.core_cli import db, gc, topics
from tickwheel.demo import demo
from tickwheel.registry_api.cli import registry, tenant
from tickwheel.registry_api.ops.cli_dlq import dlq
from tickwheel.registry_api.ops.cli_jobs import jobs
from tickwheel.registry_api.ops.cli_keys import operator_key
from tickwheel.registry_api.ops.cli_runs import runs
from tickwheel.registry_api.ops.cli_status import status
from tickwheel.schedule.cli import cron
from tickwheel.shards.cli import scheduler
from tickwheel.stack.cli import dev
from tickwheel.workers.cli import worker


@click.group()
@click.version_option(__version__, prog_name="tickwheel")
def main() -> None:
    """tickwheel: a distributed job scheduler."""


for command in (
    cron,
    dev,
    db,
    topics,
    registry,
    tenant,
    operator_key,
    demo,
    worker,
    scheduler,
    dlq,
    runs,
    jobs,
    gc,
    status,
    bench,
):
    main.add_command(command)
# The reliability harness is a benchmark of faults: `tickwheel bench chaos`.
bench.add_command(chaos)
