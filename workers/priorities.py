"""Which priority level gets the next free execution slot: smooth weighted round robin.

Pure: the caller says which levels have work ready, the picker says which one goes next.

Each pick, every *ready* level earns its weight; the level with the most credit goes and pays
back the sum of the ready levels' weights (nginx's smooth weighted round robin). So

- when all levels have a backlog, each level's share of picks is exactly weight / sum(weights)
  over every window of sum(weights) picks (6:3:1 → 6 high, 3 normal, 1 low in every ten), and
  the picks interleave instead of coming in runs;
- an idle level earns nothing, so its share goes to the levels that have work (it "lends" it)
  and it cannot bank credit to burst later;
- while the set of levels with work stays the same, a level is picked at least once in every
  sum(weights) picks: low never starves.

When levels come and go, the credits carried over can make a ready level wait longer (a
property test found a level waiting sum(weights) picks). So the picker also counts, per level,
the picks it has waited while ready: a level that has waited sum(weights) - 1 picks is served
next (the longest-waiting first, if several are), whatever the credits say. A ready level
therefore waits at most sum(weights) + levels - 2 picks in every case; with a stable set the
guard never fires (SWRR alone keeps the waits below sum(weights)), so the shares stay exact.

Reserved slots: with `reserved_high > 0`, the last `reserved_high` free slots are only given to
the high level, so a flood of normal/low work cannot take every slot from a high run arriving.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from tickwheel.domain import Priority


class WeightedPicker:
    def __init__(self, weights: Mapping[str, int], reserved_high: int = 0) -> None:
        if not weights or any(w < 1 for w in weights.values()):
            raise ValueError("every priority weight must be a positive integer")
        self.weights = dict(weights)
        self.reserved_high = reserved_high
        self._credit = dict.fromkeys(self.weights, 0)
        self._waited = dict.fromkeys(self.weights, 0)  # picks waited while ready, per level
        self._patience = sum(self.weights.values()) - 1  # picks a ready level may wait

    def pick(self, ready: Collection[str], free_slots: int = 1) -> str | None:
        """The level to serve next among `ready`, or None when none may take this slot."""
        if free_slots <= self.reserved_high:
            ready = [level for level in ready if level == Priority.HIGH]
        ready = [level for level in self.weights if level in ready]  # stable order for ties
        if not ready:
            return None
        total = 0
        for level in ready:
            self._credit[level] += self.weights[level]
            total += self.weights[level]
        overdue = [level for level in ready if self._waited[level] >= self._patience]
        if overdue:
            best = max(overdue, key=lambda level: self._waited[level])
        else:
            best = max(ready, key=lambda level: self._credit[level])
        self._credit[best] -= total
        for level in self._waited:
            self._waited[level] = self._waited[level] + 1 if level in ready else 0
        self._waited[best] = 0
        return best

    def served_alone(self, level: str) -> None:
        """The state after any number of `pick`s while `level` was the only ready level (and
        was given every slot): its credit earns and pays back its own weight each time, so it
        is unchanged, and no level has waited. Lets a caller hand out a lone level's slots at
        once instead of one pick per slot."""
        if level not in self.weights:
            raise ValueError(f"unknown level {level!r}")
        for other in self._waited:
            self._waited[other] = 0
