"""The cached evaluator shard leaders use on their hot path.

Two layers, both LRU-bounded:

* requests — (expression, zone, key, dst.gap, dst.overlap) → a shared evaluation. The key is
  dropped from the request when the expression has no `H` (so 100,000 jobs on ten expressions
  make ten requests), and a parse happens once per request;
* evaluations — one per `CronSchedule.evaluation_key`: jobs whose `H` fields resolve to the same
  concrete expression share one, and so do interval-style jobs that differ only in their
  (inapplicable) DST policies. An evaluation keeps a window of up to `window` consecutive fire
  times: `next_after(t)` for any t inside it is a bisection, and a t just past its end extends
  it by the fires needed. So all jobs on one schedule — advancing from the instant they just
  fired at, or registered at scattered instants, or spread over several phases of a short
  period — compute each fire time once. A question far from the window starts a new one.

Not thread-safe: one instance belongs to one asyncio loop.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass

from tickwheel.schedule.cron import CronSchedule, parse_cron, uses_key

DEFAULT_MAX_REQUESTS = 200_000  # entries; ~150 bytes each plus the key strings
DEFAULT_MAX_EVALUATIONS = 50_000  # entries; each holds a parsed schedule and its window
DEFAULT_WINDOW = 32  # fire times an evaluation keeps at most (~1.3 KB)
EXTEND_STEPS = 8  # fire times computed at most to extend a window before starting a new one
_MAX_EXPRESSION_FLAGS = 10_000  # distinct expression texts whose H-use is remembered

_Request = tuple[str, str, str | None, str, str]


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters since the cache was made (for metrics and the benchmark)."""

    calls: int  # next_after calls
    parses: int  # requests parsed (request-layer misses)
    evaluations: int  # evaluations created (distinct schedules)
    computations: int  # uncached fire-time computations (CronSchedule.next_after calls)
    requests_cached: int
    evaluations_cached: int


class _Evaluation:
    """A schedule and a window of its consecutive fire times: every fire in `(from_ms, last]`."""

    __slots__ = ("_fires", "_from_ms", "schedule")

    def __init__(self, schedule: CronSchedule) -> None:
        self.schedule = schedule
        self._from_ms = 0
        self._fires: list[int] = []

    def next_after(self, after_ms: int, window: int, counter: list[int]) -> int | None:
        fires = self._fires
        if fires and self._from_ms <= after_ms:
            if after_ms < fires[-1]:
                return fires[bisect_right(fires, after_ms)]
            # Just past the window — the leader asking from the instant its jobs just fired
            # at — extend it by the few fires needed; each is computed once for all jobs.
            schedule = self.schedule
            current = fires[-1]
            for _ in range(EXTEND_STEPS):
                found = schedule.next_after(current)
                counter[0] += 1
                if found is None:
                    return None  # the window reaches the schedule's end
                fires.append(found)
                if found > after_ms:
                    if len(fires) > window:
                        # Keep the newer half: the older fires' jobs have moved on.
                        keep = window // 2
                        self._from_ms = fires[-keep - 1]
                        del fires[: len(fires) - keep]
                    return found
                current = found
        # Before the window, far beyond it, or no window yet: start a new one at after_ms.
        found = self.schedule.next_after(after_ms)
        counter[0] += 1
        if found is not None:
            self._from_ms, self._fires = after_ms, [found]
        return found


class ScheduleCache:
    """Parse-once, compute-once evaluation of many jobs' schedules."""

    def __init__(
        self,
        *,
        max_requests: int = DEFAULT_MAX_REQUESTS,
        max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        if max_requests < 1 or max_evaluations < 1 or window < 2:
            raise ValueError("max_requests and max_evaluations must be >= 1, window >= 2")
        self._max_requests = max_requests
        self._max_evaluations = max_evaluations
        self._window = window
        self._requests: OrderedDict[_Request, _Evaluation] = OrderedDict()
        self._evaluations: OrderedDict[tuple[str, str, str, str], _Evaluation] = OrderedDict()
        self._expression_uses_key: dict[str, bool] = {}
        self._calls = 0
        self._parses = 0
        self._created = 0
        self._computations = [0]  # a cell the evaluations add to

    def schedule(
        self,
        expr: str,
        tz: str = "UTC",
        key: str | None = None,
        dst_gap: str = "shift",
        dst_overlap: str = "first",
    ) -> CronSchedule:
        """The parsed schedule for these settings, naming this key (raises ScheduleError like
        `parse_cron`).

        An evaluation is shared by every key whose `H` fields resolve alike, and its schedule
        names the key that made it: a job whose H resolves like another job's (perhaps another
        tenant's) gets its own parse, never the other key.
        """
        schedule = self._evaluation(expr, tz, key, dst_gap, dst_overlap).schedule
        if schedule.key == key or not uses_key(expr):
            return schedule
        return parse_cron(expr, tz=tz, key=key, dst_gap=dst_gap, dst_overlap=dst_overlap)

    def next_after(
        self,
        expr: str,
        tz: str,
        key: str | None,
        dst_gap: str,
        dst_overlap: str,
        after_ms: int,
    ) -> int | None:
        """`parse_cron(expr, ...).next_after(after_ms)`, from cache whenever possible."""
        self._calls += 1
        evaluation = self._evaluation(expr, tz, key, dst_gap, dst_overlap)
        return evaluation.next_after(after_ms, self._window, self._computations)

    def stats(self) -> CacheStats:
        """Counters since the cache was made."""
        return CacheStats(
            calls=self._calls,
            parses=self._parses,
            evaluations=self._created,
            computations=self._computations[0],
            requests_cached=len(self._requests),
            evaluations_cached=len(self._evaluations),
        )

    def _evaluation(
        self, expr: str, tz: str, key: str | None, dst_gap: str, dst_overlap: str
    ) -> _Evaluation:
        flag = self._expression_uses_key.get(expr)
        if flag is None:
            flag = uses_key(expr)
            if len(self._expression_uses_key) >= _MAX_EXPRESSION_FLAGS:
                self._expression_uses_key.clear()
            self._expression_uses_key[expr] = flag
        request = (expr, tz, key if flag else None, dst_gap, dst_overlap)
        requests = self._requests
        evaluation = requests.get(request)
        if evaluation is not None:
            requests.move_to_end(request)
            return evaluation
        schedule = parse_cron(expr, tz=tz, key=key, dst_gap=dst_gap, dst_overlap=dst_overlap)
        self._parses += 1
        evaluations = self._evaluations
        shared = evaluations.get(schedule.evaluation_key)
        if shared is None:
            shared = _Evaluation(schedule)
            self._created += 1
            evaluations[schedule.evaluation_key] = shared
            if len(evaluations) > self._max_evaluations:
                # An evicted evaluation stays usable by the requests that hold it; it only
                # stops being shared with new ones.
                evaluations.popitem(last=False)
        else:
            evaluations.move_to_end(schedule.evaluation_key)
        requests[request] = shared
        if len(requests) > self._max_requests:
            requests.popitem(last=False)
        return shared
