"""The operators' input forms, pure: `--since`, `--rate`, JOB, and who is running a command.

A form that does not parse is `BadInput` naming the option and the form it wants.
"""

from __future__ import annotations

import getpass
import os
import re

from tickwheel.cli_support import BadInput
from tickwheel.domain import JOB_ID_FORM, JOB_ID_PATTERN, TENANT_FORM, TENANT_PATTERN
from tickwheel.schedule.errors import ScheduleError
from tickwheel.schedule.instants import parse_instant

_DURATION = re.compile(r"^(\d+)([smhd])$")
_DURATION_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(?:/s)?$")
# An operator's name, as the `operator_keys_name_form` constraint (migration 0005) holds it.
OPERATOR_NAME_RULE = "[A-Za-z0-9._@-]{1,64}"
_OPERATOR_NAME = re.compile(OPERATOR_NAME_RULE)


def parse_since(text: str, now: int) -> int:
    """Unix ms of `--since`: an ISO-8601 instant with Z or an offset, or `<n>s|m|h|d` ago."""
    match = _DURATION.match(text.strip())
    if match:
        return now - int(match[1]) * _DURATION_MS[match[2]]
    try:
        return parse_instant(text, "--since")
    except ScheduleError:
        raise BadInput(
            f"--since must be an ISO-8601 instant with Z or an offset "
            f"(2026-12-01T09:00:00Z) or a duration ago such as 90m, 6h or 7d, not {text!r}"
        ) from None


def parse_instant_option(text: str, option: str) -> int:
    """Unix ms of an option that takes an ISO-8601 instant (`--from`, `--to`)."""
    try:
        return parse_instant(text, option)
    except ScheduleError as exc:
        raise BadInput(exc.message) from None


def parse_rate(text: str) -> float:
    """Replays per second of `--rate`: `N` or `N/s`, positive."""
    match = _RATE.match(text.strip())
    rate = float(match[1]) if match else 0.0
    if rate <= 0:
        raise BadInput(
            f"--rate must be a positive number of replays per second (50/s), not {text!r}"
        )
    return rate


def parse_job_key(text: str) -> tuple[str, str]:
    """(tenant, job_id) of `<tenant>/<job_id>`, or BadInput naming the form."""
    tenant, slash, job_id = text.partition("/")
    if not slash or not tenant or not job_id or "/" in job_id:
        raise BadInput(f"JOB must look like <tenant>/<job_id>, not {text!r}")
    return _checked_identity(tenant, job_id)


def resolve_job(job: str, tenant: str | None) -> tuple[str, str]:
    """(tenant, job_id) of the JOB argument: `<tenant>/<job_id>`, or a bare id with --tenant."""
    if tenant is None:
        return parse_job_key(job)
    if "/" in job:
        raise BadInput(f"with --tenant, JOB is the job id alone, not {job!r}")
    return _checked_identity(tenant, job)


def _checked_identity(tenant: str, job_id: str) -> tuple[str, str]:
    """The parts as the ledger holds them (so '.' and '..', stored before issue 28, still
    name their jobs), or BadInput before any connection is made."""
    checked_tenant(tenant)
    if not JOB_ID_FORM.fullmatch(job_id):
        raise BadInput(f"the job id must match {JOB_ID_PATTERN[1:-1]}, not {job_id!r}")
    return tenant, job_id


def checked_tenant(tenant: str) -> str:
    """A tenant name as the ledger holds them, or BadInput before any connection is made."""
    if not TENANT_FORM.fullmatch(tenant):
        raise BadInput(f"the tenant must match {TENANT_PATTERN[1:-1]}, not {tenant!r}")
    return tenant


def checked_operator_name(name: str) -> str:
    """NAME of `operator-key add|revoke`, or BadInput before any connection is made."""
    if not _OPERATOR_NAME.fullmatch(name):
        raise BadInput(f"name: must match {OPERATOR_NAME_RULE}, not {name!r}")
    return name


def operator_name() -> str:
    """Who runs a replay, for the audit: $USER, else the login name."""
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
