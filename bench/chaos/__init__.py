"""The fault-injection harness (`tickwheel bench chaos`, docs/RELIABILITY.md): a private stack
(deployment.py), a workload (workload.py), one fault per round at a seeded moment (faults.py),
and the round's verdicts over its ledger (checker.py, on the harnesses' ledger checker);
harness.py runs the rounds of the seeded plan (plan.py), drains them, reads the run topics
(run_topics.py) and reports."""
