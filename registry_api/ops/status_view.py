"""How a status snapshot (status.py) is drawn: plain text (the command's default and the
per-shard table), and a compact screen for a terminal (`--watch`, and the demo's live view)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tickwheel.cli_support import table
from tickwheel.registry_api.ops.status import Snapshot


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else f"≤{value:g}s"


def _age(ms: int) -> str:
    return "0" if ms <= 0 else f"{ms / 1000:.1f}s"


def shard_rows(snap: Snapshot) -> list[tuple[Any, ...]]:
    return [
        (
            s.shard,
            s.holder or "NONE",
            s.owner or "-",
            s.epoch if s.epoch is not None else "-",
            s.wheel_entries if s.wheel_entries is not None else "-",
            _age(s.behind_ms),
        )
        for s in snap.shards
    ]


SHARD_HEADERS = ("SHARD", "HELD BY (ZK)", "OWNER (PG)", "EPOCH", "WHEEL", "BEHIND")
SCHEDULER_HEADERS = ("SCHEDULER", "METRICS", "SHARDS", "LAG P50", "LAG P99", "PUBLISHES")


def scheduler_rows(snap: Snapshot) -> list[tuple[Any, ...]]:
    return [
        (
            s.member,
            s.error or s.metrics or "(no --metrics-port)",
            s.shards_led if s.shards_led is not None else "-",
            _seconds(s.lag_p50_s),
            _seconds(s.lag_p99_s),
            s.lag_count,
        )
        for s in snap.schedulers
    ]


def summary_lines(snap: Snapshot) -> list[str]:
    backlog = ", ".join(f"{b.topic.rsplit('.', 1)[-1]} {b.backlog}" for b in snap.backlog)
    workers = "-" if snap.workers is None else str(len(snap.workers))
    names = "" if not snap.workers else " (" + ", ".join(w.client_id for w in snap.workers) + ")"
    return [
        f"deployment {snap.prefix}: {snap.led}/{len(snap.shards)} shards led, "
        f"{len(snap.schedulers)} schedulers",
        f"database belongs to: {snap.database_deployment or 'no deployment recorded'}",
        f"backlog: {backlog or '-'}",
        f"dlq messages: {'-' if snap.dlq_messages is None else snap.dlq_messages}",
        f"workers alive: {workers}{names}",
        *(f"error: {e}" for e in snap.errors),
    ]


def render_text(snap: Snapshot) -> str:
    return "\n".join(
        [
            *summary_lines(snap),
            "",
            table(SCHEDULER_HEADERS, scheduler_rows(snap)) if snap.schedulers else "no schedulers",
            "",
            table(SHARD_HEADERS, shard_rows(snap)),
        ]
    )


def _ranges(numbers: Sequence[int]) -> str:
    """[0, 1, 2, 5] → "0-2 5"."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return " ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs) or "-"


def _span(values: Sequence[int]) -> str:
    if not values:
        return "-"
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def compact_rows(snap: Snapshot) -> list[tuple[Any, ...]]:
    """One row per scheduler: the shards it holds, their epochs, wheel total and lag."""
    rows = []
    for sched in snap.schedulers:
        held = [s for s in snap.shards if s.holder == sched.member]
        epochs = [s.epoch for s in held if s.epoch is not None]
        wheel = [s.wheel_entries for s in held if s.wheel_entries is not None]
        rows.append(
            (
                sched.member,
                _ranges([s.shard for s in held]),
                _span(epochs),
                sum(wheel) if wheel else "-",
                _seconds(sched.lag_p50_s),
                _seconds(sched.lag_p99_s),
                sched.error or sched.metrics or "(no --metrics-port)",
            )
        )
    return rows


COMPACT_HEADERS = ("SCHEDULER", "SHARDS HELD", "EPOCHS", "WHEEL", "LAG P50", "LAG P99", "METRICS")


def attention_lines(snap: Snapshot) -> list[str]:
    """Shards that need a look: not held, held by someone else than the last owner, behind."""
    free = [s.shard for s in snap.shards if s.holder is None]
    moving = [s.shard for s in snap.shards if s.holder is not None and s.holder != s.owner]
    behind = [f"{s.shard} ({_age(s.behind_ms)})" for s in snap.shards if s.behind_ms >= 1000]
    return [
        f"shards not held: {_ranges(free) if free else 'none'}",
        f"shards being taken over: {_ranges(moving) if moving else 'none'}",
        f"shards behind by 1 s or more: {', '.join(behind) if behind else 'none'}",
    ]


def render_rich(snap: Snapshot, extra: Sequence[Any] = ()) -> Any:
    """The screen for a terminal, compact enough for 80x24: one row per scheduler (the
    per-shard table is in the plain output and --json)."""
    from rich.console import Group
    from rich.table import Table

    screen = Table(show_edge=False, pad_edge=False)
    for header in COMPACT_HEADERS:
        screen.add_column(header)
    for row in compact_rows(snap):
        screen.add_row(*(str(v) for v in row))
    return Group(*summary_lines(snap), screen, *attention_lines(snap), *extra)
