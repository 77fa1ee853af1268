"""The Idempotency-Key an HTTP target receives, from the job's `idempotency_key_template`
(issue 50; the default, without a template, stays the run key).

A template is text with placeholders:

    {tenant}              the job's tenant
    {job}                 the job's id
    {scheduled}           the run's scheduled instant in the job's zone, ISO-8601 with its
                          offset (2027-01-15T09:00:00+01:00)
    {scheduled:FORMAT}    the same instant formatted by FORMAT's strftime fields, of which only
                          the locale-free ones: %Y %y %m %d %H %M %S %j %G %V %u %%
                          (`report-{scheduled:%G-W%V}`: one key per ISO week)
    {{ and }}             a literal brace

Everything else is literal text of visible ASCII characters. A key renders to at most
KEY_MAX_CHARS characters, visible ASCII, so it is a valid header value wherever it is sent.
The template is checked when the job is registered (`parse`, then a sample `render`); a worker
renders each call's key with the zone the registry resolved (`render`). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo

TEMPLATE_MAX_CHARS = 200
KEY_MAX_CHARS = 255  # the registry's own rule for an Idempotency-Key (issue 28)
FIELDS = ("tenant", "job", "scheduled")
DIRECTIVES = frozenset("YymdHMSjGVu%")
_LITERAL = re.compile(r"[!-z|~]+")  # visible ASCII but the braces


class TemplateError(ValueError):
    """A template that cannot be used; the message names what is wrong."""


@dataclass(frozen=True, slots=True)
class Part:
    """A literal (`field` None) or a placeholder (`field` with its strftime `format`)."""

    text: str
    field: str | None = None
    format: str | None = None


@lru_cache(maxsize=4096)
def parse(template: str) -> tuple[Part, ...]:
    """The template's parts, or TemplateError."""
    if not 1 <= len(template) <= TEMPLATE_MAX_CHARS:
        raise TemplateError(f"must be 1 to {TEMPLATE_MAX_CHARS} characters")
    parts: list[Part] = []
    literal: list[str] = []
    i = 0
    while i < len(template):
        c = template[i]
        if template.startswith("{{", i) or template.startswith("}}", i):
            literal.append(c)
            i += 2
        elif c == "{":
            end = template.find("}", i)
            if end < 0:
                raise TemplateError(f"has a '{{' at {i} that no '}}' closes")
            if literal:
                parts.append(Part("".join(literal)))
                literal = []
            parts.append(_placeholder(template[i + 1 : end]))
            i = end + 1
        elif c == "}":
            raise TemplateError(f"has a lone '}}' at {i}; write '}}}}' for a literal one")
        elif not _LITERAL.fullmatch(c):
            raise TemplateError(f"has {c!r} at {i}; only visible ASCII characters are allowed")
        else:
            literal.append(c)
            i += 1
    if literal:
        parts.append(Part("".join(literal)))
    if not any(p.field for p in parts):
        raise TemplateError(
            "has no placeholder: every run would send the same key; use {tenant}, {job}, "
            "{scheduled} or {scheduled:FORMAT}"
        )
    return tuple(parts)


def _placeholder(inside: str) -> Part:
    name, colon, fmt = inside.partition(":")
    if name not in FIELDS:
        raise TemplateError(
            f"has an unknown placeholder {{{inside}}}; use {{tenant}}, {{job}}, {{scheduled}} "
            "or {scheduled:FORMAT}"
        )
    if not colon:
        return Part(inside, name)
    if name != "scheduled":
        raise TemplateError(f"{{{name}}} takes no format; only {{scheduled:FORMAT}} does")
    if not fmt:
        raise TemplateError("{scheduled:} has an empty format")
    fields = re.findall(r"%(.?)", fmt)  # each `%` and the character after it, left to right
    if any(d == "" or d not in DIRECTIVES for d in fields):
        raise TemplateError(
            f"{{scheduled:{fmt}}} uses a strftime field other than "
            + " ".join(f"%{d}" for d in sorted(DIRECTIVES))
        )
    if not any(d != "%" for d in fields):
        raise TemplateError(f"{{scheduled:{fmt}}} has no strftime field")
    return Part(inside, name, fmt)


def render(template: str, tenant: str, job_id: str, scheduled_ms: int, timezone: str) -> str:
    """The key of one run: `template` (checked by `parse`) filled in; TemplateError when the
    result is not a valid key (too long, or not visible ASCII: a tenant's or job's id)."""
    local = datetime.fromtimestamp(scheduled_ms / 1000, UTC).astimezone(ZoneInfo(timezone))
    out = []
    for part in parse(template):
        if part.field is None:
            out.append(part.text)
        elif part.field == "tenant":
            out.append(tenant)
        elif part.field == "job":
            out.append(job_id)
        elif part.format is None:
            out.append(local.isoformat(timespec="seconds"))
        else:
            out.append(local.strftime(part.format))
    key = "".join(out)
    if len(key) > KEY_MAX_CHARS:
        raise TemplateError(f"renders a key of {len(key)} characters; at most {KEY_MAX_CHARS}")
    if not key.isascii() or not key.isprintable() or " " in key:
        raise TemplateError(f"renders {key!r}, which is not visible ASCII")
    return key
