"""The job document (DESIGN §7): its shape, its validation, and what it means for the database.

One validation path serves HTTP and Kafka: `JobDocument` checks the shape (pydantic, and it is
also the OpenAPI schema), `validate_job` adds what needs context — the schedule in its zone, the
payload size limit, the target allowlist — and yields a `JobSpec`: the normalised document plus
the columns derived from it. Every problem is a `FieldProblem` naming the field and the allowed
form; nothing is silently dropped or defaulted away.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from itertools import islice, takewhile
from typing import Any

import orjson
from pydantic import ValidationError

from tickwheel.clock import format_ms
from tickwheel.domain import JobKind, job_key
from tickwheel.idempotency_keys import TemplateError
from tickwheel.idempotency_keys import parse as parse_template
from tickwheel.idempotency_keys import render as render_key
from tickwheel.schedule import (
    GAP_SAMPLE,
    GAP_SPAN_MS,
    SHARED,
    ScheduleError,
    Timing,
    first_run_at,
    in_window,
    next_fire_after,
    parse_at,
    shortest_gap,
)
from tickwheel.sharding import shard_of
from tickwheel.target_rules import TargetError, check_headers, check_target_url
from tickwheel.wire.job import (
    BACKOFF_LIMIT_MS,
    HANDLER_PATTERN,
    JOB_ID_PATTERN,
    MAX_ATTEMPTS_LIMIT,
    TIMEOUT_LIMIT_MS,
    VERSION_MAX,
    VERSION_MIN,
    Backoff,
    Dst,
    DstGapValue,
    DstOverlapValue,
    JobDocument,
    Misfire,
    MisfireValue,
    OverlapValue,
    PriorityValue,
    Target,
)

# The document's shape lives on the ground (tickwheel.wire.job), where clients import it too;
# the registry's modules keep importing it from here.
__all__ = [
    "BACKOFF_LIMIT_MS",
    "HANDLER_PATTERN",
    "JOB_ID_PATTERN",
    "JSON_MAX_DEPTH",
    "MAX_ATTEMPTS_LIMIT",
    "PAUSE_NOTE_MAX_CHARS",
    "TIMEOUT_LIMIT_MS",
    "VERSION_MAX",
    "VERSION_MIN",
    "Backoff",
    "Dst",
    "DstGapValue",
    "DstOverlapValue",
    "FieldProblem",
    "JobDocument",
    "JobSpec",
    "JobValidationError",
    "Limits",
    "Misfire",
    "MisfireValue",
    "OpRefused",
    "OverlapValue",
    "PriorityValue",
    "Target",
    "check_pause_note",
    "check_version",
    "parse_document",
    "spec_from_stored",
    "storable_problems",
    "validate_job",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FieldProblem:
    field: str  # dotted path in the job document, e.g. "backoff.cap_ms"
    message: str

    def __str__(self) -> str:
        # Schedule errors already read "schedule '…': …"; do not name the field twice.
        if not self.field or self.message.startswith(self.field):
            return self.message
        return f"{self.field}: {self.message}"


# The document's fields that mean something for a cron schedule only.
CRON_ONLY = ("start_at", "end_at", "after_end", "pause_after_dead_runs", "max_runs", "calendars")


class OpRefused(ValueError):
    """An operation the store refused in its transaction; `field` names the input at fault
    (a backfill's range, a calendar a job names that the tenant does not have)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class JobValidationError(ValueError):
    """A job document that cannot be accepted; `problems` lists every field at fault."""

    def __init__(self, problems: list[FieldProblem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


def check_version(version: int | None) -> None:
    """JobValidationError (field `version`) unless `version` is None or within the bounds."""
    if version is not None and not VERSION_MIN <= version <= VERSION_MAX:
        shown = str(version) if abs(version) < 10**30 else f"a {len(str(version))}-digit number"
        raise JobValidationError(
            [
                FieldProblem(
                    "version",
                    f"must be an integer from {VERSION_MIN} to {VERSION_MAX}, not {shown}",
                )
            ]
        )


@dataclass(frozen=True)
class Limits:
    """The operator's limits a job document is checked against."""

    payload_limit_bytes: int = 262_144
    target_allowlist: tuple[str, ...] = ()
    shards: int = 64


@dataclass(frozen=True)
class JobSpec:
    """A validated job: the normalised document and the columns derived from it."""

    tenant: str
    document: JobDocument
    shard_id: int
    # (after_ms, result) of the last next_fire_after: a batch asks the same question twice.
    _memo: list[tuple[int, int | None]] = field(default_factory=list, compare=False, repr=False)

    @property
    def job_id(self) -> str:
        return self.document.id

    @property
    def key(self) -> str:
        return job_key(self.tenant, self.document.id)

    @property
    def kind(self) -> JobKind:
        return JobKind.CRON if self.document.schedule is not None else JobKind.ONCE

    # The dump of `stored_document`, made once (a list cell: the dataclass is frozen).
    _stored: list[dict[str, Any]] = field(default_factory=list, compare=False, repr=False)

    @property
    def stored_document(self) -> dict[str, Any]:
        """The document with every default filled in: what is stored and compared."""
        # Not functools.cached_property: on Python 3.11 it takes a lock on every access,
        # which cost more than the dump itself on the intake's hot path.
        if not self._stored:
            self._stored.append(self.document.model_dump(mode="json"))
        return self._stored[0]

    @property
    def timing(self) -> Timing:
        """When the job fires, as `tickwheel.schedule` computes it (made on demand: the hot
        path answers from `_memo` and never needs it)."""
        doc = self.document
        start_ms, end_ms = self.window_ms
        return Timing(
            key=self.key,
            schedule=doc.schedule,
            at_ms=None if doc.at is None else parse_at(doc.at),
            timezone=doc.timezone,
            dst_gap=doc.dst.gap,
            dst_overlap=doc.dst.overlap,
            start_ms=start_ms,
            end_ms=end_ms,
        )

    @property
    def window_ms(self) -> tuple[int | None, int | None]:
        """The active window's (start, end) as UTC ms (None: unbounded on that side)."""
        doc = self.document
        return (
            None if doc.start_at is None else parse_at(doc.start_at),
            None if doc.end_at is None else parse_at(doc.end_at),
        )

    def next_fire_after(self, after_ms: int) -> int | None:
        """`schedule.next_fire_after` of this job, with the process's shared cache."""
        if self._memo:
            # The next fire after an earlier instant t0 is also the next after any later
            # instant before it: validation's answer serves the batch's later `now`.
            since, found = self._memo[0]
            if since <= after_ms and (found is None or found > after_ms):
                return found
        found = next_fire_after(SHARED, self.timing, after_ms)
        if self.document.schedule is not None:
            self._memo[:] = [(after_ms, found)]
        return found

    def first_run_at(self, now_ms: int) -> int | None:
        """`schedule.first_run_at` of this job: a one-off in the past keeps its instant."""
        if self.document.at is not None:
            return first_run_at(SHARED, self.timing, now_ms)
        return self.next_fire_after(now_ms)


def _pydantic_problems(exc: ValidationError) -> list[FieldProblem]:
    problems = []
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "is not a field of the job document"
        elif err["type"] == "missing":
            message = "is required"
        problems.append(FieldProblem(path, message))
    return problems


def parse_document(raw: Any) -> JobDocument:
    """Check the shape of a raw job document (a dict from JSON)."""
    if not isinstance(raw, dict):
        raise JobValidationError([FieldProblem("", "a job document must be a JSON object")])
    try:
        return JobDocument.model_validate(raw)
    except ValidationError as exc:
        raise JobValidationError(_pydantic_problems(exc)) from None


# Nesting levels a JSON value (a payload) may have: each array or object is one level, the
# outermost included, whatever it holds (orjson itself stops at 255).
JSON_MAX_DEPTH = 64
INT64_MIN, UINT64_MAX = -(2**63), 2**64 - 1  # the integers orjson can write


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains the NUL character (\\u0000), which cannot be stored"
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            return "contains a lone UTF-16 surrogate (e.g. \\ud800), which is not Unicode text"
    return None


def storable_problems(value: Any, path: str = "") -> list[FieldProblem]:
    """What in a JSON value the store cannot write as it is (Postgres jsonb, orjson)."""
    problems: list[FieldProblem] = []
    # Iterative, so a hostile nesting depth costs no Python recursion.
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack and len(problems) < 10:
        item, where, depth = stack.pop()
        if isinstance(item, (dict, list)) and depth >= JSON_MAX_DEPTH:
            # `depth` containers enclose this one: it is level depth + 1.
            problems.append(FieldProblem(where, f"nests deeper than {JSON_MAX_DEPTH} levels"))
        elif isinstance(item, str):
            if (message := _string_problem(item)) is not None:
                problems.append(FieldProblem(where, message))
        elif isinstance(item, bool) or item is None:
            pass
        elif isinstance(item, int):
            if not INT64_MIN <= item <= UINT64_MAX:
                problems.append(FieldProblem(where, "is an integer outside the 64-bit range"))
        elif isinstance(item, float):
            if not math.isfinite(item):
                problems.append(FieldProblem(where, "must be a finite number (JSON has no NaN)"))
        elif isinstance(item, dict):
            for key, child in item.items():
                if (message := _string_problem(str(key))) is not None:
                    problems.append(FieldProblem(where, f"has a key that {message}"))
                stack.append((child, f"{where}.{key}" if where else str(key), depth + 1))
        elif isinstance(item, list):
            stack.extend(
                (child, f"{where}.{i}" if where else str(i), depth + 1)
                for i, child in enumerate(item)
            )
    return problems


def _free_text_problems(doc: JobDocument) -> list[FieldProblem]:
    """The document's only unconstrained strings (the rest are patterns, literals, bounded
    integers): checked one by one, which is far cheaper than walking the whole document."""
    texts: list[tuple[str, str | None]] = [
        ("schedule", doc.schedule),
        ("at", doc.at),
        ("timezone", doc.timezone),
    ]
    for name in ("start_at", "end_at", "idempotency_key_template"):
        if (text := getattr(doc, name)) is not None:
            texts.append((name, text))
    if doc.target is not None:
        texts.append(("target.url", doc.target.url))
        for name, value in doc.target.headers.items():
            texts += [("target.headers", name), (f"target.headers.{name}", value)]
    problems = []
    for where, text in texts:
        if text is not None and (message := _string_problem(text)) is not None:
            problems.append(FieldProblem(where, message))
    return problems


def validate_job(tenant: str, doc: JobDocument, limits: Limits, now_ms: int) -> JobSpec:
    """Everything about a document that needs context; raises only JobValidationError.

    Both intake paths rely on that: anything else escaping here would be a 500 over HTTP and a
    stalled partition in the Kafka intake. An unforeseen error is therefore input the checks
    failed to name: it is refused as such, and logged as the bug it is.
    """
    try:
        return _validate_job(tenant, doc, limits, now_ms)
    except JobValidationError:
        raise
    except Exception as exc:
        log.exception("validate_job raised %s instead of JobValidationError", type(exc).__name__)
        raise JobValidationError(
            [
                FieldProblem(
                    "", f"the job document could not be validated ({type(exc).__name__}: {exc})"
                )
            ]
        ) from None


def _validate_job(tenant: str, doc: JobDocument, limits: Limits, now_ms: int) -> JobSpec:
    # First what the store could not write: these would fail the whole batch's transaction
    # (or orjson.dumps below) instead of rejecting the one document.
    problems = _free_text_problems(doc)
    problems += storable_problems(doc.payload, "payload")
    if doc.payload is None:
        # The store writes a JSON null as SQL NULL, which jobs.payload refuses.
        problems.append(FieldProblem("payload", "must not be null; leave it out for {}"))
    if problems:
        raise JobValidationError(problems)
    key = job_key(tenant, doc.id)
    if (doc.schedule is None) == (doc.at is None):
        raise JobValidationError(
            [
                FieldProblem(
                    "schedule", "give exactly one of 'schedule' (cron) and 'at' (one-off instant)"
                )
            ]
        )
    if (doc.handler is None) == (doc.target is None):
        problems.append(FieldProblem("handler", "give exactly one of 'handler' and 'target'"))
    upcoming: int | None = None
    window, window_problems = _window(doc)
    problems += window_problems
    if doc.schedule is not None:
        schedule = doc.schedule
        try:
            upcoming = in_window(
                lambda t: SHARED.next_after(
                    schedule, doc.timezone, key, doc.dst.gap, doc.dst.overlap, t
                ),
                now_ms,
                *window,
            )
            if upcoming is None and window[1] is not None and not window_problems:
                problems.append(
                    FieldProblem(
                        "end_at",
                        f"no occurrence of the schedule falls between now ({format_ms(now_ms)}) "
                        f"and end_at ({format_ms(window[1])}): the job would never run",
                    )
                )
            elif upcoming is None:
                problems.append(FieldProblem("schedule", "has no future occurrence"))
            elif doc.jitter_ms:
                problems += _jitter_problems(doc, key, now_ms)
        except ScheduleError as exc:
            problems.append(FieldProblem(exc.field, exc.message))
    else:
        assert doc.at is not None
        try:
            parse_at(doc.at)
        except ScheduleError as exc:
            problems.append(FieldProblem("at", exc.message))
        try:  # one-offs need a valid zone too
            SHARED.schedule("0 0 * * *", tz=doc.timezone)
        except ScheduleError as exc:
            problems.append(FieldProblem(exc.field, exc.message))
    size = len(orjson.dumps(doc.payload))
    if size > limits.payload_limit_bytes:
        problems.append(
            FieldProblem(
                "payload", f"is {size} bytes of JSON; the limit is {limits.payload_limit_bytes}"
            )
        )
    if doc.idempotency_key_template is not None:
        problems += _template_problems(tenant, doc, upcoming if doc.schedule else None)
    if doc.target is not None:
        try:
            url = check_target_url(doc.target.url, limits.target_allowlist)
            check_headers(doc.target.headers)
        except TargetError as exc:
            problems.append(FieldProblem(exc.field, exc.message))
        else:
            if url != doc.target.url:  # store (and compare) the URL as servers will read it
                doc = doc.model_copy(update={"target": doc.target.model_copy(update={"url": url})})
    if problems:
        raise JobValidationError(problems)
    spec = JobSpec(tenant=tenant, document=doc, shard_id=shard_of(tenant, doc.id, limits.shards))
    if doc.schedule is not None:
        spec._memo.append((now_ms, upcoming))
    return spec


def _window(doc: JobDocument) -> tuple[tuple[int | None, int | None], list[FieldProblem]]:
    """The active window's (start, end) in UTC ms, and what is wrong with it (and with the
    other cron-only fields on a one-off)."""
    if (
        doc.start_at is None
        and doc.end_at is None
        and doc.after_end is None
        and doc.pause_after_dead_runs is None
        and doc.max_runs is None
        and doc.calendars is None
        and not doc.jitter_ms
    ):
        return (None, None), []  # most jobs: nothing to check
    problems: list[FieldProblem] = []
    bounds: list[int | None] = []
    for name in ("start_at", "end_at"):
        text = getattr(doc, name)
        if text is None:
            bounds.append(None)
            continue
        try:
            bounds.append(parse_at(text))
        except ScheduleError as exc:
            problems.append(FieldProblem(name, exc.message))
            bounds.append(None)
    start, end = bounds
    if doc.at is not None:
        problems += [
            FieldProblem(name, "applies to a cron schedule only; a one-off runs once, at 'at'")
            for name in CRON_ONLY
            if getattr(doc, name) is not None
        ]
        if doc.jitter_ms:  # 0 is no jitter, on any job
            problems.append(
                FieldProblem("jitter_ms", "applies to a cron schedule only; a one-off runs at 'at'")
            )
    elif doc.after_end is not None and doc.end_at is None:
        problems.append(
            FieldProblem("after_end", "needs end_at: without it the schedule never ends")
        )
    if start is not None and end is not None and end <= start:
        problems.append(
            FieldProblem(
                "end_at",
                f"must be after start_at ({format_ms(start)}), not {format_ms(end)}",
            )
        )
    return (start, end), problems


def _jitter_problems(doc: JobDocument, key: str, now_ms: int) -> list[FieldProblem]:
    """`jitter_ms` must be below the schedule's period: the shortest gap between consecutive
    occurrences among the next `GAP_SAMPLE` after now within `GAP_SPAN_MS`, in the job's zone
    with its DST policies (D-287; the active window aside, which only removes occurrences).
    Computed on the parsed schedule rather than through the shared cache, whose windows the
    walk would move on."""
    jitter = doc.jitter_ms
    assert doc.schedule is not None and jitter
    schedule = SHARED.schedule(doc.schedule, doc.timezone, key, doc.dst.gap, doc.dst.overlap)
    until = now_ms + GAP_SPAN_MS
    sample = takewhile(lambda t: t <= until, islice(schedule.iter_after(now_ms), GAP_SAMPLE))
    gap = shortest_gap(sample)
    if gap is None or jitter < gap:
        return []
    return [
        FieldProblem(
            "jitter_ms",
            f"must be below the schedule's period: its shortest gap between two consecutive "
            f"occurrences is {gap} ms (among the next {GAP_SAMPLE}, within "
            f"{GAP_SPAN_MS // 86_400_000} days); got {jitter}",
        )
    ]


def _template_problems(tenant: str, doc: JobDocument, upcoming: int | None) -> list[FieldProblem]:
    """What is wrong with `idempotency_key_template`: it must parse, and a sample key (the next
    occurrence's, or the one-off's) must be a valid header value."""
    template = doc.idempotency_key_template
    assert template is not None
    where = "idempotency_key_template"
    if doc.target is None:
        return [
            FieldProblem(
                where, "applies to an HTTP target only; a handler gets ctx.run_key to send"
            )
        ]
    try:
        parse_template(template)
        sample = upcoming
        if sample is None and doc.at is not None:
            sample = parse_at(doc.at)
        if sample is not None:
            render_key(template, tenant, doc.id, sample, doc.timezone)
    except TemplateError as exc:
        return [FieldProblem(where, str(exc))]
    except (ScheduleError, LookupError, ValueError):
        return []  # `at` or `timezone` is wrong: their own problems say so
    return []


def run_target(doc: JobDocument) -> dict[str, Any] | None:
    """The job's target as runs carry it (`jobs.target`, the envelopes' `target`): with the
    rule of its Idempotency-Key when the job has a template (`RunTarget`)."""
    if doc.target is None:
        return None
    target = doc.target.model_dump()
    if doc.idempotency_key_template is not None:
        target["idempotency_key"] = {
            "template": doc.idempotency_key_template,
            "timezone": doc.timezone,
        }
    return target


PAUSE_NOTE_MAX_CHARS = 500  # as migration 0016 bounds a pause note's reason


def check_pause_note(note: Any, field: str = "note") -> str:
    """A pause's note (why), or JobValidationError naming `field`: text of 1 to 500
    characters that the store can write (no NUL, no lone surrogate) and a terminal can show
    (line breaks and tabs, no other control character)."""
    if not isinstance(note, str):
        raise JobValidationError([FieldProblem(field, "must be a string")])
    if not 1 <= len(note) <= PAUSE_NOTE_MAX_CHARS:
        raise JobValidationError(
            [FieldProblem(field, f"must be 1 to {PAUSE_NOTE_MAX_CHARS} characters")]
        )
    if (message := _string_problem(note)) is not None:
        raise JobValidationError([FieldProblem(field, message)])
    if any((c < " " and c not in "\n\t") or c == "\x7f" for c in note):
        # Operators read notes in terminals (`tickwheel jobs show`): no escape sequences.
        raise JobValidationError(
            [FieldProblem(field, "may hold line breaks and tabs but no other control character")]
        )
    return note


def spec_from_stored(tenant: str, document: dict[str, Any], shards: int) -> JobSpec:
    """Rebuild the spec of a stored (already validated) document without re-checking limits."""
    doc = JobDocument.model_validate(document)
    return JobSpec(tenant=tenant, document=doc, shard_id=shard_of(tenant, doc.id, shards))
