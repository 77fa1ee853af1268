"""Keyset cursors of the HTTP lists: opaque to clients, tagged with the list they belong to.

A cursor is unpadded base64url of `<tag>:<position>`: `j:<last job id>` for jobs,
`r:<scheduled_at ms of the last run>` for runs, so a cursor of one list is refused by the
other, and a position that could not have been issued (a malformed id, an instant outside
what Postgres timestamps hold) is refused before it reaches the database.
"""

from __future__ import annotations

import base64
import binascii
import re

from tickwheel.domain import JOB_ID_FORM
from tickwheel.schedule.cron import MAX_AFTER_MS, MIN_AFTER_MS

CURSOR_MAX_CHARS = 400

_CURSOR_TEXT = re.compile(r"^[A-Za-z0-9_-]+$")


class CursorError(ValueError):
    """A cursor this API did not issue (or issued for another list)."""


def encode_cursor(tag: str, position: str) -> str:
    return base64.urlsafe_b64encode(f"{tag}:{position}".encode()).rstrip(b"=").decode()


def decode_cursor(cursor: str, tag: str) -> str:
    """The position inside `cursor`, which must carry `tag`; CursorError otherwise."""
    if len(cursor) > CURSOR_MAX_CHARS or not _CURSOR_TEXT.match(cursor) or len(cursor) % 4 == 1:
        raise CursorError(cursor)
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        text = raw.decode()
    except (binascii.Error, UnicodeDecodeError):
        raise CursorError(cursor) from None
    found, sep, position = text.partition(":")
    if found != tag or not sep:
        raise CursorError(cursor)
    return position


def jobs_cursor(last_id: str) -> str:
    return encode_cursor("j", last_id)


def jobs_after(cursor: str) -> str:
    after = decode_cursor(cursor, "j")
    if not JOB_ID_FORM.fullmatch(after):
        raise CursorError(cursor)
    return after


def runs_cursor(before_ms: int) -> str:
    return encode_cursor("r", str(before_ms))


def runs_before(cursor: str) -> int:
    text = decode_cursor(cursor, "r")
    if not re.fullmatch(r"-?[0-9]{1,16}", text) or not (MIN_AFTER_MS <= int(text) < MAX_AFTER_MS):
        raise CursorError(cursor)  # out of range would overflow Postgres timestamps: a 500
    return int(text)
