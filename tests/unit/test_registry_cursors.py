"""The HTTP lists' keyset cursors: opaque, tagged with their list, refused when not issued."""

from __future__ import annotations

import pytest

from tickwheel.registry_api.cursors import (
    CursorError,
    decode_cursor,
    encode_cursor,
    jobs_after,
    jobs_cursor,
    runs_before,
    runs_cursor,
)

pytestmark = pytest.mark.unit


def test_cursors_are_opaque_and_tagged() -> None:
    """A cursor round-trips its position, is URL-safe, and carries its list's tag."""
    cursor = encode_cursor("j", "job:1.a-b_c")
    assert cursor.replace("-", "").replace("_", "").isalnum()
    assert decode_cursor(cursor, "j") == "job:1.a-b_c"
    with pytest.raises(ValueError):
        decode_cursor(cursor, "r")


def test_positions_round_trip_and_impossible_ones_are_refused() -> None:
    """job ids and run instants round-trip; a malformed id or an out-of-range instant does not"""
    assert jobs_after(jobs_cursor("a:b.c-1")) == "a:b.c-1"
    assert runs_before(runs_cursor(-5)) == -5
    for bad_jobs in (encode_cursor("j", "bad id/with slash"), "not base64!", "a" * 401):
        with pytest.raises(CursorError):
            jobs_after(bad_jobs)
    for bad_runs in (encode_cursor("r", "soon"), encode_cursor("r", "9999999999999999")):
        with pytest.raises(CursorError):
            runs_before(bad_runs)
