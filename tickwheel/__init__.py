"""tickwheel: a distributed job scheduler.

Timing is decided in memory (a hierarchical timing wheel per shard), once-ness in Postgres
(fenced lease UPDATEs keyed by run key), and execution by Kafka consumer groups.
"""

from __future__ import annotations

__version__ = "0.1.0"
