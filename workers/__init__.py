"""Consumer-group workers: claim, execute, record, then commit (see service.py)."""
