"""`tickwheel bench`: the hot-second and steady-load harness, with the naive design as baseline.

Modules: `cli` (the commands), `burst` (one measured run of the real processes), `baseline`
(three naive pollers), `load` (registering the jobs), `scratch` (throwaway database and
topics), `fleet` (child processes), `observe` (reading rows, topics, metrics back),
`analysis` (pure figures), `report` (progress, table, JSON, plot), `handlers` (the jobs'
handlers: `bench.noop`, `bench.sleep`).
"""
