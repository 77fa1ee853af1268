"""The operators' tools: the dead-letter topic, replays, runs, jobs and retention.

`dlq.py` reads `<prefix>.runs.dlq` without touching any consumer group, `replay.py` moves dead
runs back to `retrying` (the operator transition of tickwheel/domain.py), `runs.py` and
`jobs.py` read and change the ledger and the registry, `gc.py` is retention, and `cli.py` is
the `tickwheel dlq|runs|jobs|gc` commands over them.
"""
