"""The harness home (`tickwheel.bench`, the top-level `bench/` folder): whatever runs the whole
system for a purpose, above every area and never imported by one.

    cli.py          `tickwheel bench hot-second | steady` (and `bench chaos`, from chaos/)
    burst.py        one measured burst of the real processes;  baseline.py  the naive design
                    (three SKIP LOCKED pollers) on the same jobs
    load.py         registering the jobs (bulk, Kafka, HTTP);  scratch.py  throwaway database
                    and topics;  observe.py  rows, run topics, metrics read back
    analysis.py     the figures, pure;  report.py  progress, table, JSON, plot
    chaos/          the fault-injection harness (docs/RELIABILITY.md)
    demo/           `tickwheel demo`: the tour of the system and its live view
    components/     benchmarks of one component each (wheel, schedule, HTTP, intake), run as
                    `python -m tickwheel.bench.components.<name>`

What the harnesses share: supervisor.py (the child processes, free ports), handlers.py (the
workers' handlers and the one execution-log format) and ledger.py (the one ledger checker, on
`tickwheel.domain`'s statuses and run keys). Their SQL is `tickwheel/sql/bench.sql`. Figures go
to docs/BENCHMARKS.md and docs/results/.
"""
