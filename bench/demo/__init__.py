"""`tickwheel demo`: the whole system working on the local stack, narrated, then checked
(tour.py runs the steps, view.py is its live view, check.py its ledger check, cli.py the
command).

Steps (each printed as it happens):

 1. its own database (`tickwheel_demo_<random>`, migrated) and topic prefix (`demo<random>`),
    so nothing of another deployment is dispatched by, or disturbs, the demo's processes;
 2. child processes, all given that database and prefix by environment: the registry, two
    schedulers (`demo-sched-a`, `demo-sched-b`, metrics on free ports) and two workers running
    the harnesses' handlers (`tickwheel.bench.handlers`), under the harnesses' supervisor;
 3. a tenant, and the registry's own steps: a job over HTTP, one through Kafka, a malformed
    registration that lands on the rejected topic;
 4. a realistic mix: per-second and per-minute cron jobs in several zones and one-off jobs
    over HTTP, more one-offs and a hot second (`--hot`, 10,000 by default) through Kafka, and
    a job whose handler fails until fixed (2 attempts, short backoff), so it dead-letters;
 5. a live view (`tickwheel status`'s screen plus executions and the ledger) for
    `--duration` seconds; without a terminal, one plain line every few seconds;
 6. failover: `kill -9` of one scheduler, and the measured gap until the survivor has taken
    over every shard (`shard_leaders` epochs);
 7. the fix (the handler's flag file) and a replay of the tenant's dead letters through
    `tickwheel.registry_api.replay`, as `tickwheel dlq replay` does;
 8. every job paused, every run left to finish, then the check of the ledger: each due
    occurrence has exactly one row that ended as expected (`lost: N`), and no run key was
    executed successfully twice by the handlers' own record (`duplicates: N`), checked by the
    harnesses' ledger checker (bench/ledger.py);
 9. everything it started is stopped, its database dropped and its topics deleted — unless
    `--keep`, which leaves it running and prints how to stop it.

Exit code 0 only when `lost` and `duplicates` are both 0.
"""
