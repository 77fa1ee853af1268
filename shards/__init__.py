"""Shard leaders: election, horizon loading, the tick loop and fenced claims (later issues)."""
