"""Consumer-group workers: claim, execute, record, then commit (later issues)."""
