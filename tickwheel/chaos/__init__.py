"""The fault-injection harness (`tickwheel bench chaos`): a private stack, a workload, faults
at seeded moments, and a checker that reads the run ledger afterwards (docs/RELIABILITY.md)."""
