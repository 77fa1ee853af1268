"""A cron job's active window as the preview tells it (D-281): the window's bounds and
`after_end`, occurrences bounded by it (`tickwheel.schedule.in_window`), and the reasons it
adds to an occurrence — the first of a window not open yet, and its last. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tickwheel.schedule.instants import format_utc
from tickwheel.schedule.next_fire import in_window


@dataclass(frozen=True, slots=True)
class Window:
    """A cron job's active window: `start_at`, `end_at` (both inclusive; None: unbounded) and
    `after_end` (None: complete)."""

    start_ms: int | None = None
    end_ms: int | None = None
    after_end: str | None = None

    def bound(self, next_after: Callable[[int], int | None]) -> Callable[[int], int | None]:
        """`next_after` with no occurrence outside the window."""
        return lambda t: in_window(next_after, t, self.start_ms, self.end_ms)

    def to_dict(self, instant: Callable[[int], str] = format_utc) -> dict[str, Any]:
        return {
            "start_at": None if self.start_ms is None else instant(self.start_ms),
            "end_at": None if self.end_ms is None else instant(self.end_ms),
            "after_end": self.after_end or "complete",
        }


def window_reasons(
    window: Window,
    instant: int,
    first: bool,
    since_ms: int,
    next_after: Callable[[int], int | None],
) -> tuple[tuple[str, str], ...]:
    """The window's part in an occurrence, as (rule, text) pairs: the first of a window not
    open at `since_ms`, and the last one before its end."""
    reasons: list[tuple[str, str]] = []
    if first and window.start_ms is not None and window.start_ms > since_ms:
        reasons.append(
            (
                "start_at",
                f"the window opens at {format_utc(window.start_ms)}: no occurrence before it",
            )
        )
    if window.end_ms is not None and next_after(instant) is None:
        then = "is deleted" if window.after_end == "delete" else "completes"
        reasons.append(
            (
                "end_at",
                f"the last occurrence at or before end_at "
                f"({format_utc(window.end_ms)}): after it the job {then}",
            )
        )
    return tuple(reasons)
