"""Hierarchical timing wheel (issue 3): a shard leader's next minutes of fire times in memory."""

from __future__ import annotations

from .timing_wheel import TimingWheel

__all__ = ["TimingWheel"]
