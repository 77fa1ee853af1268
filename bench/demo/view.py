"""The demo's live view: `tickwheel status`'s screen of its deployment (registry_api/ops/) plus
executions by outcome (the workers' metrics) and runs by status (the ledger), redrawn on a
terminal, or one plain line every few seconds without one."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from tickwheel.bench.supervisor import Supervisor
from tickwheel.config import Settings

VIEW_INTERVAL_S = 1.0  # live view refresh with a terminal
PLAIN_INTERVAL_S = 5.0  # one plain line this often without one
METRICS_TIMEOUT_S = 2.0

Fetch = Callable[..., Coroutine[Any, Any, list[Any]]]  # (query name, *args) → rows


@dataclass
class LiveView:
    settings: Settings  # the demo's deployment: its database, prefix, shards
    children: Supervisor
    fetch: Fetch
    tenant: str
    say: Callable[[str], None]
    started: float  # time.monotonic() of the demo's start

    def snapshot(self, previous: Any = None) -> Any:
        from tickwheel.registry_api.ops.status import collect

        return asyncio.run(collect(self.settings, previous))

    def executions(self) -> Counter[str]:
        """Executions by outcome, summed over the workers' metrics."""
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        total: Counter[str] = Counter()
        for child in self.children.children.values():
            if child.metrics_port is None or not child.alive():
                continue
            try:
                text = httpx.get(
                    f"http://127.0.0.1:{child.metrics_port}/metrics", timeout=METRICS_TIMEOUT_S
                ).text
            except httpx.HTTPError:
                continue
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name == "tickwheel_worker_executions_total":
                        total[sample.labels["outcome"]] += int(sample.value)
        return total

    def run_counts(self) -> Counter[str]:
        rows = asyncio.run(self.fetch("demo_run_counts", self.tenant))
        return Counter({r["status"]: r["n"] for r in rows})

    def show(self, seconds: float, title: str, until: Callable[[], bool] | None = None) -> None:
        """Show the live view for `seconds` (or until `until()` holds)."""
        deadline = time.monotonic() + seconds

        def done() -> bool:
            return time.monotonic() >= deadline or (until is not None and until())

        if sys.stdout.isatty():
            from rich.live import Live

            previous = None
            with Live(auto_refresh=False, transient=False) as live:
                while not done():
                    self.children.check()
                    previous = self.snapshot(previous)
                    live.update(self._rich_view(previous, title), refresh=True)
                    time.sleep(VIEW_INTERVAL_S)
            return
        previous = None
        next_line = 0.0
        while not done():
            self.children.check()
            if time.monotonic() >= next_line:
                previous = self.snapshot(previous)
                self.say(self._plain_line(previous))
                next_line = time.monotonic() + PLAIN_INTERVAL_S
            time.sleep(0.2)

    def elapsed(self) -> str:
        return f"t+{time.monotonic() - self.started:.0f}s"

    def _plain_line(self, snap: Any) -> str:
        epochs = sorted({s.epoch for s in snap.shards if s.epoch is not None})
        wheel = sum(s.wheel_entries or 0 for s in snap.shards)
        lag = max((s.lag_p99_s or 0 for s in snap.schedulers), default=0)
        ex, runs = self.executions(), self.run_counts()
        return (
            f"   {self.elapsed()}: shards led {snap.led}/{len(snap.shards)} "
            f"(epochs {epochs[0] if epochs else '-'}..{epochs[-1] if epochs else '-'}), "
            f"wheels {wheel}, dispatch lag p99 ≤{lag:g}s, "
            f"backlog {sum(b.backlog for b in snap.backlog)}, "
            f"executions {dict(sorted(ex.items()))}, runs {dict(sorted(runs.items()))}, "
            f"dlq {snap.dlq_messages}"
        )

    def _rich_view(self, snap: Any, title: str) -> Any:
        from rich.table import Table

        from tickwheel.registry_api.ops.status_view import render_rich

        ex, runs = self.executions(), self.run_counts()
        t = Table(title=f"{title} — {self.elapsed()}", title_justify="left", show_edge=False)
        t.add_column("executions (workers)")
        t.add_column("runs (ledger)")
        left = [f"{k} {v}" for k, v in sorted(ex.items())]
        right = [f"{k} {v}" for k, v in sorted(runs.items())]
        for i in range(max(len(left), len(right))):
            t.add_row(left[i] if i < len(left) else "", right[i] if i < len(right) else "")
        return render_rich(snap, [t])
