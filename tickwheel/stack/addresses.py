"""Where the three services of a running stack answer, and how a shell is told."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Addresses:
    """Where the three services of a running stack answer."""

    dsn: str
    kafka: str
    zk: str

    def env_lines(self) -> list[str]:
        """Eval-able exports that point tickwheel (and tests) at these services."""
        return [
            f"export TICKWHEEL_DSN={self.dsn}",
            f"export TICKWHEEL_KAFKA={self.kafka}",
            f"export TICKWHEEL_ZK={self.zk}",
        ]
