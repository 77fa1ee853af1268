"""What a consumer writes back about a message it could not use (a rejection, an unreadable
run, a dead letter) always fits in one Kafka message: free text is cut (`cut_text`), and a
report that quotes the original message quotes as much of its start as fits, with the whole
message's size and SHA-256 (`fit_original`, `quote_original`, `unquote_original`), so that a
huge message cannot make its own report unsendable.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from tickwheel.envelopes.parsing import EnvelopeError, take

# Free text quoted in a report (a rejection's reason, a run's error) longer than this is cut,
# with "…": it may quote input (a field path, a key, an exception's message), and input can be
# as large as the message itself.
TEXT_MAX_CHARS = 2000


def cut_text(text: str, max_chars: int = TEXT_MAX_CHARS) -> str:
    """`text`, or its first characters and "…" when it is longer than `max_chars`."""
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


class _Encodes(Protocol):
    def encode(self) -> bytes: ...


_Fitted = TypeVar("_Fitted", bound=_Encodes)


def fit_original(
    build: Callable[[bytes, int | None, str | None], _Fitted], original: bytes, max_bytes: int
) -> _Fitted:
    """`build(original, size, sha256)` with the whole original if its encoding fits in
    `max_bytes`, else with as much of the original's start as fits beside its size and digest."""
    # base64 makes 4 bytes of 3: skip encoding what cannot fit anyway.
    if len(original) // 3 * 4 < max_bytes:
        whole = build(original, None, None)
        if len(whole.encode()) <= max_bytes:
            return whole
    digest = hashlib.sha256(original).hexdigest()
    room = max_bytes - len(build(b"", len(original), digest).encode())
    if room < 0:
        raise ValueError(f"a report of this message cannot fit in {max_bytes} bytes")
    return build(original[: room // 4 * 3], len(original), digest)


def quote_original(
    body: dict[str, Any], original: bytes, size: int | None, sha256: str | None
) -> None:
    """The quoted original, and when it was cut, its whole size and digest."""
    body["original"] = base64.b64encode(original).decode()
    if size is not None:
        body["truncated"] = True
        body["original_size"] = size
        body["original_sha256"] = sha256


def unquote_original(obj: dict[str, Any]) -> tuple[bytes, int | None, str | None, bool]:
    truncated = take(obj, "truncated", bool, optional=True) or False
    return (
        _b64(take(obj, "original", str)),
        take(obj, "original_size", int, optional=not truncated),
        take(obj, "original_sha256", str, optional=not truncated),
        truncated,
    )


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise EnvelopeError("field 'original' is not base64") from None
