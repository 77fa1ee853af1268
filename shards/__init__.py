"""Shard leaders: ZooKeeper election, horizon loading, the tick loop, fenced claims, publish."""
