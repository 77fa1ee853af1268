"""The HTTP API's OpenAPI `responses`. The models themselves (what the schema promises; the
request body is the job document) live on the ground, in `tickwheel.wire.responses`, where
`tickwheel.client` reads answers with them; they are re-exported here for the registry's
modules. Handlers render bodies themselves (render.py); the models only describe."""

from __future__ import annotations

from typing import Any

from tickwheel.wire.responses import (
    BackfillAccepted,
    BackfillBody,
    ErrorBody,
    FieldError,
    Health,
    Job,
    JobPage,
    JobPreview,
    KindValue,
    OriginValue,
    PartHealth,
    QuotaErrorBody,
    Run,
    RunPage,
    RunStatusValue,
    TriggerAccepted,
    ValidationErrorBody,
    VisibleStatus,
)

__all__ = [
    "BackfillAccepted",
    "BackfillBody",
    "ErrorBody",
    "FieldError",
    "Health",
    "Job",
    "JobPage",
    "JobPreview",
    "KindValue",
    "OriginValue",
    "PartHealth",
    "QuotaErrorBody",
    "Run",
    "RunPage",
    "RunStatusValue",
    "TriggerAccepted",
    "ValidationErrorBody",
    "VisibleStatus",
    "responses",
]


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` of an endpoint that may answer these error codes."""
    described: dict[int, dict[str, Any]] = {
        401: {"model": ErrorBody, "description": "missing, malformed or unknown API key"},
        404: {"model": ErrorBody, "description": "no such job for this tenant"},
        409: {"model": ErrorBody, "description": "the job's state does not allow this"},
        413: {"model": ErrorBody, "description": "request body too large"},
        422: {"model": ValidationErrorBody, "description": "invalid input, field by field"},
        429: {
            "model": QuotaErrorBody,
            "description": "a quota of the tenant refused it (Retry-After says when to retry)",
        },
        503: {"model": ErrorBody, "description": "the database is unavailable"},
    }
    return {code: described[code] for code in codes}
