"""The operators' home: everything operators use to watch and repair a deployment, across
tenants (DESIGN §1). One name for all of it — `ops`: the package, the `/v1/ops/…` routes, the
SQL file `tickwheel/sql/ops.sql` and its `ops_` queries.

    dlq.py          reading `<prefix>.runs.dlq` without touching any consumer group
    runs.py         the run ledger as operators read it
    jobs.py         jobs across tenants; pause, resume, rm, trigger, backfill through the
                    registry's own write path (`RegistryStore.apply`)
    status.py       one snapshot of a deployment from Postgres, ZooKeeper, the schedulers'
                    metrics and Kafka; `status_view.py` draws it (text, rich)
    store.py        the status page's bounded reads; `keys.py` operator keys
    routes.py, ui/  `/v1/ops/shards|throughput|dead` behind operator keys, the page at `/ui`
    routes_jobs.py  the page's jobs view and its pause/resume (CSRF tokens: csrf.py), audited
    forms.py        the operators' input forms (--since, --rate, JOB)
    cli_*.py        `tickwheel dlq|runs|jobs|status|operator-key`, one module per command group

Replaying dead runs is the registry's transition `dead → retrying` (`registry_api/replay.py`,
beside trigger and backfill in `on_demand.py`, which write the same kind of row); `dlq replay`
drives it. Nothing here imports `shards/` or `workers/`: the names shared with them come from
`tickwheel.deployment`.
"""
