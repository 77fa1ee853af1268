"""Topic names (DESIGN §5), all under one configurable prefix."""

from __future__ import annotations

from dataclasses import dataclass

from tickwheel.domain import PRIORITIES


@dataclass(frozen=True)
class Topics:
    prefix: str = "tickwheel"

    @property
    def registrations(self) -> str:
        return f"{self.prefix}.registrations"

    @property
    def rejected(self) -> str:
        return f"{self.prefix}.registrations.rejected"

    def runs(self, priority: str) -> str:
        if priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, not {priority!r}")
        return f"{self.prefix}.runs.{priority}"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}.runs.dlq"

    @property
    def health(self) -> str:
        """Used only by `tickwheel dev` for its produce/consume round trip."""
        return f"{self.prefix}.devstack.health"

    def all(self) -> list[str]:
        """Every topic the system uses, in a stable order."""
        return [self.registrations, self.rejected, *(self.runs(p) for p in PRIORITIES), self.dlq]
