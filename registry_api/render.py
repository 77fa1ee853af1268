"""Response bodies of the HTTP API: stored jobs and runs as JSON-ready dicts.

Instants are ISO-8601 UTC with milliseconds and `Z` (`2026-12-01T09:00:00.000Z`); a job's
fields come back in the document's own order (jsonb would give them ordered by key length).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from tickwheel.clock import format_datetime, format_ms
from tickwheel.domain import JobStatus
from tickwheel.registry_api.document import Backoff, Dst, JobDocument, JobSpec, Misfire, Target
from tickwheel.registry_api.rows import JobView, RunView
from tickwheel.runtime import PartState
from tickwheel.schedule import SHARED
from tickwheel.schedule.calendars import Calendar, excluded_by
from tickwheel.schedule.explain import MisfireSettings, explain_cron, explain_once
from tickwheel.schedule.window import Window

_FIELD_ORDER = tuple(JobDocument.model_fields)
_NESTED_ORDER = {
    name: tuple(model.model_fields)
    for name, model in (
        ("backoff", Backoff),
        ("misfire", Misfire),
        ("dst", Dst),
        ("target", Target),
    )
}


def iso_ms(instant_ms: int | None) -> str | None:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ` for UTC milliseconds (None stays None)."""
    return None if instant_ms is None else format_ms(instant_ms)


def iso_dt(moment: dt.datetime | None) -> str | None:
    return None if moment is None else format_datetime(moment)


def _in_order(value: Any, order: tuple[str, ...]) -> Any:
    if not isinstance(value, dict):
        return value
    return {name: value[name] for name in order if name in value} | value


def job_body(view: JobView) -> dict[str, Any]:
    doc = view.document
    body = {
        name: _in_order(doc[name], _NESTED_ORDER.get(name, ()))
        for name in _FIELD_ORDER
        if name in doc
    }
    body.update(
        {
            "next_run_at": iso_ms(view.next_run_at),
            "status": view.status,
            "version": view.version,
            "created_at": iso_dt(view.created_at),
            "updated_at": iso_dt(view.updated_at),
            "pause_note": (
                None
                if view.pause_note is None
                else {
                    "by": view.pause_note[0],
                    "why": view.pause_note[1],
                    "at": iso_dt(view.pause_note[2]),
                }
            ),
        }
    )
    return body


def run_body(run: RunView) -> dict[str, Any]:
    return {
        "run_key": run.run_key,
        "scheduled_at": iso_ms(run.scheduled_at),
        "status": run.status,
        "attempt": run.attempt,
        "started_at": iso_dt(run.started_at),
        "finished_at": iso_dt(run.finished_at),
        "last_error": run.last_error,
        "origin": run.origin,
    }


def parts_body(parts: Mapping[str, PartState]) -> dict[str, Any]:
    """The process's long-running parts as /healthz reports them."""
    return {
        name: {
            "alive": part.alive,
            "error": part.error,
            "updated_at": iso_ms(int(part.updated_at * 1000)),
            "detail": dict(part.detail),
        }
        for name, part in parts.items()
    }


def preview_body(
    view: JobView,
    spec: JobSpec,
    count: int,
    now_ms: int,
    runs_done: int | None = None,
    calendars: Mapping[str, Calendar] | None = None,
) -> dict[str, Any]:
    """The job's next `count` occurrences with why each is there (schedule/explain.py).

    An active job's list starts at its `next_run_at` (overdue or not: the misfire outlook says
    what a claim now does with it); a paused cron job's at what resuming now would schedule
    (the paused time is not caught up); a completed one-off has none. `calendars`: those of
    the job's calendars that exist, by name; an occurrence one excludes says so.
    """
    doc = spec.document
    misfire = MisfireSettings(doc.misfire.policy, doc.misfire.grace_ms, doc.misfire.max_catchup)
    if doc.schedule is None:
        at_ms = None if view.status == JobStatus.COMPLETED else spec.timing.at_ms
        preview = explain_once(at_ms, doc.timezone, now_ms=now_ms, misfire=misfire)
    else:
        schedule = SHARED.schedule(
            doc.schedule, doc.timezone, spec.key, doc.dst.gap, doc.dst.overlap
        )
        start_ms, end_ms = spec.window_ms
        window = None
        next_after: Callable[[int], int | None] = schedule.next_after
        if start_ms is not None or end_ms is not None:
            window = Window(start_ms, end_ms, doc.after_end)
            next_after = window.bound(schedule.next_after)
        first = view.next_run_at
        if view.status == JobStatus.PAUSED:
            first = next_after(now_ms)
        elif view.status == JobStatus.COMPLETED:  # its window ended
            first = None
        named = [calendars[n] for n in doc.calendars or () if calendars and n in calendars]
        instants: list[int] = []
        # no more runs than are left (an excluded occurrence is not a run)
        runs_left = None if doc.max_runs is None else max(0, doc.max_runs - (runs_done or 0))
        while first is not None and len(instants) < count and runs_left != 0:
            instants.append(first)
            if runs_left is not None and not (named and excluded_by(named, first)):
                runs_left -= 1
            first = next_after(first)
        preview = explain_cron(
            schedule,
            instants,
            after_ms=None,
            now_ms=now_ms,
            misfire=misfire,
            window=window,
            exclusions=(lambda ms: excluded_by(named, ms)) if named else None,
            jitter=(spec.key, doc.jitter_ms) if doc.jitter_ms else None,
        )
    body = {"id": doc.id, "status": view.status, **preview.to_dict(format_ms), "runs": None}
    body["calendars"] = None
    if doc.calendars:
        body["calendars"] = [
            {"name": n, "exists": calendars is not None and n in calendars} for n in doc.calendars
        ]
    if doc.max_runs is not None:
        done = runs_done or 0
        left = max(0, doc.max_runs - done)
        body["runs"] = {"max_runs": doc.max_runs, "done": done, "left": left}
        runs = [o for o in body["occurrences"] if o["excluded"] is None]
        if left and len(runs) == left:
            runs[-1]["reasons"].append(
                {
                    "rule": "max_runs",
                    "text": f"run {doc.max_runs} of {doc.max_runs}, the last: after it the job "
                    "completes",
                }
            )
    return body
